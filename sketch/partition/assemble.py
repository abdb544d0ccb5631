"""The partition layout and tree of a stream from compact per-event arrays, with compiled kernels: how the
driver builds them after a Spark build.

:func:`sketch.partition.files.build_partition_into` builds both from a whole stream table in memory — what the
local build has at hand.  A Spark build has no such table: its events are in the windows' tasks, then in
the store.  Reading them back whole into the driver and building with general-purpose numpy (sorts and
``unique`` over int64 copies) takes about 200 bytes an event there.  Instead:

* every window task writes its events' key values and types, each dictionary-encoded within the window,
  and their times — about 14 bytes an event, beside its staged chunks — and the driver reads them in
  window (seq) order into three arrays: group int32, type code int32, time int64
  (:mod:`sketch.partition.build_columns`).  Groups are numbered in order of their first event, as
  :func:`exact.store.grouping.build_layout` numbers them;
* ``order`` (events by group, then type, stream order within) by two counting sorts, the groups' distinct
  types and their events' counts in one walk of it, the partition tree's slots
  (:func:`sketch.partition.index.slot_starts`: a group that does not fit the rest of a leaf starts the next one),
  its padding (the time of the slot before) and its leaves' distinct
  types run as compiled kernels (numba, cached on disk), each in one pass;
* the tree is then sized and built by :meth:`sketch.tree.BloomTree.update_encoded`, as
  :func:`sketch.partition.index.build_partition_tree` does.

The result is the same layout and the same tree (``index_digest``) as :func:`build_partition_into` makes
of the same events; ``tests/sketch/test_partition_arrays.py`` holds them equal.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from exact.store.grouping import Layout
from sketch.build import BuildOptions, _plan, config_from
from sketch.tree import BloomTree

_I64 = np.int64


def layout_from_columns(key: str, group: np.ndarray, keys: pa.Array, code: np.ndarray,
                        types: tuple[str, ...]) -> Layout:
    """The layout from per-event groups and type codes
    (:func:`sketch.partition.build_columns.merge_window_columns`)."""
    groups = len(keys)
    sizes = np.bincount(group[group >= 0], minlength=groups).astype(_I64)
    group_off = np.zeros(groups + 1, dtype=_I64)
    np.cumsum(sizes, out=group_off[1:])
    width = max(len(types), 1)
    order = _grouped_order(group, group_off, code, width)
    type_off, type_codes, type_counts = _group_types(order, group_off, code)
    code_dtype = np.uint16 if width <= 1 << 16 else np.uint32
    return Layout(key, len(group), group, order, group_off, type_off, type_codes.astype(code_dtype),
                  type_counts, types, keys)


def partition_tree_from_columns(layout: Layout, code: np.ndarray, ts: np.ndarray,
                                options: BuildOptions) -> BloomTree:
    """The partition tree (:func:`sketch.partition.index.build_partition_tree`) from the per-event type codes
    (into ``layout.types``) and times."""
    C = options.leaf_size
    starts, total = _slot_starts(np.diff(layout.group_off), C)
    width = max(len(layout.types), 1)
    slot_code, slot_ts = _slots(layout.order, layout.group_off, starts, code, ts, total)
    pairs = _leaf_pairs(slot_code, C, width)
    config = config_from(_plan(slot_code, len(layout.types), options, pairs), options)
    tree = BloomTree(config)
    tree.update_encoded(slot_code, list(layout.types), slot_ts, pairs)
    return tree


# ---------------------------------------------------------------------------------------------- kernels


@njit(cache=True, nogil=True)
def _grouped_order(group: np.ndarray, group_off: np.ndarray, code: np.ndarray,  # pragma: no cover - compiled
                   width: int) -> np.ndarray:
    """The events' seqs by group, then type, then stream position: two stable counting sorts (by type,
    then by group), each one pass over the events."""
    type_off = np.zeros(width + 1, dtype=np.int64)
    for i in range(len(group)):
        if group[i] >= 0:
            type_off[code[i] + 1] += 1
    for c in range(width):
        type_off[c + 1] += type_off[c]
    by_type = np.empty(type_off[width], dtype=np.int32)
    for i in range(len(group)):
        if group[i] >= 0:
            by_type[type_off[code[i]]] = i
            type_off[code[i]] += 1
    fill = group_off[:-1].copy()
    order = np.empty(group_off[-1], dtype=np.int32)
    for j in range(len(by_type)):
        g = group[by_type[j]]
        order[fill[g]] = by_type[j]
        fill[g] += 1
    return order


@njit(cache=True, nogil=True)
def _group_types(order: np.ndarray, group_off: np.ndarray, code: np.ndarray,  # pragma: no cover - compiled
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group its distinct type codes (``type_off`` into ``type_codes``, sorted: the order is by type
    within a group) and the events of each (``type_counts``)."""
    groups = len(group_off) - 1
    type_off = np.zeros(groups + 1, dtype=np.int64)
    codes = np.empty(len(order), dtype=np.int32)
    counts = np.empty(len(order), dtype=np.uint32)
    n = 0
    for g in range(groups):
        for j in range(group_off[g], group_off[g + 1]):
            c = code[order[j]]
            if j == group_off[g] or c != codes[n - 1]:
                codes[n] = c
                counts[n] = 0
                n += 1
            counts[n - 1] += 1
        type_off[g + 1] = n
    return type_off, codes[:n].copy(), counts[:n].copy()


