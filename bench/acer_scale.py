"""The ACER-like workload at scale: the stream of :mod:`bench.acer` built on Spark, then its questions.

``python -m bench acer_scale [--quick]`` (``SEQSKETCH_ACER_SCALE_EVENTS`` sets the stream's length, default
100,000,000, 10,000,000 with ``--quick``; ``SEQSKETCH_ACER_QUERIES`` the questions, default 12;
``SEQSKETCH_ACER_ROUNDS`` the timed runs of each, default 3 (1)).

The stream is written as 20 Parquet files (flat columns ``ts``, ``type``, ``a1`` … ``a4``; each file generated
on its own, so memory holds one file's events) and built as a user builds it —
``seqsketch build acer FILES --engine spark --json`` in a fresh process, under :func:`bench.memtree.measure`
(peak memory of the process tree, ``local[*]``). Then every question of :func:`bench.acer.questions` (the same
seed as ``bench acer``) runs in verified and exact mode in this process; their counts are checked equal. The
record holds the build's seconds and peak memory, the sizes (Parquet parts, seek files, trees) and per
question the median latencies and the events read. DuckDB is not run at this size: at 10M events two of
its band self-joins already ran past a minute (``bench acer``).
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.acer import ATTRS, generate, questions
from bench.memtree import measure

REPO = Path(__file__).resolve().parents[1]
FILES = 20


def write_inputs(events: int, folder: Path, files: int = FILES) -> list[Path]:
    """The stream as ``files`` Parquet files of consecutive events, each generated on its own."""
    folder.mkdir(parents=True, exist_ok=True)
    per = math.ceil(events / files)
    paths = []
    for f in range(files):
        first = f * per
        n = min(per, events - first)
        if n <= 0:
            break
        table = generate(n, seed=1000 + f, first=first)
        attrs = table.column("attrs").combine_chunks()
        flat = pa.table({"ts": table.column("ts"), "type": table.column("type"),
                         **{a: attrs.field(a) for a in ATTRS}})
        path = folder / f"acer-{f:03d}.parquet"
        pq.write_table(flat, path, compression="zstd", row_group_size=1 << 20)
        paths.append(path)
    return paths


def _sizes(dataset: Path) -> dict[str, int]:
    files = [p for p in dataset.rglob("*") if p.is_file()]
    seek = sum(p.stat().st_size for p in files if p.suffix == ".seek")
    store = sum(p.stat().st_size for p in files if "store" in p.parts) - seek
    return {"store_bytes": store, "seek_bytes": seek,
            "index_bytes": sum(p.stat().st_size for p in files if "store" not in p.parts)}


def run(quick: bool = False) -> dict[str, Any]:
    from api.service import run_query

    events = int(os.environ.get("SEQSKETCH_ACER_SCALE_EVENTS", 10_000_000 if quick else 100_000_000))
    count = int(os.environ.get("SEQSKETCH_ACER_QUERIES", 12))
    rounds = int(os.environ.get("SEQSKETCH_ACER_ROUNDS", 1 if quick else 3))
    with tempfile.TemporaryDirectory(prefix="seqsketch-acer-scale-") as tmp:
        home = Path(tmp)
        started = time.perf_counter()
        inputs = write_inputs(events, home / "inputs")
        written_s = time.perf_counter() - started
        env = {**os.environ, "PYTHONPATH": str(REPO), "SEQSKETCH_HOME": str(home)}
        out, err = home / "build.out", home / "build.err"
        command = [sys.executable, "-m", "api.cli", "build", "acer", *map(str, inputs), "--engine", "spark",
                   "--json"]
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            figures = measure(command, env=env, cwd=home, stdout=stdout, stderr=stderr)
        if figures["returncode"] != 0:
            raise RuntimeError("the Spark build failed: " + err.read_text(errors="replace")[-2000:])
        summary = json.loads(out.read_text())
        for p in inputs:
            p.unlink()
        rows = []
        for q in questions(random.Random(31), count):
            text = q.text()
            times: dict[str, list[float]] = {"verified": [], "exact": []}
            bodies: dict[str, dict[str, Any]] = {}
            for r in range(rounds):
                for mode in ("verified", "exact") if r % 2 == 0 else ("exact", "verified"):  # in turn
                    t = time.perf_counter()
                    bodies[mode] = run_query(home, "acer", text, mode=mode)
                    times[mode].append(1000 * (time.perf_counter() - t))
            if bodies["verified"]["count"] != bodies["exact"]["count"]:
                raise AssertionError(f"verified {bodies['verified']['count']} != exact "
                                     f"{bodies['exact']['count']}: {text}")
            row = {"query": text, "strategy": q.strategy, "variables": len(q.variables),
                   "count": bodies["exact"]["count"],
                   "verified_ms": round(statistics.median(times["verified"]), 2),
                   "exact_ms": round(statistics.median(times["exact"]), 2),
                   "verified_scanned": bodies["verified"]["stats"]["events_scanned"],
                   "exact_scanned": bodies["exact"]["stats"]["events_scanned"],
                   "verified_index": bodies["verified"]["stats"]["index"],
                   "verified_approximate_ms": bodies["verified"]["stats"]["approximate_ms"]}
            print(f"{q.strategy:<28} k={row['variables']} count {row['count']:>10}  verified "
                  f"{row['verified_ms']:9.1f} ms  exact {row['exact_ms']:9.1f} ms  read "
                  f"{row['verified_scanned']:>10}", flush=True)
            rows.append(row)
        sizes = _sizes(home / "datasets" / "acer")
    return {"events": events, "inputs_written_s": round(written_s, 1), "build_s": round(figures["seconds"], 1),
            "build_timings": summary.get("timings"), "build_peak_of_sum_bytes": figures["peak_of_sum_bytes"],
            "build_sum_of_peaks_bytes": figures["sum_of_peaks_bytes"], **sizes,
            "index_over_store": round(sizes["index_bytes"] / max(sizes["store_bytes"], 1), 4), "rows": rows,
            "verified_p50_ms": round(statistics.median(r["verified_ms"] for r in rows), 2),
            "exact_p50_ms": round(statistics.median(r["exact_ms"] for r in rows), 2)}
