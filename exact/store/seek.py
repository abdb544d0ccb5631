"""Seek files: a part's ``ts`` and ``type`` as fixed-width arrays, so that a few rows are read in place.

A Parquet row group is the smallest unit a reader can decode, and decoding one costs about 0.1 ms whatever
the rows it holds.  Verification wants a few hundred rows spread over tens of candidate intervals; from
Parquet that means decoding every row group they meet (hundreds of thousands of rows).  A seek file holds the
two columns the automaton strategies read, fixed-width and uncompressed, so the rows of a range are a slice of
a memory map: finding the rows of the wanted types in a range and their ts costs what those rows cost.

Layout (little-endian), every section aligned to 64 bytes::

    b"SQSKSEEK"  uint32 version  uint32 header length  header (JSON)  sections…

The header names ``rows``, ``block`` (rows per ts block), ``unit`` (µs per ts step), the type codes' dtype,
the part's sorted distinct ``types``, each section's offset and length, and the CRC-32 of everything after
the header.  Sections: ``type`` (a code per row into ``types``: uint8, uint16 or uint32 as the part needs),
``base`` (the ts of each block's first row, int64 µs), ``ts`` (per row ``(ts - base) / unit``, uint32, or
``0xFFFFFFFF`` where that does not fit) and the rows that do not fit with their ts, as ``wide_rows`` and
``wide_ts`` (int64).  ``unit`` is the greatest common divisor of the offsets (1,000 for a log kept to the
millisecond).  Blocks are short (32 rows), so their offsets fit uint32 steps (71 minutes even in
microseconds) except where a block straddles a long pause: 5.25 bytes per event plus 16 per wide row, and a
row's ts is found in place.

Version 4 adds the part's rows grouped by type: ``by_type`` (uint32 row numbers, ordered by type code,
then row) and ``type_start`` (int64, where each code's rows begin in ``by_type``, and the end), 4 bytes per
row.  A read of a few frequent-enough types in a long range then costs the rows of those types, not a test
of every row's code (:func:`select`).

Version 5 adds to each served attribute (but booleans) a *value index*: its rows by type and value bucket
(:class:`exact.store.seek_attrs.ValueIndex`, 4 bytes per row and attribute), so that a condition such as
``v.amount > 50000`` finds the rows of ``v``'s types that may meet it without testing the others.

Version 6 bit-packs the ts offsets (frame of reference per 256 rows) and the rows by type (steps between
rows, per 256): :mod:`exact.store.packing`; a read gathers or slices them in place, decoding only the blocks
it touches.  The header lists the packed sections (``packed``).  Version 7 packs the attribute columns as
well: codes and null flags by frame of reference (a code takes the bits of its part's range), a value index's
rows as steps, and a double whose values are decimals of a few places as integers at that scale
(:mod:`exact.store.seek_attrs`); and its header carries each section's CRC-32 (``crc32s``), so that a
replica reads a file it does not hold by ranges, section by section, each checked on its own
(:func:`open_seek`).

Version 3 adds the part's attributes, one fixed-width code per row each (:mod:`exact.store.seek_attrs`), so
that a condition's values are read in place too; the header lists the attributes served (``attrs``) and
those that are not (``unserved``: a string attribute of too many distinct values).

A seek file is derived from its part and written with it.  A reader that finds it missing, damaged (its
checksum is verified on the first open in a process) or of another version reads the Parquet part instead,
so a bad seek file costs time, never a wrong answer.
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from exact.arrays import joined, run_positions, sorted_ints
from exact.store.packing import Packed, PackedFormatError, from_buffer, pack
from exact.store.packing import to_bytes as packed_bytes
from exact.store.seek_attrs import AttrColumn, decode_attrs, encode_attrs, seek_allowance

MAGIC = b"SQSKSEEK"
VERSION = 7  # 6: attribute columns and value indexes not packed, no CRC-32 per section; 5: ts steps and rows
#             by type not packed; 4: no value indexes; 3: nor rows by type; 2: nor attribute columns; 1: 256-row
#             ts blocks
#: Versions a reader takes: a version-2 file serves reads that ask for no attribute; versions 2 and 3 find
#: the rows of a type by testing every row's code; before version 5 a condition is tested on every row of
#: its variable's types.
READABLE = (2, 3, 4, 5, 6, 7)
#: the sections version 6 writes bit-packed (:mod:`exact.store.packing`): the ts steps by frame of reference
#: (a block's steps take the bits of their range), the rows by type as steps (sorted runs of row numbers);
#: version 7 packs the attribute columns too (:data:`exact.store.seek_attrs.PACKED_SECTIONS`)
PACKED = {"ts": False, "by_type": True}
SUFFIX = ".seek"
#: Rows per ts block: short, so that a block's offsets from its first ts fit uint32 steps but where it
#: straddles a pause of over 71 minutes (in µs; 49 days in ms), and long enough for its base to cost little.
BLOCK = 32
_ALIGN = 64
_PREFIX = struct.Struct("<8sII")
#: A ts offset of this many units or more is kept apart, as an int64 ts ("wide").
_WIDE = 0xFFFFFFFF
#: Up to this many codes are tested by comparing with each (see :meth:`_CodeTest.mask`).
_COMPARED_CODES = 8
#: A read of more ranges than this, of fewer rows each than the next on average, gathers its rows.
_GATHER_RANGES = 64
_GATHER_ROWS_PER_RANGE = 16
#: A read finds the rows of its types from the rows by type when those types hold at most this share of a
#: part's rows (above it, testing each row's code is as cheap) ...
_BY_TYPE_SHARE = 0.5
#: ... and its ranges hold at least this many rows per range and type looked up.
_LOOKUP_ROWS = 8


class SeekUnavailable(Exception):
    """The seek file cannot serve this part (missing, damaged, another version); read the Parquet part."""


def seek_name(part_file: str) -> str:
    """The seek file beside a part file."""
    stem = part_file[: -len(".parquet")] if part_file.endswith(".parquet") else part_file
    return stem + SUFFIX


def _pad(n: int) -> int:
    return -n % _ALIGN


def _codes_dtype(n_types: int) -> np.dtype:
    return np.dtype(np.uint8 if n_types <= 1 << 8 else np.uint16 if n_types <= 1 << 16 else np.uint32)


def encode(ts: np.ndarray, types: pa.Array, attrs: pa.StructArray | pa.ChunkedArray | None = None,
           chosen: Sequence[str] | None = None, *, version: int = VERSION,
           footprint: tuple[float, int, int | None] | None = None) -> bytes:
    """A part's seek file: ``ts`` (int64 µs, not decreasing) and ``types`` (strings, no nulls) per row, and
    the part's ``attrs`` struct (None: it has no attributes) — the attributes ``chosen``, or those within the
    default budget (:func:`exact.store.seek_attrs.encode_attrs`).  ``version`` 5 writes the sections version 6
    packs plain (the layout a store written before holds)."""
    if version not in (5, 6, VERSION):
        raise ValueError(f"seek files are written in version 5, 6 or {VERSION}, not {version}")
    packed = PACKED if version >= 6 else {}
    ts = np.ascontiguousarray(ts, dtype=np.int64)
    rows = len(ts)
    if rows != len(types):
        raise ValueError(f"ts has {rows} rows, types {len(types)}")
    encoded = pa.chunked_array([types]).combine_chunks().dictionary_encode() if rows else None
    names = [] if encoded is None else encoded.dictionary.to_pylist()
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    sorted_names = [names[i] for i in order]
    codes_dtype = _codes_dtype(len(names))
    codes = (rank[encoded.indices.to_numpy(zero_copy_only=False)] if encoded is not None
             else np.zeros(0, np.int64)).astype(codes_dtype)
    base = ts[::BLOCK].copy()
    offsets = ts - np.repeat(base, BLOCK)[:rows]
    unit = int(np.gcd.reduce(offsets)) if rows else 1
    unit = unit if unit > 0 else 1
    steps = offsets // unit
    wide_rows = np.flatnonzero(steps >= _WIDE)
    narrow = steps.astype(np.uint32)  # the wide ones are overwritten just below
    narrow[wide_rows] = _WIDE
    by_type = np.argsort(codes, kind="stable").astype(np.uint32)
    type_start = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(np.bincount(codes, minlength=len(names)), out=type_start[1:])
    sections = {"type": codes.tobytes(), "base": base.tobytes(), "ts": narrow.tobytes(),
                "wide_rows": wide_rows.astype(np.int64).tobytes(), "wide_ts": ts[wide_rows].tobytes(),
                "by_type": by_type.tobytes(), "type_start": type_start.tobytes()}
    for name, delta in packed.items():  # (bit-packed, read in place: exact.store.packing)
        sections[name] = packed_bytes(pack(np.frombuffer(sections[name], dtype=np.uint32), delta=delta))
    allowance = None if footprint is None else seek_allowance(
        footprint[0], footprint[1], sum(len(d) + _pad(len(d)) for d in sections.values()), footprint[2])
    served, unserved, attr_sections, attrs_packed = encode_attrs(
        attrs, rows, chosen, type_codes=codes, n_types=len(names), packed=version >= 7, allowance=allowance)
    sections.update(attr_sections)
    layout, payload, at = {}, bytearray(), 0
    for name, data in sections.items():
        layout[name] = [at, len(data)]
        payload += data + b"\0" * _pad(len(data))
        at += len(data) + _pad(len(data))
    header = json.dumps({"rows": rows, "block": BLOCK, "unit": unit, "type_dtype": codes_dtype.str,
                         "wide": len(wide_rows), "types": sorted_names, "sections": layout,
                         **({"packed": sorted([*packed, *attrs_packed])} if packed else {}),
                         "attrs": served, "unserved": unserved,
                         **({"crc32s": {name: zlib.crc32(data) for name, data in sections.items()}}
                            if version >= 7 else {}),
                         "crc32": zlib.crc32(payload)}, separators=(",", ":")).encode()
    header += b" " * _pad(_PREFIX.size + len(header))
    return _PREFIX.pack(MAGIC, version, len(header)) + header + bytes(payload)


def served_bytes(data: bytes) -> dict[str, int]:
    """Per attribute a seek file (given whole) serves, the bytes of its columns (from the header alone)."""
    _, version, header_len = _PREFIX.unpack_from(data, 0)
    head = json.loads(bytes(data[_PREFIX.size:_PREFIX.size + header_len]))
    sizes = {name: int(n) for name, (_, n) in head["sections"].items()}
    return {str(e["name"]): sum(sizes[f"a{e['id']}.{k}"] for k in e["sections"]) for e in head.get("attrs", [])}


#: The structures of a seek file, as ``info`` names them, and the sections each holds (an attribute's
#: sections are ``aN.<key>``: its ``codes`` and dictionary are its values; ``edges``, ``vrows`` and ``vstart``
#: its value index).
STRUCTURES = {"types": ("type",), "times": ("base", "ts", "wide_rows", "wide_ts"),
              "rows_by_type": ("by_type", "type_start")}
_INDEX_KEYS = ("edges", "vrows", "vstart")


def structure_bytes(data: bytes) -> dict[str, int]:
    """A seek file's bytes (given whole, or at least its header) by structure: ``types``, ``times``,
    ``rows_by_type``, ``values`` (the attribute columns), ``value_indexes`` and ``header`` (the prefix, the
    header and the sections' alignment) — summing to the file's size."""
    _, _, header_len = _PREFIX.unpack_from(data, 0)
    head = json.loads(bytes(data[_PREFIX.size:_PREFIX.size + header_len]))
    sizes = {name: int(n) for name, (_, n) in head["sections"].items()}
    out = {"types": 0, "times": 0, "rows_by_type": 0, "values": 0, "value_indexes": 0}
    for name, n in sizes.items():
        if "." in name:
            out["value_indexes" if name.split(".", 1)[1] in _INDEX_KEYS else "values"] += n
        else:
            out[next((k for k, names in STRUCTURES.items() if name in names), "types")] += n
    out["header"] = _PREFIX.size + header_len + sum(_pad(n) for n in sizes.values())
    return out


def file_version(path: str | Path) -> int | None:
    """The version of the seek file at ``path`` (fetched first where a replica has not yet), from its prefix;
    None when it is missing or not a seek file."""
    try:
        with open(path, "rb") as fh:
            prefix = fh.read(_PREFIX.size)
    except OSError:
        from exact.store.fetch import fetched

        if not fetched(path):
            return None
        with open(path, "rb") as fh:
            prefix = fh.read(_PREFIX.size)
    if len(prefix) < _PREFIX.size:
        return None
    magic, version, _ = _PREFIX.unpack(prefix)
    return int(version) if magic == MAGIC else None


def write(path: Path, ts: np.ndarray, types: pa.Array, attrs: pa.StructArray | pa.ChunkedArray | None = None,
          chosen: Sequence[str] | None = None) -> int:
    """Write and fsync the seek file at ``path`` (the caller renames it into place); its size."""
    return write_bytes(path, encode(ts, types, attrs, chosen))


def write_bytes(path: Path, data: bytes, *, sync: bool = True) -> int:
    """Write an encoded seek file at ``path`` and fsync it (unless not ``sync``: the caller does); its
    size."""
    with open(path, "wb") as fh:
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    return len(data)


@dataclass(frozen=True)
class SeekFile:
    """An open seek file: its arrays are views of a read-only memory map."""

    rows: int
    types: tuple[str, ...]
    codes: np.ndarray
    base: np.ndarray
    steps: np.ndarray
    unit: int
    block: int
    wide_rows: np.ndarray
    wide_ts: np.ndarray
    #: ``types`` as an Arrow string array, the dictionary of a read's ``type`` column.
    dictionary: pa.Array
    #: the part's attributes served in place (:mod:`exact.store.seek_attrs`)
    attrs: Mapping[str, AttrColumn] = field(default_factory=dict)
    #: attributes of the part that are not served (None: the file does not say — version 2 — so none is)
    unserved: frozenset[str] | None = None
    #: the part's rows ordered by type code, then row, and where each code's rows begin (and the end), or
    #: None (a file before version 4)
    by_type: np.ndarray | None = None
    type_start: np.ndarray | None = None

    def rows_of(self, code: int) -> np.ndarray:
        """The rows of type code ``code``, increasing (``by_type`` is present)."""
        assert self.by_type is not None and self.type_start is not None
        return self.by_type[int(self.type_start[code]):int(self.type_start[code + 1])]

    def serves(self, names: Sequence[str]) -> bool:
        """Can the attributes ``names`` of this part's rows be read from this file?  An attribute the part
        does not have is served (as null)."""
        return self.unserved is not None and not any(n in self.unserved for n in names)


def ts_of(files: Sequence[SeekFile], rows: Sequence[np.ndarray]) -> np.ndarray:
    """The ts (int64 µs) of ``rows[i]`` of ``files[i]``, one file's after the other's.  Only the look-ups
    are made file by file; the arithmetic, and the search for the rows kept apart as wide, once for all."""
    steps = joined([f.steps[r] for f, r in zip(files, rows, strict=True)])
    base = joined([f.base[r // f.block] for f, r in zip(files, rows, strict=True)])
    units = [f.unit for f in files]
    unit = units[0] if len(set(units)) == 1 else np.repeat(units, [len(r) for r in rows])
    out = base + steps.astype(np.int64) * unit
    wide = np.flatnonzero(steps == _WIDE)
    if len(wide):
        ends = np.cumsum([len(r) for r in rows]).tolist()
        cuts = np.searchsorted(wide, ends).tolist()  # the wide rows of file i are wide[cuts[i-1]:cuts[i]]
        for i, (f, r) in enumerate(zip(files, rows, strict=True)):
            first = cuts[i - 1] if i else 0
            if first < cuts[i]:
                at = wide[first:cuts[i]]
                out[at] = f.wide_ts[np.searchsorted(f.wide_rows, r[at - (ends[i] - len(r))])]
    return out


def select(files: Sequence[SeekFile], ranges: Sequence[np.ndarray], wanted: frozenset[str] | None
           ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per file, its rows in ``ranges`` (an (n, 2) array of inclusive row ranges, sorted, disjoint) whose
    type is in ``wanted`` (None = every type), and their codes (:func:`select_counted` without the counts)."""
    return [(rows, codes) for rows, codes, _ in select_counted(files, ranges, wanted)]


def select_counted(files: Sequence[SeekFile], ranges: Sequence[np.ndarray], wanted: frozenset[str] | None
                   ) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per file, its rows in ``ranges`` (an (n, 2) array of inclusive row ranges, sorted, disjoint) whose
    type is in ``wanted`` (None = every type), their codes, and the rows looked at to find them: every row
    of the ranges, or those of the wanted types when they are found from the rows by type (:func:`_by_type`).

    A verification reads tens of ranges of hundreds of rows from each of a few parts.  Each range's codes
    are copied out with one slice (a position per row, and a gather by it, cost several times more), those
    of all the files with the same types are tested together (so the numpy calls do not grow with the
    files), and positions are worked out for the rows kept only.  Many short ranges (the rows of a partition
    layout's groups) are gathered instead: a slice per range would cost a Python step per row."""
    if wanted is not None:
        by_type = [_by_type(f, r, wanted) for f, r in zip(files, ranges, strict=True)]
        if any(found is not None for found in by_type):
            rest = [i for i, found in enumerate(by_type) if found is None]
            if rest:
                others = _by_codes([files[i] for i in rest], [ranges[i] for i in rest], wanted)
                for i, (rows, codes) in zip(rest, others, strict=True):
                    by_type[i] = rows, codes, _rows_in(ranges[i])
            return [found for found in by_type if found is not None]
    return [(rows, codes, _rows_in(r))
            for (rows, codes), r in zip(_by_codes(files, ranges, wanted), ranges, strict=True)]


def _rows_in(ranges: np.ndarray) -> int:
    return int((ranges[:, 1] - ranges[:, 0]).sum()) + len(ranges) if len(ranges) else 0


def _by_codes(files: Sequence[SeekFile], ranges: Sequence[np.ndarray], wanted: frozenset[str] | None
              ) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`select_counted` by testing the code of every row in the ranges."""
    short = [len(r) > _GATHER_RANGES and int((r[:, 1] - r[:, 0]).sum()) < _GATHER_ROWS_PER_RANGE * len(r)
             for r in ranges]
    if wanted is None or any(short):
        out = []
        for f, r, gather in zip(files, ranges, short, strict=True):
            if wanted is not None and not gather:
                [(rows, codes)] = _by_codes([f], [r], wanted)  # by slices, below
            else:
                rows = run_positions(r[:, 0], r[:, 1] - r[:, 0] + 1)
                codes = f.codes[rows]
                if wanted is not None:
                    keep = _code_test(f.types, wanted).mask(codes)
                    rows, codes = rows[keep], codes[keep]
            out.append((rows, codes))
        return out
    found: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), f.codes[:0]) for f in files]
    alike: dict[tuple[str, ...], list[int]] = {}
    for i, f in enumerate(files):
        if len(ranges[i]):
            alike.setdefault(f.types, []).append(i)
    for types, members in alike.items():
        pieces = [files[i].codes[a:b + 1] for i in members for a, b in ranges[i].tolist()]
        all_codes = joined(pieces)
        at = np.flatnonzero(_code_test(types, wanted).mask(all_codes))
        both = joined([ranges[i] for i in members])
        lo = both[:, 0]
        counts = both[:, 1] - lo + 1
        starts = np.cumsum(counts) - counts  # where each range begins in ``all_codes``
        run = np.searchsorted(starts, at, "right") - 1
        rows, codes = at + (lo - starts)[run], all_codes[at]
        # the kept rows of each file follow those of the one before: cut where its ranges end
        ends = np.searchsorted(run, np.cumsum([len(ranges[i]) for i in members]), "left").tolist()
        begin = 0
        for i, end in zip(members, ends, strict=True):
            found[i] = rows[begin:end], codes[begin:end]
            begin = end
    return found


def _by_type(f: SeekFile, ranges: np.ndarray, wanted: frozenset[str]
             ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The rows of ``f`` in ``ranges`` whose type is in ``wanted``, and their codes, found in the file's rows
    by type (version 4) — or None where testing every row's code is cheaper: when the wanted types are over
    :data:`_BY_TYPE_SHARE` of the part's rows, or the ranges are so many and short that looking each up in
    each type's rows costs more than reading them."""
    if f.by_type is None or f.type_start is None or not len(ranges):
        return None
    kept = _code_test(f.types, wanted).kept
    counts = f.type_start[1:] - f.type_start[:-1]
    share = int(counts[kept].sum()) / max(f.rows, 1) if kept else 0.0
    in_ranges = int((ranges[:, 1] - ranges[:, 0]).sum()) + len(ranges)
    if share > _BY_TYPE_SHARE or len(ranges) * max(len(kept), 1) * _LOOKUP_ROWS > in_ranges:
        return None
    pieces = []
    by_type = f.by_type
    for code in kept:
        a, b = int(f.type_start[code]), int(f.type_start[code + 1])
        if a == b:
            continue
        if isinstance(by_type, Packed):  # (found by the blocks' first rows: only the blocks asked for decode)
            first = by_type.searchsorted(a, b, ranges[:, 0], "left")
            end = by_type.searchsorted(a, b, ranges[:, 1], "right")
            if int((end - first).sum()):
                pieces.append(by_type.gather(run_positions(first, end - first)))
            continue
        rows = by_type[a:b]
        first = np.searchsorted(rows, ranges[:, 0], "left")
        end = np.searchsorted(rows, ranges[:, 1], "right")
        if int((end - first).sum()):
            pieces.append(rows[run_positions(first, end - first)])
    if not pieces:
        return np.zeros(0, np.int64), f.codes[:0], 0
    found = (pieces[0] if len(pieces) == 1 else sorted_ints(np.concatenate(pieces))).astype(np.int64)
    return found, f.codes[found], len(found)


@dataclass(frozen=True)
class _CodeTest:
    """The codes of a part's types that a read keeps (``allowed``: a bool per code), and those it keeps and
    refuses as lists."""

    allowed: NDArray[np.bool_]
    kept: list[int]
    refused: list[int]

    def mask(self, codes: np.ndarray) -> NDArray[np.bool_]:
        """``allowed[codes]``.  numpy looks a small integer up in a table at about the cost of eight
        comparisons per element, so the fewer of the kept and the refused codes are compared with each code
        instead when they are at most :data:`_COMPARED_CODES`."""
        few = self.kept if len(self.kept) <= len(self.refused) else self.refused
        if len(few) > _COMPARED_CODES:
            return np.take(self.allowed, codes)
        if not few:
            return np.full(len(codes), bool(self.kept))
        mask: NDArray[np.bool_] = codes == few[0]  # Python ints: compared in the codes' own width
        for code in few[1:]:
            mask |= codes == code
        return mask if few is self.kept else ~mask


def code_mask(types: tuple[str, ...], wanted: frozenset[str], codes: np.ndarray) -> NDArray[np.bool_]:
    """Per code of ``codes`` (into a part's ``types``): is its type in ``wanted``?"""
    return _code_test(types, wanted).mask(codes)


def type_codes(types: tuple[str, ...], wanted: frozenset[str]) -> list[int]:
    """The codes (into a part's ``types``) of the types in ``wanted``, increasing."""
    return _code_test(types, wanted).kept


@functools.lru_cache(maxsize=256)
def _code_test(types: tuple[str, ...], wanted: frozenset[str]) -> _CodeTest:
    """The test of ``types``' codes for ``wanted``, made once: the parts of a store mostly share their types,
    and a query asks for the same types read after read."""
    allowed = np.fromiter((t in wanted for t in types), dtype=bool, count=len(types))
    return _CodeTest(allowed, np.flatnonzero(allowed).tolist(), np.flatnonzero(~allowed).tolist())


@dataclass(frozen=True)
class _Head:
    """A seek file's prefix and header, parsed."""

    version: int
    start: int  # where the sections begin
    rows: int
    block: int
    unit: int
    types: tuple[str, ...]
    type_dtype: np.dtype[Any]
    wide: int
    sections: dict[str, tuple[int, int]]  # name -> (offset in the file, length)
    crc: int
    crcs: dict[str, int] | None  # version 7: each section's CRC-32
    attr_entries: list[dict[str, Any]]
    packed: frozenset[str]
    unserved: frozenset[str] | None


def _head(buf: Any) -> _Head:
    """The prefix and header at the start of ``buf`` (the file, or at least its first bytes: a header longer
    than ``buf`` is :class:`_ShortHead`, telling how long it is)."""
    if len(buf) < _PREFIX.size:
        raise SeekUnavailable("shorter than its prefix")
    magic, version, header_len = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise SeekUnavailable("not a seek file")
    if version not in READABLE:
        raise SeekUnavailable(f"seek file version {version}, this reader knows {', '.join(map(str, READABLE))}")
    start = _PREFIX.size + header_len
    if len(buf) < start:
        raise _ShortHead(start)
    try:
        head = json.loads(bytes(buf[_PREFIX.size:start]))
        crcs = head.get("crc32s")
        return _Head(
            version=version, start=start, rows=int(head["rows"]), block=int(head["block"]),
            unit=int(head["unit"]), types=tuple(head["types"]), type_dtype=np.dtype(head["type_dtype"]),
            wide=int(head["wide"]),
            sections={k: (start + int(a), int(n)) for k, (a, n) in head["sections"].items()},
            crc=int(head["crc32"]), crcs=None if crcs is None else {str(k): int(v) for k, v in crcs.items()},
            attr_entries=list(head.get("attrs", [])) if version >= 3 else [],
            packed=frozenset(map(str, head.get("packed", []))) if version >= 6 else frozenset(),
            unserved=frozenset(map(str, head.get("unserved", []))) if version >= 3 else None)
    except (ValueError, KeyError, TypeError) as err:
        raise SeekUnavailable(f"unreadable header: {err}") from None


class _ShortHead(SeekUnavailable):
    """The bytes read hold the prefix but not the whole header: ``length`` bytes do."""

    def __init__(self, length: int) -> None:
        super().__init__(f"a header of {length} bytes")
        self.length = length


def _section_reader(head: _Head, fetch: Any) -> Any:
    """``section(name, dtype, count)`` over the bytes ``fetch(offset, length)`` gives: a packed section read in
    place, a plain one as a view, each checked against the header."""

    def section(name: str, dtype: np.dtype, count: int) -> Any:
        at, n = head.sections[name]
        data = fetch(name, at, n)
        if name in head.packed:  # (read in place: a slice or a gather decodes only its blocks)
            if len(data) != n:
                raise SeekUnavailable(f"section {name} runs past the file's end")
            try:
                column = from_buffer(data, 0, n)
            except PackedFormatError as err:
                raise SeekUnavailable(f"section {name}: {err}") from None
            if len(column) != count or column.dtype != dtype:
                raise SeekUnavailable(f"section {name} holds {len(column)} {column.dtype}, expected {count} {dtype}")
            return column
        if n != count * dtype.itemsize or len(data) != n:
            raise SeekUnavailable(f"section {name} has {n} bytes, expected {count * dtype.itemsize}")
        if count == 0:
            return np.zeros(0, dtype=dtype)
        return np.frombuffer(data, dtype=dtype, count=count)

    return section


def _parse(buf: mmap.mmap | bytes) -> SeekFile:
    """A whole seek file (mapped): its checksum verified, its sections views of ``buf``."""
    head = _head(buf)
    view = memoryview(buf)
    if zlib.crc32(view[head.start:]) != head.crc:
        raise SeekUnavailable("checksum mismatch")
    return _assemble(head, _section_reader(head, lambda name, at, n: view[at:at + n]))


def _parse_ranged(head: _Head, read: Any) -> SeekFile:
    """A seek file of version 7 read by ranges (``read(offset, length)``: a replica's file not held, through
    the block cache): its core sections (types, times, rows by type) now, in one read, each checked against
    its own CRC-32; an attribute's sections when a read first asks for that attribute."""
    assert head.crcs is not None
    core = [name for name in head.sections if "." not in name]
    lo = min((head.sections[n][0] for n in core), default=head.start)
    hi = max((sum(head.sections[n]) for n in core), default=head.start)
    held = {"": (lo, read(lo, hi - lo))}

    def fetch(name: str, at: int, n: int) -> Any:
        base, data = held[""] if "." not in name else (at, read(at, n))
        piece = memoryview(data)[at - base:at - base + n]
        if len(piece) != n or zlib.crc32(piece) != head.crcs.get(name):  # type: ignore[union-attr]
            raise SeekUnavailable(f"section {name} fails its checksum")
        return piece

    return _assemble(head, _section_reader(head, fetch), lazy=True)


class _LazyAttrs(Mapping[str, AttrColumn]):
    """A seek file's attribute columns decoded (and, read by ranges, fetched) when first asked for."""

    def __init__(self, head: _Head, section: Any) -> None:
        self._entries = {str(e["name"]): e for e in head.attr_entries}
        self._section = section
        self._head = head
        self._done: dict[str, AttrColumn] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> AttrColumn:
        with self._lock:
            found = self._done.get(name)
            if found is None:
                entry = self._entries[name]
                try:
                    found = decode_attrs([entry], self._section, self._head.rows, len(self._head.types))[name]
                except KeyError as err:
                    raise SeekUnavailable(f"missing section {err}") from None
                except (ValueError, TypeError) as err:
                    raise SeekUnavailable(f"unreadable attribute column: {err}") from None
                self._done[name] = found
            return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


def _assemble(head: _Head, section: Any, *, lazy: bool = False) -> SeekFile:
    rows, types, version = head.rows, head.types, head.version
    try:
        i64 = np.dtype(np.int64)
        attrs: Mapping[str, AttrColumn] = (_LazyAttrs(head, section) if lazy
                                           else decode_attrs(head.attr_entries, section, rows, len(types)))
        out = SeekFile(rows=rows, types=types, codes=section("type", head.type_dtype, rows),
                       base=section("base", i64, -(-rows // head.block)),
                       steps=section("ts", np.dtype(np.uint32), rows), unit=head.unit, block=head.block,
                       wide_rows=section("wide_rows", i64, head.wide), wide_ts=section("wide_ts", i64, head.wide),
                       dictionary=pa.array(types, pa.string()), attrs=attrs, unserved=head.unserved,
                       by_type=section("by_type", np.dtype(np.uint32), rows) if version >= 4 else None,
                       type_start=(section("type_start", i64, len(types) + 1) if version >= 4 else None))
    except KeyError as err:
        raise SeekUnavailable(f"missing section {err}") from None
    except (ValueError, TypeError) as err:
        raise SeekUnavailable(f"unreadable attribute column: {err}") from None
    if rows and int(out.codes.max()) >= len(types):
        raise SeekUnavailable("a type code beyond the part's types")
    if out.type_start is not None and (out.type_start[0] != 0 or out.type_start[-1] != rows
                                       or bool((np.diff(out.type_start) < 0).any())):
        raise SeekUnavailable("rows by type do not cover the part")
    return out


#: Seek files opened lately, by (path, size, mtime, inode): parts never change once written, and the
#: checksum is verified once per process.  A mapped file keeps its disk space after it is deleted, so each
#: new entry first drops the entries whose file is gone or replaced (a deleted or rebuilt dataset).
_OPEN: dict[tuple[str, int, int, int], SeekFile] = {}
_OPEN_MAX = 256
_OPEN_LOCK = threading.Lock()


def _same_file(key: tuple[str, int, int, int]) -> bool:
    if key[1] == _RANGED:  # (a replica's file read by ranges: its objects never change)
        return True
    try:
        st = os.stat(key[0])
    except OSError:
        return False
    return (st.st_size, st.st_mtime_ns, st.st_ino) == key[1:]


#: the size in the key of a seek file read by ranges (:func:`_open_ranged`)
_RANGED = -1
#: the bytes a ranged open reads first: the prefix and, mostly, the whole header
_HEAD_BYTES = 16 << 10


def open_seek(path: str | Path, rows: int, *, again: bool = True) -> SeekFile:
    """The seek file at ``path`` for a part of ``rows`` rows, or :class:`SeekUnavailable`.  A replica's file
    not held is read by ranges (:func:`_open_ranged`)."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is None:
        ranged = _open_ranged(str(path))
        if ranged is None:
            raise SeekUnavailable("missing")
        if ranged.rows != rows:
            raise SeekUnavailable(f"holds {ranged.rows} rows, the part {rows}")
        return ranged
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    with _OPEN_LOCK:
        found = _OPEN.get(key)
    if found is None:
        try:
            with open(path, "rb") as fh:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if st.st_size else b""
        except (OSError, ValueError) as err:
            raise SeekUnavailable(f"cannot map: {err}") from None
        try:
            found = _parse(buf)
        except SeekUnavailable:
            from exact.store.fetch import refetch

            if not again or not refetch(path):  # (a replica's damaged copy is fetched again)
                raise
            return open_seek(path, rows, again=False)
        _remember(key, found)
    if found.rows != rows:
        raise SeekUnavailable(f"holds {found.rows} rows, the part {rows}")
    return found


def _remember(key: tuple[str, int, int, int], found: SeekFile) -> None:
    with _OPEN_LOCK:
        for gone in [k for k in _OPEN if not _same_file(k)]:
            del _OPEN[gone]
        if len(_OPEN) >= _OPEN_MAX:
            _OPEN.pop(next(iter(_OPEN)))
        _OPEN[key] = found


def _open_ranged(path: str) -> SeekFile | None:
    """A replica's seek file not held here, read by ranges through the home's block cache
    (:func:`exact.store.fetch.ranged`): the header, then the sections a read asks for — a question fetches
    the parts' types and times and the attributes it tests, not every attribute of every part.  A file
    before version 7 (no CRC-32 per section) is fetched whole instead.  None: not a replica's file, or the
    bucket has no such object."""
    from exact.errors import NotFound
    from exact.store.fetch import fetched, ranged

    key = (path, _RANGED, 0, 0)
    with _OPEN_LOCK:
        found = _OPEN.get(key)
    if found is not None:
        return found
    remote = ranged(path)
    if remote is None:
        return None
    try:
        first = remote.read(0, _HEAD_BYTES)
        try:
            head = _head(first)
        except _ShortHead as short:
            head = _head(remote.read(0, short.length))
    except NotFound:
        return None
    if head.crcs is None:  # (an older file: fetched whole, then mapped)
        if not fetched(path):
            return None
        return open_seek(path, head.rows)
    found = _parse_ranged(head, remote.read)
    _remember(key, found)
    return found