@njit(cache=True, nogil=True)
def _slot_starts(sizes: np.ndarray, leaf_size: int) -> tuple[np.ndarray, int]:  # pragma: no cover - compiled
    """:func:`sketch.partition.index.slot_starts`: per group its first slot, and the number of slots."""
    starts = np.empty(len(sizes), dtype=np.int64)
    pos = 0
    for g in range(len(sizes)):
        used = pos % leaf_size
        if used and used + sizes[g] > leaf_size:
            pos += leaf_size - used
        starts[g] = pos
        pos += sizes[g]
    return starts, pos


@njit(cache=True, nogil=True)
def _slots(order: np.ndarray, group_off: np.ndarray, starts: np.ndarray,  # pragma: no cover - compiled
           code: np.ndarray, ts: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Type code (-1: padding) and time of every slot; a padding slot takes the time of the slot before."""
    slot_code = np.full(total, -1, dtype=np.int32)
    slot_ts = np.zeros(total, dtype=np.int64)
    for g in range(len(starts)):
        base = starts[g] - group_off[g]
        for j in range(group_off[g], group_off[g + 1]):
            event = order[j]
            slot_code[base + j] = code[event]
            slot_ts[base + j] = ts[event]
    last = slot_ts[0] if total else 0
    for s in range(total):
        if slot_code[s] >= 0:
            last = slot_ts[s]
        else:
            slot_ts[s] = last
    return slot_code, slot_ts


@njit(cache=True, nogil=True)
def _leaf_pairs(slot_code: np.ndarray, leaf_size: int, width: int) -> np.ndarray:  # pragma: no cover - compiled
    """The distinct (leaf, type) pairs of the filled slots, sorted, as ``leaf * width + code``."""
    leaves = (len(slot_code) + leaf_size - 1) // leaf_size
    out = np.empty(min(len(slot_code), leaves * width), dtype=np.int64)
    seen = np.full(width, -1, dtype=np.int64)
    n = 0
    for leaf in range(leaves):
        start = n
        for s in range(leaf * leaf_size, min(len(slot_code), (leaf + 1) * leaf_size)):
            c = slot_code[s]
            if c >= 0 and seen[c] != leaf:
                seen[c] = leaf
                out[n] = leaf * width + c
                n += 1
        out[start:n] = np.sort(out[start:n])
    return out[:n].copy()
