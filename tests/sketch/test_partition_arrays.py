"""The partition layout and tree a Spark build makes — each window's compact columns
(sketch.partition.build_columns), merged in the driver and built by compiled kernels (sketch.partition.assemble) —
equal those built from the whole table in memory (sketch.dataset.build_partition_into, what the local
build runs): every layout array, the keys, the tree's digest and the files' bytes — over keys of every
type, keys some events lack, groups larger than a leaf, and streams cut into many windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.events import make_table
from exact.ingest import with_seq
from exact.store import EventStore
from exact.store.grouping import build_layout
from sketch.build import BuildOptions
from sketch.dataset import Dataset, build_partition_into, partition_from_columns, partition_options
from sketch.partition.assemble import layout_from_columns, partition_tree_from_columns
from sketch.partition.build_columns import merge_window_columns, window_columns
from tests.generators import scaled, zipf_codes


def stream(seed: int, n: int, groups: int, kind: str, missing: float, big: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    raw = zipf_codes(rng, n, groups, 1.3) if big else rng.integers(0, groups, n)
    values: list = {"int": raw.tolist(), "str": [f"c-{v}" for v in raw.tolist()],
                    "float": [(-0.0 if v == 0 else float(v) / 2) for v in raw.tolist()]}[kind]
    if kind == "float":
        values = [float("nan") if i % 17 == 3 else v for i, v in enumerate(values)]
    values = [None if rng.random() < missing else v for v in values]
    ts = np.sort(rng.integers(0, 10_000, n))
    types = [f"T{x}" for x in rng.integers(0, 30, n)]
    return with_seq(make_table(ts.tolist(), types, {"case": pa.array(values), "other": pa.array(raw)}))


def windowed(table: pa.Table, folder: Path, window: int) -> tuple[list[str], int]:
    """The table cut into windows of ``window`` events, each written as a window task writes it."""
    paths, keyless = [], 0
    for i, start in enumerate(range(0, table.num_rows, window)):
        path = folder / f"partition-{i:06d}.arrow"
        keyless += window_columns(table.slice(start, window), "case", path)
        paths.append(str(path))
    return paths, keyless


@scaled(25)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3_000), groups=st.integers(1, 200),
       kind=st.sampled_from(["int", "str", "float"]), missing=st.sampled_from([0.0, 0.2]),
       big=st.booleans(), window=st.sampled_from([50, 700, 10_000]), leaf=st.sampled_from([2, 8, 64]))
def test_window_columns_build_the_partition_of_the_whole_table(tmp_path_factory: pytest.TempPathFactory,
                                                               seed: int, n: int, groups: int, kind: str,
                                                               missing: float, big: bool, window: int,
                                                               leaf: int) -> None:
    table = stream(seed, n, groups, kind, missing, big)
    folder = tmp_path_factory.mktemp("windows")
    paths, keyless = windowed(table, folder, window)
    expected = build_layout(table, "case")
    assert keyless == int(np.sum(expected.group_of < 0))
    group, keys, code, ts = merge_window_columns(paths, n, expected.types)
    layout = layout_from_columns("case", group, keys, code, expected.types)
    for name in ("group_of", "order", "group_off", "type_off", "type_codes", "type_counts"):
        mine, theirs = getattr(layout, name), getattr(expected, name)
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), name
    assert layout.keys.equals(expected.keys)
    options = BuildOptions(leaf_size=leaf)
    mine = partition_tree_from_columns(layout, code, ts, partition_options(options))
    theirs = build_partition_into(folder / "whole", table, "case", options, version=1)
    assert mine.digest() == theirs["partition_index"]["index_digest"]


def test_partition_from_columns_writes_the_local_builds_files(tmp_path: Path, shared_data: Path) -> None:
    """On the running example, through the dataset functions both builds call: the same file bytes."""
    from exact.ingest import ingest

    table = ingest([shared_data / "running-example.xes"])
    local = Dataset.build(tmp_path, "local", table)
    root = tmp_path / "spark"
    store = EventStore.create(root / "store", table, part_rows=7)
    paths, _ = windowed(table, tmp_path, 10)
    columns = merge_window_columns(paths, table.num_rows, tuple(sorted(store.snapshot().type_counts)))
    with store.writing():
        partition_from_columns(root, store, "case", columns, BuildOptions())
    for entry in ("partition_index", "layout"):
        mine, theirs = store.snapshot().extra[entry], local.store.snapshot().extra[entry]
        assert (root / mine["file"]).read_bytes() == (local.root / theirs["file"]).read_bytes()
    assert store.snapshot().extra["partition_index"]["index_digest"] == \
        local.store.snapshot().extra["partition_index"]["index_digest"]


@pytest.mark.parametrize("share", [0, 10**9], ids=["bisected", "marked"])
@scaled(40)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 400), groups=st.integers(1, 60), asked=st.data())
def test_the_rows_of_types_in_chosen_groups_are_those_events(share: int, seed: int, n: int, groups: int,
                                                             asked: st.DataObject) -> None:
    """A layout's rows of some types in some groups — found by bisecting each type's run of entries or by
    marking the groups asked — are the events of those types in those groups, every one once; and it counts
    them per group."""
    import exact.store.grouping as grouping

    table = stream(seed, n, groups, "int", 0.1, False)
    layout = build_layout(table, "case")
    chosen = np.asarray(sorted(asked.draw(st.sets(st.integers(0, max(layout.groups - 1, 0)), max_size=20)))
                        if layout.groups else [], dtype=np.int64)
    types = frozenset(asked.draw(st.sets(st.sampled_from([f"T{i}" for i in range(32)]), min_size=1, max_size=5)))
    saved = grouping._BISECT_SHARE
    grouping._BISECT_SHARE = share
    try:
        found = layout.rows_of_types(chosen, types)
        sizes = layout.sizes_of_types(chosen, types)
    finally:
        grouping._BISECT_SHARE = saved
    of_type = np.isin(np.asarray(table.column("type").to_pylist(), dtype=object), list(types))
    expected = np.flatnonzero(of_type & np.isin(layout.group_of, chosen))
    assert sorted(found.tolist()) == expected.tolist()
    assert sizes.tolist() == [int(np.count_nonzero(of_type & (layout.group_of == g))) for g in chosen.tolist()]
