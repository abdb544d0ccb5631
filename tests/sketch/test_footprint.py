"""The footprint budget: a build keeps the whole dataset within its budget by serving fewer attributes in
place and fewer value indexes — the cheapest first — and answers every question as a build without a budget
does; ``info.footprint`` adds up to what lies on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from api.service.queries import run_query
from exact.errors import InputError
from exact.reference import stream_table
from exact.store import EventStore, dataset_dir, store_dir
from exact.store.footprint import MIN_ALLOWANCE
from exact.store.seek import open_seek
from exact.store.seek_format import seek_name
from sketch.build import BuildOptions
from sketch.build_request import BuildRequest
from sketch.dataset import Dataset, dataset_info

QUERIES = ["PATTERN SEQ(A a, B b) WHERE a.amount > 5000 AND b.amount < a.amount WITHIN 40 EVENTS",
           "PATTERN SEQ(A a, C c) WHERE a.who = 'r3' AND c.x < 0.2 PARTITION BY case WITHIN 400 EVENTS "
           "STRATEGY skip_till_next_match",
           "PATTERN SEQ(B b, D d) WHERE d.amount >= b.amount PARTITION BY case WITHIN 30 EVENTS "
           "STRATEGY partition_contiguity"]


def _rows(n: int) -> list[dict]:
    rng = np.random.default_rng(4)
    return [{"seq": i, "type": "ABCDE"[int(rng.integers(0, 5))], "ts": i * 1000,
             "case": f"c{int(rng.integers(0, 400))}", "amount": float(np.round(rng.uniform(0, 10_000), 2)),
             "who": f"r{int(rng.integers(0, 12))}", "x": float(rng.random())} for i in range(n)]


def _answers(home: Path) -> list:
    out = [(q, m, a.get("count"), a.get("matches")) for q in QUERIES for m in ("exact", "verified")
           for a in [run_query(home, "d", q, mode=m, limit=10_000)]]
    assert all(matches for _, _, _, matches in out)  # (every question has matches to compare)
    return out


def test_a_budget_serves_fewer_attributes_and_answers_alike(tmp_path: Path) -> None:
    rows = _rows(30_000)
    full, tight = tmp_path / "full", tmp_path / "tight"
    Dataset.build(full, "d", stream_table(rows), BuildOptions(leaf_size=32), partition_key="case")
    Dataset.build(tight, "d", stream_table(rows), BuildOptions(leaf_size=32, footprint=2.0), partition_key="case")
    wide, narrow = dataset_info(full, "d"), dataset_info(tight, "d")
    for info in (wide, narrow):
        structures = info["footprint"]["structures"]
        assert sum(e["bytes"] for e in structures.values()) == info["footprint"]["bytes"]
        store = EventStore.open(store_dir(dataset_dir("d", full if info is wide else tight)))
        on_disk = sum((store.root / "parts" / f).stat().st_size for p in store.snapshot().parts for f in p.files)
        parts = structures["parts"]["bytes"]
        assert on_disk == parts + sum(e["bytes"] for k, e in structures.items()
                                      if k in ("types", "times", "rows_by_type", "values", "value_indexes",
                                               "seek_headers"))
    assert wide["footprint"]["ratio"] > 2.0 >= narrow["footprint"]["ratio"]
    assert wide["footprint"]["structures"]["value_indexes"]["bytes"] > 0
    # what the budget leaves out is what costs most: the value indexes before the columns
    assert (narrow["footprint"]["structures"]["value_indexes"]["bytes"]
            < wide["footprint"]["structures"]["value_indexes"]["bytes"])
    store = EventStore.open(store_dir(dataset_dir("d", tight)))
    part = store.snapshot().parts[0]
    seek = open_seek(store.root / "parts" / seek_name(part.file), part.rows)
    assert any(c.index is None for c in seek.attrs.values()) or set(narrow["attr_index"]["unserved"]) - {"case"}
    assert _answers(tight) == _answers(full)


def test_a_budget_is_kept_by_appends_and_refused_below_one(tmp_path: Path) -> None:
    rows = _rows(40_000)
    Dataset.build(tmp_path, "d", stream_table(rows[:20_000]), BuildOptions(leaf_size=32, footprint=1.2))
    Dataset.open(tmp_path, "d").append(stream_table(rows[20_000:]))
    store = EventStore.open(store_dir(dataset_dir("d", tmp_path)))
    assert len(store.snapshot().parts) == 2
    for part in store.snapshot().parts:  # (1.2 leaves nothing: only what any part may take)
        assert 0 < sum(size for _, size in part.seek_attrs) <= MIN_ALLOWANCE
        assert "x" not in dict(part.seek_attrs)  # (the costliest column is the first left out)
    from api.service.datasets import build_from_inputs

    source = tmp_path / "e.csv"
    source.write_text("type,ts\nA,2024-01-01T00:00:00Z\n")
    with pytest.raises(InputError, match="footprint"):
        build_from_inputs(tmp_path, "e", [str(source)], BuildRequest(footprint=0.5))
