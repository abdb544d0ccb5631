"""What a default build takes on disk, by structure, beside its Parquet parts — and what a tighter budget costs.

``python -m bench footprint [--quick]`` (``SEQSKETCH_FOOTPRINT_EVENTS`` sets the ACER-like stream's length,
default 10,000,000, 1,000,000 with ``--quick``; ``SEQSKETCH_FOOTPRINT_QUERIES`` the ACER-like questions timed
under each budget, default 10 (5), ``SEQSKETCH_FOOTPRINT_ROUNDS`` the timed runs of each, default 5 (3)).

Two datasets, each built in process (the local builder; a Spark build writes the same parts): BPI Challenge
2012 (``../shared/data``, partitioned by case as a default build is) and :mod:`bench.acer`'s stream.  Each is
built with the default footprint budget and with ``--footprint 1.5``; per build the record has ``info``'s
``footprint`` (bytes and ratio to the Parquet parts, per structure) and the attributes served in place with
and without a value index.  On the ACER-like stream the same questions are answered (verified, the default
mode) on both builds, answers checked equal first, and their median latencies compared: what the budget's
savings cost in time.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.acer import generate, questions
from bench.timing import median_ms, ratio
from exact.store import EventStore, dataset_dir, store_dir
from exact.store.seek import open_seek
from exact.store.seek_format import seek_name
from sketch.build import BuildOptions
from sketch.build_request import BuildRequest
from sketch.dataset import Dataset, dataset_info

BPI = Path(__file__).resolve().parents[2] / "shared" / "data" / "bpic2012.xes.gz"
TIGHT = 1.5


def _served(home: Path, name: str) -> dict[str, str]:
    """Per attribute of the first part: served with a value index, without, or not served."""
    store = EventStore.open(store_dir(dataset_dir(name, home)))
    part = store.snapshot().parts[0]
    seek = open_seek(store.root / "parts" / seek_name(part.file), part.rows)
    out = {a: "indexed" if c.index is not None else "values" for a, c in seek.attrs.items()}
    return out | {a: "not served" for a in sorted(seek.unserved or ())}


def _built(home: Path, name: str, build: Any) -> dict[str, Any]:
    started = time.perf_counter()
    build()
    seconds = time.perf_counter() - started
    info = dataset_info(home, name)
    return {"build_s": round(seconds, 2), "events": info["events"], "footprint": info["footprint"],
            "served": _served(home, name)}


def run(quick: bool = False) -> dict[str, Any]:
    from api.service.datasets import build_from_inputs
    from api.service.queries import run_query

    events = int(os.environ.get("SEQSKETCH_FOOTPRINT_EVENTS") or (1_000_000 if quick else 10_000_000))
    count = int(os.environ.get("SEQSKETCH_FOOTPRINT_QUERIES") or (5 if quick else 10))
    rounds = int(os.environ.get("SEQSKETCH_FOOTPRINT_ROUNDS") or (3 if quick else 5))
    root = Path(tempfile.mkdtemp(prefix="seqsketch-bench-footprint-"))
    out: dict[str, Any] = {"tight_budget": TIGHT}
    try:
        for label, footprint in (("default", None), ("tight", TIGHT)):
            home = root / f"bpi-{label}"
            out[f"bpi_{label}"] = _built(home, "bpi", lambda home=home, footprint=footprint: build_from_inputs(
                home, "bpi", [str(BPI)], BuildRequest(footprint=footprint)))
        stream = generate(events)
        homes = {}
        for label, footprint in (("default", None), ("tight", TIGHT)):
            homes[label] = home = root / f"acer-{label}"
            out[f"acer_{label}"] = _built(home, "acer", lambda home=home, footprint=footprint: Dataset.build(
                home, "acer", stream, BuildOptions(footprint=footprint)))
        rows = []
        for q in questions(random.Random(17), count):
            text = q.text()
            answers = {k: run_query(h, "acer", text)["count"] for k, h in homes.items()}
            assert answers["default"] == answers["tight"], (text, answers)
            times = {k: median_ms(lambda h=h, text=text: run_query(h, "acer", text), rounds) for k, h in homes.items()}
            rows.append({"query": text, "count": answers["default"], "default_ms": times["default"],
                         "tight_ms": times["tight"], "tight_over_default": ratio(times["tight"], times["default"], 2)})
        out.update(acer_events=events, questions=rows,
                   tight_over_default_median=statistics.median(r["tight_over_default"] for r in rows
                                                              if r["tight_over_default"] is not None))
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)
