"""The partition layout and the partition-clustered tree as files of a dataset: built from a stream table or
from the Spark build's columns, written beside the stream tree's index versions, and their manifest entries
(``extra["partition_index"]`` and the layout's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.events import micros
from exact.store import EventStore
from exact.store.grouping import LAYOUT_KEY, Layout, build_layout, write_layout
from sketch import persist
from sketch.build import BuildOptions
from sketch.index_files import INDEX_DIR, file_token
from sketch.partition.build_columns import Columns
from sketch.partition.index import build_partition_tree
from sketch.tree import BloomTree

#: The manifest's entry naming the partition tree (``extra["partition_index"]``), and the folder of layouts.
PARTITION_KEY = "partition_index"
PARTITION_DIR = "partition"
#: ``partition_key`` of a build that names none: the default key when every event has it.
AUTO_KEY = "<auto>"
#: The partition tree's leaves hold this many times the stream tree's: it only cuts the groups down
#: coarsely before the layout's exact type sets decide, and so costs a quarter of the bytes.
PARTITION_LEAVES = 4


def partition_options(options: BuildOptions) -> BuildOptions:
    """The build options of the partition tree, from those of the stream tree."""
    from dataclasses import replace

    return replace(options, leaf_size=options.leaf_size * PARTITION_LEAVES)


def partition_from_columns(dataset_root: Path, store: EventStore, key: str, columns: Columns,
                           options: BuildOptions) -> None:
    """Add the partition layout and tree to a store just written (by the Spark job) from its events'
    compact columns (:func:`sketch.partition.build_columns.merge_window_columns`): the same bits as
    :func:`sketch.dataset.build_index_into` makes of the same events.  The caller holds the store's writer lock."""
    from sketch.partition.assemble import layout_from_columns, partition_tree_from_columns

    snap = store.snapshot()
    group, keys, code, ts = columns
    layout = layout_from_columns(key, group, keys, code, tuple(sorted(snap.type_counts)))
    ptree = partition_tree_from_columns(layout, code, ts, partition_options(options))
    store.commit((), write_partition(dataset_root, layout, ptree, version=1), expect_version=snap.version)


def build_partition_into(dataset_root: Path, table: pa.Table, key: str, options: BuildOptions, *,
                         version: int) -> dict[str, Any]:
    """The partition layout and tree of a whole stream table, written into ``dataset_root`` (not yet
    published); returns their manifest entries."""
    layout = build_layout(table, key)
    codes = pc.index_in(table.column("type").combine_chunks().cast(pa.string()),
                        value_set=pa.array(layout.types, pa.string())).to_numpy(zero_copy_only=False)
    base = int(table.column("seq")[0].as_py()) if "seq" in table.column_names and table.num_rows else 0
    ptree = build_partition_tree(layout, codes.astype(np.int64), micros(table.column("ts")),
                                 partition_options(options), base=base)
    return write_partition(dataset_root, layout, ptree, version=version)


def write_partition(dataset_root: Path, layout: Layout, ptree: BloomTree, *, version: int) -> dict[str, Any]:
    """Write a partition layout and its tree into ``dataset_root`` (not yet published); returns their
    manifest entries."""
    layout_ref = write_layout(dataset_root / PARTITION_DIR, layout, version)
    layout_ref["file"] = f"{PARTITION_DIR}/{layout_ref['file']}"
    name = f"{INDEX_DIR}/ptree-{version:06d}-{file_token()}.sqt"
    (dataset_root / INDEX_DIR).mkdir(parents=True, exist_ok=True)
    size = persist.save(ptree, dataset_root / name)
    ptree_ref = {"file": name, "key": layout.key, "events": layout.events, "groups": layout.groups,
                 "index_digest": ptree.digest(), "bytes": size, "config": ptree.config.to_dict()}
    return {LAYOUT_KEY: layout_ref, PARTITION_KEY: ptree_ref}
