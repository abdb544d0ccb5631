"""The partition layout and tree built from a store part by part (sketch.partition_store, what a Spark
build runs) equal those built from the whole table in memory (sketch.dataset.build_partition_into, what the
local build runs): every layout array, the keys, and the tree's digest — over keys of every type, keys some
events lack, groups larger than a leaf, and stores of many parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exact.events import make_table
from exact.ingest import with_seq
from exact.layout import build_layout
from exact.store import EventStore
from sketch.build import BuildOptions
from sketch.dataset import (
    AUTO_KEY,
    Dataset,
    build_partition_into,
    partition_into_store,
    partition_options,
)
from sketch.partition_store import layout_from_columns, partition_tree_from_columns, store_layout_columns


def stream(seed: int, n: int, groups: int, kind: str, missing: float, big: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    raw = rng.zipf(1.3, n) % groups if big else rng.integers(0, groups, n)
    values: list = {"int": raw.tolist(), "str": [f"c-{v}" for v in raw.tolist()],
                    "float": [(-0.0 if v == 0 else float(v) / 2) for v in raw.tolist()]}[kind]
    if kind == "float":
        values = [float("nan") if i % 17 == 3 else v for i, v in enumerate(values)]
    values = [None if rng.random() < missing else v for v in values]
    ts = np.sort(rng.integers(0, 10_000, n))
    types = [f"T{x}" for x in rng.integers(0, 30, n)]
    return with_seq(make_table(ts.tolist(), types, {"case": pa.array(values), "other": pa.array(raw)}))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3_000), groups=st.integers(1, 200),
       kind=st.sampled_from(["int", "str", "float"]), missing=st.sampled_from([0.0, 0.2]),
       big=st.booleans(), part_rows=st.sampled_from([50, 700, 10_000]), leaf=st.sampled_from([2, 8, 64]))
def test_store_built_partition_equals_whole_table_build(tmp_path_factory: pytest.TempPathFactory, seed: int,
                                                        n: int, groups: int, kind: str, missing: float,
                                                        big: bool, part_rows: int, leaf: int) -> None:
    table = stream(seed, n, groups, kind, missing, big)
    folder = tmp_path_factory.mktemp("store")
    store = EventStore.create(folder / "store", table, part_rows=part_rows)
    snap = store.snapshot()
    types = tuple(sorted(snap.type_counts))
    group, keys, code, ts = store_layout_columns(store, snap, "case", types)
    layout = layout_from_columns("case", group, keys, code, types)
    expected = build_layout(table, "case")
    for name in ("group_of", "order", "group_off", "type_off", "type_codes"):
        mine, theirs = getattr(layout, name), getattr(expected, name)
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), name
    assert layout.types == expected.types and layout.keys.equals(expected.keys)
    options = BuildOptions(leaf_size=leaf)
    mine = partition_tree_from_columns(layout, code, ts, partition_options(options))
    theirs = build_partition_into(folder / "whole", table, "case", options, version=1)
    assert mine.digest() == theirs["partition_index"]["index_digest"]


def test_partition_into_store_equals_a_local_build(tmp_path: Path, shared_data: Path) -> None:
    """On the running example, through the dataset functions both builds call."""
    from exact.ingest import ingest

    table = ingest([shared_data / "running-example.xes"])
    local = Dataset.build(tmp_path, "local", table)
    root = tmp_path / "spark"
    store = EventStore.create(root / "store", table, part_rows=7)
    with store.writing():
        partition_into_store(root, store, AUTO_KEY, BuildOptions())
    mine = store.snapshot().extra["partition_index"]
    theirs = local.store.snapshot().extra["partition_index"]
    assert mine["index_digest"] == theirs["index_digest"] and mine["groups"] == theirs["groups"]
    assert (root / mine["file"]).read_bytes() == (local.root / theirs["file"]).read_bytes()
    layout_file = store.snapshot().extra["layout"]["file"]
    assert (root / layout_file).read_bytes() == (local.root / layout_file).read_bytes()


def test_default_key_needs_every_event(tmp_path: Path) -> None:
    table = stream(1, 500, 20, "str", 0.1, False)
    store = EventStore.create(tmp_path / "store", table, part_rows=100)
    with store.writing():
        partition_into_store(tmp_path, store, AUTO_KEY, BuildOptions())
    assert "partition_index" not in store.snapshot().extra  # some events lack "case": no default key
    with store.writing():
        partition_into_store(tmp_path, store, "case", BuildOptions())  # named: those without form none
    assert store.snapshot().extra["partition_index"]["key"] == "case"
