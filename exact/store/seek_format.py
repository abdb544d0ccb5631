"""The seek-file format: a part's ``ts``, ``type`` and attributes laid out so that a few rows are read in place.

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
(:class:`exact.store.value_index.ValueIndex`, 4 bytes per row and attribute), so that a condition such as
``v.amount > 50000`` finds the rows of ``v``'s types that may meet it without testing the others.

Version 6 bit-packs the ts offsets (frame of reference per 256 rows) and the rows by type (steps between
rows, per 256): :mod:`exact.store.packing`; a read gathers or slices them in place, decoding only the blocks
it touches.  The header lists the packed sections (``packed``).  Version 7 packs the attribute columns as
well: codes and null flags by frame of reference (a code takes the bits of its part's range), a value index's
rows as steps, and a double whose values are decimals of a few places as integers at that scale
(:mod:`exact.store.seek_attrs`); and its header carries each section's CRC-32 (``crc32s``), so that a
replica reads a file it does not hold by ranges, section by section, each checked on its own
(:func:`open_seek`).  Version 8 keeps a string attribute's dictionary compressed (zstd: its sorted values share
long prefixes — dates, case ids) and its offsets packed as steps, undone once when the column is opened.

Version 3 adds the part's attributes, one fixed-width code per row each (:mod:`exact.store.seek_attrs`), so
that a condition's values are read in place too; the header lists the attributes served (``attrs``) and
those that are not (``unserved``: a string attribute of too many distinct values).

A seek file is derived from its part and written with it.  A reader that finds it missing, damaged (its
checksum is verified on the first open in a process) or of another version reads the Parquet part instead,
so a bad seek file costs time, never a wrong answer.
"""
from __future__ import annotations

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

from exact.store.footprint import seek_allowance
from exact.store.packing import PackedFormatError, from_buffer, pack
from exact.store.packing import to_bytes as packed_bytes
from exact.store.seek_attrs import AttrColumn, decode_attrs, encode_attrs

MAGIC = b"SQSKSEEK"
VERSION = 8  # 7: string dictionaries plain; 6: nor attribute columns and value indexes packed, no CRC-32 per
#             section; 5: nor ts steps and rows by type packed; 4: no value indexes; 3: nor rows by type; 2: nor
#             attribute columns; 1: 256-row ts blocks
#: Versions a reader takes: a version-2 file serves reads that ask for no attribute; versions 2 and 3 find
#: the rows of a type by testing every row's code; before version 5 a condition is tested on every row of
#: its variable's types.
READABLE = (2, 3, 4, 5, 6, 7, 8)
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
WIDE = 0xFFFFFFFF

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
    if version not in (5, 6, 7, VERSION):
        raise ValueError(f"seek files are written in version 5, 6, 7 or {VERSION}, not {version}")
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
    wide_rows = np.flatnonzero(steps >= WIDE)
    narrow = steps.astype(np.uint32)  # the wide ones are overwritten just below
    narrow[wide_rows] = WIDE
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
        attrs, rows, chosen, type_codes=codes, n_types=len(names), packed=version >= 7, allowance=allowance,
        compressed=version >= 8)
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


def read_head(buf: Any) -> _Head:
    """The prefix and header at the start of ``buf`` (the file, or at least its first bytes: a header longer
    than ``buf`` is :class:`ShortHead`, telling how long it is)."""
    if len(buf) < _PREFIX.size:
        raise SeekUnavailable("shorter than its prefix")
    magic, version, header_len = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise SeekUnavailable("not a seek file")
    if version not in READABLE:
        raise SeekUnavailable(f"seek file version {version}, this reader knows {', '.join(map(str, READABLE))}")
    start = _PREFIX.size + header_len
    if len(buf) < start:
        raise ShortHead(start)
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


class ShortHead(SeekUnavailable):
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


def parse_file(buf: mmap.mmap | bytes) -> SeekFile:
    """A whole seek file (mapped): its checksum verified, its sections views of ``buf``."""
    head = read_head(buf)
    view = memoryview(buf)
    if zlib.crc32(view[head.start:]) != head.crc:
        raise SeekUnavailable("checksum mismatch")
    return _assemble(head, _section_reader(head, lambda name, at, n: view[at:at + n]))


def parse_ranged(head: _Head, read: Any) -> SeekFile:
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
