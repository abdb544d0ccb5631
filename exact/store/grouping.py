"""The partition layout of a stream: its events grouped by a partition key, each group's rows at hand.

Most questions are asked per case ("in the same application").  With a partition key (``--partition-key``,
by default ``case`` when every event has one), a dataset keeps, beside its seq-ordered store:

* ``group_of``: per event (by seq), its group — groups numbered in order of their first event; -1 for an
  event without a key value (not stored: it follows from the next two);
* ``order``: the events' seqs grouped — by group, then by type (in the order of the sorted ``types``), in
  stream order within — and ``group_off``, where each group's run of ``order`` starts, so a group's events,
  and its events of one type, are contiguous runs of row numbers that the store's seek files serve in place;
* per group the distinct event types it holds (``type_off``/``type_codes`` into the sorted ``types``), the
  least a type index can know of a group, exact — and how many events of each (``type_counts``), so the
  rows of a group's events of some types are found without reading the others;
* the key value of each group.

It covers the dataset's first ``events`` events (those of its last build or ``compact``); events appended
later form the *tail*, whose groups are found by their key values.

File layout (little-endian), every section aligned to 64 bytes::

    b"SQSKLAYT"  uint32 version  uint32 header length  header (JSON)  sections…

The header names the key, the events covered, the groups, the types, and each section's dtype, offset,
length and CRC-32; the key values are an Arrow IPC stream.  Version 3 bit-packs the integer sections
(``packed`` in a section's entry; :mod:`exact.store.packing`).  A file is checked on its first open in a
process and mapped read-only; one that fails is :class:`~exact.errors.StoreCorrupt`.
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import struct
import threading
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.errors import InputError, StoreCorrupt
from exact.events import ATTRS, TYPE
from exact.store.followers import following_compiled
from exact.store.packing import PackedFormatError, from_buffer, pack
from exact.store.packing import to_bytes as packed_bytes

#: The store manifest's entry naming the live layout (``extra["layout"]``): file (relative to the
#: dataset directory), key, events, groups, bytes.
LAYOUT_KEY = "layout"
MAGIC = b"SQSKLAYT"
VERSION = 3  # 2: sections not packed; 1: each group's events in stream order, no counts per type
#: Versions a reader takes.
READABLE = (2, 3)
#: The sections version 3 bit-packs (:mod:`exact.store.packing`), and whether as steps: ``order`` (runs of
#: seqs, increasing within each), the offsets (increasing); the types and counts of the (group, type) entries
#: by frame of reference.  A layout is decoded whole when it is loaded (its groups are numbered from it
#: then), so they are packed for the disk and the bucket, not read in place.
_PACKED = {"order": True, "group_off": True, "type_off": True, "type_codes": False, "type_counts": False}
SUFFIX = ".sqpl"
#: The partition key a build takes when none is named and every event has it (XES logs' trace id).
DEFAULT_KEY = "case"
_ALIGN = 64
_PREFIX = struct.Struct("<8sII")
_ARRAYS = ("order", "group_off", "type_off", "type_codes", "type_counts")


#: :meth:`Layout.rows_of_types` bisects a type's run of entries for the groups asked when the run is longer
#: than this many times their number (a bisection costs about log2 of the run; marking, one step per entry).
_BISECT_SHARE = 8
#: the types whose events per group a layout keeps for the planner (4 bytes per group each)
_SIZES_KEPT = 16
_SIZES_LOCK = threading.Lock()


@dataclass(eq=False)
class Layout:
    """A stream's partition layout (see the module docstring)."""

    key: str
    events: int
    group_of: np.ndarray
    order: np.ndarray
    group_off: np.ndarray
    type_off: np.ndarray
    type_codes: np.ndarray
    type_counts: np.ndarray
    types: tuple[str, ...]
    keys: pa.Array

    @property
    def groups(self) -> int:
        return len(self.group_off) - 1

    def sizes(self) -> np.ndarray:
        return np.diff(self.group_off)

    def rows(self, groups: np.ndarray) -> np.ndarray:
        """The seqs of the events of ``groups`` (sorted group ids), grouped, stream order within each."""
        lo, hi = self.group_off[groups], self.group_off[groups + 1]
        lengths = hi - lo
        total = int(lengths.sum())
        if not total:
            return np.zeros(0, dtype=np.int64)
        idx = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(total)
        return self.order[idx].astype(np.int64)

    @property
    def knows_type_sets(self) -> bool:
        """Whether every group's type set is kept as a bitmap (up to 64 types in the stream), so that the
        groups holding given types are found in one pass."""
        return self._type_bits is not None

    @functools.cached_property
    def _type_bits(self) -> np.ndarray | None:
        """Per group, its types as bits of a uint64 (None with more than 64 types in the stream)."""
        if len(self.types) > 64 or not self.groups:
            return None
        bits = np.left_shift(np.uint64(1), self.type_codes.astype(np.uint64))
        out = np.zeros(self.groups, dtype=np.uint64)
        nonempty = np.flatnonzero(np.diff(self.type_off) > 0)
        out[nonempty] = np.bitwise_or.reduceat(bits, self.type_off[nonempty])
        return out

    @functools.cached_property
    def _type_index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.types)}

    @functools.cached_property
    def spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Per group, the seqs of its first and last events."""
        if not self.groups:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts = self.group_off[:-1]
        order = self.order.astype(np.int64)
        return np.minimum.reduceat(order, starts), np.maximum.reduceat(order, starts)

    @functools.cached_property
    def by_first(self) -> np.ndarray:
        """The group numbers in order of their first events."""
        return np.argsort(self.spans[0], kind="stable")

    @functools.cached_property
    def _type_rows(self) -> np.ndarray:
        """Where each (group, type) entry's run of ``order`` starts (and, last, the end of ``order``)."""
        out = np.zeros(len(self.type_counts) + 1, dtype=np.int64)
        np.cumsum(self.type_counts, out=out[1:])
        return out

    @functools.cached_property
    def _entries_by_type(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (group, type) entries ordered by type, then group; where each type's run starts; and the
        group of each entry in that order (ascending within a type's run) — an inverted index from a type
        to the groups holding it, made once per layout."""
        by_type = np.argsort(self.type_codes, kind="stable")
        starts = np.searchsorted(self.type_codes[by_type], np.arange(len(self.types) + 1))
        group = np.repeat(np.arange(self.groups, dtype=np.int64), np.diff(self.type_off))
        return by_type, starts, group[by_type]

    def rows_of_types(self, groups: np.ndarray, types: frozenset[str]) -> np.ndarray:
        """The seqs of the events of ``groups`` (group ids, distinct) whose type is one of ``types``
        (grouped by type, not sorted): per type, its entries in the groups asked for, each a run of
        ``order``."""
        entries, _ = self._entries_of(groups, types)
        start = self._type_rows[entries]
        counts = self._type_rows[entries + 1] - start
        n = int(counts.sum())
        if not n:
            return np.zeros(0, dtype=np.int64)
        idx = np.repeat(start - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(n)
        return self.order[idx].astype(np.int64)

    def sizes_of_types(self, groups: np.ndarray, types: frozenset[str]) -> np.ndarray:
        """Per group of ``groups`` (group ids, ascending), its events whose type is one of ``types``."""
        entries, owners = self._entries_of(groups, types)
        counts = self._type_rows[entries + 1] - self._type_rows[entries]
        return np.bincount(np.searchsorted(groups, owners), weights=counts, minlength=len(groups)).astype(np.int64)

    def count_of_types(self, groups: np.ndarray, types: frozenset[str]) -> int:
        """The events of ``groups`` (group ids, distinct) whose type is one of ``types``: a planner's count,
        from each type's events per group (:meth:`sizes_of_type`), one gather per type."""
        return sum(int(self.sizes_of_type(t)[groups].sum()) for t in types if t in self._type_index)

    def sizes_of_type(self, type_: str) -> np.ndarray:
        """Per group, its events of ``type_`` (int32): made from the type's entries on first use and kept
        for the :data:`_SIZES_KEPT` types asked most recently."""
        kept: OrderedDict[str, np.ndarray] = self.__dict__.setdefault("_sizes_kept", OrderedDict())
        found = kept.get(type_)
        if found is None:
            by_type, starts, entry_group = self._entries_by_type
            code = self._type_index[type_]
            lo, hi = int(starts[code]), int(starts[code + 1])
            found = np.zeros(self.groups, dtype=np.int32)
            found[entry_group[lo:hi]] = self.type_counts[by_type[lo:hi]]
            with _SIZES_LOCK:
                kept[type_] = found
                while len(kept) > _SIZES_KEPT:
                    kept.popitem(last=False)
        return found

    def _entries_of(self, groups: np.ndarray, types: frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
        """The (group, type) entries of ``groups`` (distinct) and ``types``, and their groups.  A type's
        entries in the groups
        asked are found by bisecting its run (a group holds one entry per type) when they are few beside
        the run, else by marking the groups asked: the work follows the groups asked, not all the groups
        that hold the type."""
        by_type, starts, entry_group = self._entries_by_type
        index = self._type_index
        picked = [np.zeros(0, dtype=np.int64)]
        owners = [np.zeros(0, dtype=np.int64)]
        if not len(groups):
            return picked[0], owners[0]
        asked_sorted = groups if bool(np.all(groups[1:] > groups[:-1])) else np.sort(groups)
        asked: np.ndarray | None = None
        for code in sorted(index[t] for t in types if t in index):
            lo, hi = int(starts[code]), int(starts[code + 1])
            if hi == lo:
                continue
            run = entry_group[lo:hi]
            if _BISECT_SHARE * len(asked_sorted) < hi - lo:
                at = np.searchsorted(run, asked_sorted)
                inside = at < hi - lo
                at = at[inside]
                at = at[run[at] == asked_sorted[inside]]
            else:
                if asked is None:
                    asked = np.zeros(self.groups, dtype=bool)
                    asked[groups] = True
                at = np.flatnonzero(asked[run])
            picked.append(by_type[lo + at])
            owners.append(run[at])
        return np.concatenate(picked).astype(np.int64, copy=False), np.concatenate(owners)

    def following(self, ends: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per event of ``ends`` (seqs the layout covers), the seqs of the ``k`` events that follow it in its
        group, and their type codes (into :attr:`types`); -1 where the group has no more (or the event is in
        no group).  Only the event's group is looked at: per type it holds, a bisection of that type's run."""
        ends = np.ascontiguousarray(ends, dtype=np.int64)
        seqs = np.full((len(ends), k), -1, dtype=np.int64)
        codes = np.full((len(ends), k), -1, dtype=np.int64)
        if len(ends) and k > 0:
            following_compiled()(ends, self.group_of, self.order, self.type_off, self._type_rows,
                                  self.type_codes, seqs, codes)
        return seqs, codes

    def groups_holding(self, type_sets: Sequence[frozenset[str] | None],
                       among: np.ndarray | None = None) -> np.ndarray:
        """The groups (of ``among``, default all) that hold an event of every type set (None = any type)."""
        candidates = np.arange(self.groups) if among is None else among
        index = self._type_index
        bits = self._type_bits
        if bits is not None:
            held = bits[candidates]
            keep = np.ones(len(candidates), dtype=bool)
            for types in type_sets:
                if types is not None:
                    need = np.uint64(sum(1 << index[t] for t in types if t in index))
                    keep &= (held & need) != 0
            return candidates[keep]
        for types in type_sets:
            if not len(candidates):
                break
            if types is None:
                continue
            wanted = np.zeros(len(self.types) + 1, dtype=bool)
            wanted[[index[t] for t in types if t in index]] = True
            lo, hi = self.type_off[candidates], self.type_off[candidates + 1]
            lengths = hi - lo
            total = int(lengths.sum())
            if not total:
                return candidates[:0]
            idx = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(total)
            hit = wanted[self.type_codes[idx]]
            owner = np.repeat(np.arange(len(candidates)), lengths)
            has = np.zeros(len(candidates), dtype=bool)
            has[owner[hit]] = True
            candidates = candidates[has]
        return candidates


# ------------------------------------------------------------------------------------------------ building


def default_key(table: pa.Table) -> str | None:
    """:data:`DEFAULT_KEY` when every event of ``table`` has a value for it, else None."""
    if ATTRS not in table.column_names or table.num_rows == 0:
        return None
    struct_type = table.schema.field(ATTRS).type
    if struct_type.get_field_index(DEFAULT_KEY) < 0:
        return None
    values = pc.struct_field(table.column(ATTRS), DEFAULT_KEY)
    return DEFAULT_KEY if values.null_count == 0 and table.column(ATTRS).null_count == 0 else None


def key_values(table: pa.Table, key: str) -> pa.ChunkedArray:
    """The partition key's values of ``table``'s events (null where an event has none); floats as they
    compare (-0.0 as 0.0, NaN as no value)."""
    if ATTRS not in table.column_names or table.schema.field(ATTRS).type.get_field_index(key) < 0:
        return pa.chunked_array([pa.nulls(table.num_rows)])
    values = pc.struct_field(table.column(ATTRS), key)
    if pa.types.is_floating(values.type):
        values = pc.add(values, pa.scalar(0.0, values.type))
        values = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
    return values


def build_layout(table: pa.Table, key: str) -> Layout:
    """The layout of a whole stream table (in stream order) by attribute ``key``: its events from seq 0, or
    — with a ``seq`` column starting later, the events kept after a retention — from that seq on, the
    events before it in no group."""
    if ATTRS not in table.column_names or table.schema.field(ATTRS).type.get_field_index(key) < 0:
        raise InputError(f"no event has the partition key attribute {key!r}", where="--partition-key")
    n = table.num_rows
    base = int(table.column("seq")[0].as_py()) if "seq" in table.column_names and n else 0
    encoded = pc.dictionary_encode(key_values(table, key).combine_chunks())
    codes = encoded.indices
    group_of = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int32)
    groups = len(encoded.dictionary)
    keyed = np.flatnonzero(group_of >= 0)
    type_enc = pc.dictionary_encode(table.column(TYPE).combine_chunks().cast(pa.string()))
    vocabulary = type_enc.dictionary.to_pylist()
    rank = np.argsort(np.asarray(vocabulary, dtype=object)) if vocabulary else np.zeros(0, dtype=np.int64)
    sorted_codes = np.empty(len(vocabulary), dtype=np.int64)
    sorted_codes[rank] = np.arange(len(vocabulary))
    type_code = sorted_codes[type_enc.indices.to_numpy(zero_copy_only=False)] if n else np.zeros(0, np.int64)
    width = max(len(vocabulary), 1)
    # by group, then type, then stream position (a stable sort of the (group, type) pair)
    pair_of = group_of[keyed].astype(np.int64) * width + type_code[keyed]
    order = (keyed[np.argsort(pair_of, kind="stable")] + base).astype(np.int32)
    sizes = np.bincount(group_of[keyed], minlength=groups)
    group_off = np.zeros(groups + 1, dtype=np.int64)
    group_off[1:] = np.cumsum(sizes)
    # distinct (group, type) pairs, grouped, with their events
    pairs, counts = np.unique(pair_of, return_counts=True)
    type_off = np.zeros(groups + 1, dtype=np.int64)
    type_off[1:] = np.cumsum(np.bincount(pairs // width, minlength=groups))
    code_dtype = np.uint16 if width <= 1 << 16 else np.uint32
    if base:
        group_of = np.concatenate([np.full(base, -1, dtype=np.int32), group_of])
    return Layout(key, base + n, group_of, order, group_off, type_off, (pairs % width).astype(code_dtype),
                  counts.astype(np.uint32), tuple(sorted(vocabulary)), encoded.dictionary)


def group_numbers(events: int, order: np.ndarray, group_off: np.ndarray) -> np.ndarray:
    """``group_of`` from the grouped order (what a file does not store): each event's group, -1 for none."""
    out = np.full(events, -1, dtype=np.int32)
    out[order] = np.repeat(np.arange(len(group_off) - 1, dtype=np.int32), np.diff(group_off))
    return out


# --------------------------------------------------------------------------------------------------- files


def layout_file_name(version: int) -> str:
    """A new name for layout version ``version``: the version and a token of its own (no two writers pick
    one name)."""
    return f"layout-{version:06d}-{uuid.uuid4().hex[:8]}{SUFFIX}"


def write_layout(folder: Path, layout: Layout, version: int, *, file_version: int = VERSION) -> dict[str, Any]:
    """Write ``layout`` as ``folder/layout-<version>.sqpl`` (atomically); returns its manifest entry.
    ``file_version`` 2 writes the sections plain (the layout a dataset written before holds)."""
    if file_version not in READABLE:
        raise ValueError(f"layout files are written in version {', '.join(map(str, READABLE))}")
    folder.mkdir(parents=True, exist_ok=True)
    sink = pa.BufferOutputStream()
    # (the key values compressed: an IPC reader decompresses them as it reads, so version 3 reads them alike)
    with pa.ipc.new_stream(sink, pa.schema([("key", layout.keys.type)]),
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(pa.table({"key": layout.keys}))
    blobs: list[tuple[str, np.ndarray, Any]] = []
    for name in _ARRAYS:
        arr = np.ascontiguousarray(getattr(layout, name))
        blobs.append((name, arr, memoryview(packed_bytes(pack(arr, delta=_PACKED[name]))) if file_version >= 3
                      else _bytes_of(arr)))
    keys = np.frombuffer(sink.getvalue().to_pybytes(), dtype=np.uint8)
    blobs.append(("keys", keys, _bytes_of(keys)))
    sections = []
    offset = 0
    for name, arr, data in blobs:
        sections.append({"name": name, "dtype": arr.dtype.str, "count": int(arr.size), "offset": offset,
                         "length": len(data), "crc32": zlib.crc32(data)} | ({"packed": True} if name in _PACKED
                                                                            and file_version >= 3 else {}))
        offset += len(data) + (-len(data) % _ALIGN)
    header = json.dumps({"key": layout.key, "events": layout.events, "groups": layout.groups,
                         "types": list(layout.types), "sections": sections}).encode()
    start = _PREFIX.size + len(header)
    start += -start % _ALIGN
    name = layout_file_name(version)
    path = folder / name
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(_PREFIX.pack(MAGIC, file_version, len(header)))
        f.write(header)
        f.write(b"\0" * (start - _PREFIX.size - len(header)))
        for i, (_, _, data) in enumerate(blobs):
            f.write(data)
            if i + 1 < len(blobs):  # (no padding after the last: every byte past the header is checked)
                f.write(b"\0" * (-len(data) % _ALIGN))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return {"file": name, "key": layout.key, "events": layout.events, "groups": layout.groups,
            "bytes": path.stat().st_size}


def _bytes_of(arr: np.ndarray) -> memoryview:
    """The bytes of a contiguous array, without a copy (the order of a large stream is hundreds of MB)."""
    # (NumPy's stubs declare the buffer protocol of arrays for Python 3.12+ only; 3.11 arrays have it too)
    return memoryview(arr).cast("B")  # type: ignore[arg-type]


_LOADED: dict[tuple[str, int, int, int], Layout] = {}
_LOCK = threading.Lock()


def load_layout(path: Path, *, again: bool = True) -> Layout:
    """The layout in ``path``, mapped read-only, checked on its first open in this process."""
    from exact.store.fetch import fetched, refetch

    try:
        st = path.stat()
    except FileNotFoundError:
        if not fetched(path):  # (a replica's file is fetched on first use)
            raise StoreCorrupt("the partition layout file is missing", where=str(path)) from None
        st = path.stat()
    ident = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    with _LOCK:
        found = _LOADED.get(ident)
    if found is not None:
        return found
    try:
        layout = _read(path)
    except StoreCorrupt:
        if not again or not refetch(path):  # (a replica's damaged copy is fetched again)
            raise
        return load_layout(path, again=False)
    with _LOCK:
        if len(_LOADED) >= 16:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[ident] = layout
    return layout


def _read(path: Path) -> Layout:
    with open(path, "rb") as f:
        try:
            view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            raise StoreCorrupt("the partition layout file is empty", where=str(path)) from None
    try:
        magic, version, hlen = _PREFIX.unpack_from(view, 0)
        if magic != MAGIC or version not in READABLE:
            raise ValueError(f"not a layout file of version {', '.join(map(str, READABLE))}")
        header = json.loads(bytes(view[_PREFIX.size:_PREFIX.size + hlen]))
        start = _PREFIX.size + hlen
        start += -start % _ALIGN
        arrays: dict[str, np.ndarray] = {}
        for s in header["sections"]:
            at = start + s["offset"]
            raw = view[at:at + s["length"]]
            if len(raw) != s["length"] or zlib.crc32(raw) != s["crc32"]:
                raise ValueError(f"section {s['name']} fails its checksum")
            if s.get("packed"):
                column = from_buffer(view, at, s["length"])
                if len(column) != s["count"] or column.dtype != np.dtype(s["dtype"]):
                    raise ValueError(f"section {s['name']} does not hold what its entry says")
                arrays[s["name"]] = column.decode(0, len(column))
            else:
                arrays[s["name"]] = np.frombuffer(view, dtype=np.dtype(s["dtype"]), count=s["count"], offset=at)
        keys = pa.ipc.open_stream(pa.py_buffer(arrays.pop("keys").tobytes())).read_all().column("key")
        keys = keys.combine_chunks()
        events = int(header["events"])
        layout = Layout(header["key"], events, group_numbers(events, arrays["order"], arrays["group_off"]),
                        arrays["order"], arrays["group_off"], arrays["type_off"], arrays["type_codes"],
                        arrays["type_counts"], tuple(header["types"]), keys)
        if (len(layout.group_of) != layout.events or len(layout.group_off) != header["groups"] + 1
                or len(layout.keys) != layout.groups):
            raise ValueError("section sizes disagree with the header")
        return layout
    except (ValueError, KeyError, TypeError, struct.error, pa.ArrowException, PackedFormatError) as err:
        raise StoreCorrupt(f"damaged partition layout file: {err}", where=str(path)) from None


def layout_of(store_root: Path, extra: Mapping[str, Any] | None) -> Layout | None:
    """The layout a store snapshot's manifest names (``extra``), or None."""
    ref = (extra or {}).get(LAYOUT_KEY)
    if not ref:
        return None
    return load_layout(store_root.parent / ref["file"])
