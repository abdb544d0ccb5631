"""The partition layout and tree of a stored stream, built part by part in compact arrays.

:func:`sketch.dataset.build_partition_into` builds both from a whole stream table in memory — what the
local build has at hand.  After a Spark build the events are in the store, not in the driver: reading them
back whole and building with general-purpose numpy (sorts and ``unique`` over int64 copies) would take
about 200 bytes an event in the driver.  Here the store is read part by part, three columns at a time, into
four arrays of 4 to 8 bytes an event (group, type code, time; then the grouped order), and the sequential
steps run as compiled kernels (numba, cached on disk):

* groups are numbered in order of their first event: each part's key values are dictionary-encoded, and
  the parts' dictionaries, concatenated in part order and encoded again, number every key by its first
  appearance in the stream (:func:`exact.layout.build_layout`'s numbering);
* ``order`` (events grouped, stream order within a group) by a counting sort, the groups' distinct types by
  marking, the partition tree's slots (:func:`sketch.partition.slot_starts`: a group that does not fit the
  rest of a leaf starts the next one), its padding (the time of the slot before) and its leaves' distinct
  types, each in one pass;
* the tree is then sized and built by :meth:`sketch.tree.BloomTree.update_encoded`, as
  :func:`sketch.partition.build_partition_tree` does.

The result is the same layout and the same tree (``index_digest``) as :func:`build_partition_into` makes
of the same events; ``tests/test_partition_store.py`` holds them equal.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from exact.events import ATTRS, TS, TYPE
from exact.layout import Layout, key_values
from exact.store import EventStore, Snapshot
from sketch.build import BuildOptions, _plan, config_from
from sketch.tree import BloomTree

_I64 = np.int64


Columns = tuple[np.ndarray, pa.Array, np.ndarray, np.ndarray]


def store_layout_columns(store: EventStore, snap: Snapshot, key: str, types: tuple[str, ...], *,
                         every_event: bool = False) -> Columns | None:
    """Per event its group (int32, -1 without a key value), the keys in group order, per event its type's
    code in ``types`` (sorted) and its time (µs) — read part by part; None if ``every_event`` asks for a
    key every event has and some event lacks it (how the default key is taken)."""
    n = snap.events
    group = np.empty(n, dtype=np.int32)
    code = np.empty(n, dtype=np.int32)
    ts = np.empty(n, dtype=_I64)
    vocabulary = pa.array(types, pa.string())
    dictionaries: list[pa.Array] = []
    local: list[tuple[int, int, np.ndarray]] = []  # (first seq, rows, codes into the part's dictionary)
    for part in snap.parts:
        table = store.read_table(part.first_seq, part.last_seq, columns=[TS, TYPE, f"{ATTRS}.{key}"],
                                 snapshot=snap, type_dictionary=True)
        at, rows = part.first_seq, table.num_rows
        values = key_values(table, key).combine_chunks()
        if every_event and (values.null_count or table.column(ATTRS).null_count):
            return None
        encoded = pc.dictionary_encode(values)
        local.append((at, rows, pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)))
        dictionaries.append(encoded.dictionary)
        typ = table.column(TYPE).combine_chunks()
        where = pc.index_in(typ.dictionary.cast(pa.string()), value_set=vocabulary).to_numpy(
            zero_copy_only=False)
        code[at:at + rows] = where[typ.indices.to_numpy(zero_copy_only=False)]
        ts[at:at + rows] = table.column(TS).combine_chunks().view(pa.int64()).to_numpy(zero_copy_only=False)
    everything = pc.dictionary_encode(pa.concat_arrays(dictionaries) if dictionaries else pa.array([]))
    numbers = everything.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    offset = 0
    for (at, rows, codes), dictionary in zip(local, dictionaries, strict=True):
        mapping = np.append(numbers[offset:offset + len(dictionary)], np.int32(-1))  # -1 → -1
        group[at:at + rows] = mapping[codes]
        offset += len(dictionary)
    return group, everything.dictionary, code, ts


def layout_from_columns(key: str, group: np.ndarray, keys: pa.Array, code: np.ndarray,
                        types: tuple[str, ...]) -> Layout:
    """The layout from per-event groups and type codes (the columns of :func:`store_layout_columns`)."""
    groups = len(keys)
    sizes = np.bincount(group[group >= 0], minlength=groups).astype(_I64)
    group_off = np.zeros(groups + 1, dtype=_I64)
    np.cumsum(sizes, out=group_off[1:])
    order = _grouped_order(group, group_off)
    width = max(len(types), 1)
    type_off, type_codes = _group_types(order, group_off, code, width)
    code_dtype = np.uint16 if width <= 1 << 16 else np.uint32
    return Layout(key, len(group), group, order, group_off, type_off, type_codes.astype(code_dtype), types,
                  keys)


def partition_tree_from_columns(layout: Layout, code: np.ndarray, ts: np.ndarray,
                                options: BuildOptions) -> BloomTree:
    """The partition tree (:func:`sketch.partition.build_partition_tree`) from the per-event type codes
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
def _grouped_order(group, group_off):  # pragma: no cover - compiled
    """The events' seqs grouped by group, in stream order within one (a stable counting sort)."""
    fill = group_off[:-1].copy()
    order = np.empty(group_off[-1], dtype=np.int32)
    for i in range(len(group)):
        g = group[i]
        if g >= 0:
            order[fill[g]] = i
            fill[g] += 1
    return order


@njit(cache=True, nogil=True)
def _group_types(order, group_off, code, width):  # pragma: no cover - compiled
    """Per group its distinct type codes, sorted (``type_off`` into ``type_codes``)."""
    groups = len(group_off) - 1
    seen = np.full(width, -1, dtype=np.int64)
    type_off = np.zeros(groups + 1, dtype=np.int64)
    out = np.empty(len(order), dtype=np.int32)
    n = 0
    for g in range(groups):
        start = n
        for j in range(group_off[g], group_off[g + 1]):
            c = code[order[j]]
            if seen[c] != g:
                seen[c] = g
                out[n] = c
                n += 1
        out[start:n] = np.sort(out[start:n])
        type_off[g + 1] = n
    return type_off, out[:n].copy()


@njit(cache=True, nogil=True)
def _slot_starts(sizes, leaf_size):  # pragma: no cover - compiled
    """:func:`sketch.partition.slot_starts`: per group its first slot, and the number of slots."""
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
def _slots(order, group_off, starts, code, ts, total):  # pragma: no cover - compiled
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
def _leaf_pairs(slot_code, leaf_size, width):  # pragma: no cover - compiled
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
