"""The on-disk format of one index version: one file, versioned, checksummed per section, memory-mappable.

Layout (all integers little-endian)::

    offset 0    prefix (64 bytes): magic b"SQSKTREE", u32 format version, u32 reserved,
                u64 header offset, u64 header length, u32 CRC-32 of the header, zero padding
    offset 64   sections, each starting on a 64-byte boundary (so numpy views of a mapped file are aligned):
                  level     int8[rows]            level of every node, in id (creation) order
                  log2      int8[rows]            log2 of every node's stored size in bits
                  leaf_ts   int64[leaves, 2]      first and last event time (UTC µs) of every leaf
                  bits      uint8[…]              every row's stored (folded) bits, in id order, no gaps
                  open_bits uint8[…]              unfolded bits of the nodes that may still merge and of the
                                                  partial leaf, m/8 bytes each — for dense ones stored folded
                  open_positions uint32[…]        the set positions of such nodes kept sparse
    header      JSON: format name and version, config, events, rows, partial, the open nodes
                ``[[id, level, mode, count], …]`` (mode: 0 = its stored bits, 1 = in open_bits,
                2 = ``count`` entries of open_positions), the tree's ``index_digest``, and per section
                ``{name, dtype, shape, offset, length, sha256}``

Children, seq intervals and internal nodes' times are not stored: they follow from the levels (a parent is
created right after its last child; leaf ``j`` covers ``[jC, (j+1)C − 1]``), see
:meth:`sketch.tree.BloomTree.from_columns`, which keeps a node's overhead at 2 bytes plus 16 per leaf.

Loading maps the file and verifies the header's CRC-32, every section's SHA-256, the shapes and the
structure (levels forming a forest, bits length = Σ sizes / 8, the digest); anything off raises
:class:`exact.errors.IndexCorrupt` naming the file and what failed.  The arrays of a loaded tree are read-only
views into the mapping; the first append copies them.  Writing goes to a temporary name in the same directory,
is fsynced and renamed into place, so a reader sees either no file or a whole one.

The constants of the format and where a tree's sections go are :mod:`sketch.tree.file_layout`, which the tree
itself uses to know its stored size (:meth:`~sketch.tree.bloomtree.BloomTree.stored_bytes`) without this
module.

Folded nodes sit between a quarter and a half full, where a plain bit array is the smallest encoding (a
set-bit list costs 16–32 bits per set bit, i.e. ≥ 4 bits per stored bit at 25 % fill), so the bits are stored
as is.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from exact.errors import IndexCorrupt
from sketch.tree import BloomTree, TreeConfig
from sketch.tree.bits import Bits
from sketch.tree.file_layout import (
    ALIGN,
    COLUMNS,
    DENSE,
    FORMAT_VERSION,
    IN_POOL,
    MAGIC,
    PREFIX,
    SPARSE,
    lay_out,
    pad,
)


def serialize(tree: BloomTree) -> bytes:
    """The whole file as bytes."""
    arrays, head = tree.stored_form()
    header, header_offset = lay_out(arrays, head, tree.digest())
    out = bytearray(PREFIX.pack(MAGIC, FORMAT_VERSION, 0, header_offset, len(header), zlib.crc32(header)))
    out += bytes(pad(len(out)))
    for _, data in arrays:
        out += data.tobytes()
        out += bytes(pad(data.nbytes))
    out += header
    return bytes(out)


def save(tree: BloomTree, path: str | os.PathLike[str]) -> int:
    """Write the tree atomically (temp file in the same directory, fsync, rename); returns its size."""
    path = Path(path)
    data = serialize(tree)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return len(data)


def load(path: str | os.PathLike[str], *, verify: bool = True) -> BloomTree:
    """Map an index file and return its tree; a damaged file raises :class:`IndexCorrupt`."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < ALIGN:
                raise IndexCorrupt(f"index file is truncated ({size} bytes)", where=str(path))
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError as exc:
        raise IndexCorrupt("index file is missing", where=str(path)) from exc
    return _parse(buffer, str(path), verify=verify)


def deserialize(data: bytes, *, verify: bool = True) -> BloomTree:
    return _parse(data, "<bytes>", verify=verify)


def _parse(buffer: bytes | mmap.mmap, where: str, *, verify: bool) -> BloomTree:
    view = memoryview(buffer)
    if len(view) < ALIGN:
        raise IndexCorrupt(f"index data is truncated ({len(view)} bytes)", where=where)
    magic, version, reserved, header_offset, header_len, crc = PREFIX.unpack_from(view, 0)
    if magic != MAGIC:
        raise IndexCorrupt("not a seqsketch index file (bad magic)", where=where)
    if reserved or any(view[PREFIX.size:ALIGN]):
        raise IndexCorrupt("damaged file prefix (reserved bytes are not zero)", where=where)
    if version != FORMAT_VERSION:
        raise IndexCorrupt(f"index format version {version} is not supported (expected {FORMAT_VERSION})",
                           where=where)
    if header_offset + header_len != len(view):
        raise IndexCorrupt(f"header at {header_offset}+{header_len} does not end the {len(view)}-byte file "
                           "(truncated or extended)", where=where)
    header_bytes = bytes(view[header_offset:header_offset + header_len])
    if zlib.crc32(header_bytes) != crc:
        raise IndexCorrupt("header checksum mismatch", where=where)
    try:
        header = json.loads(header_bytes)
        config = TreeConfig.from_dict(header["config"])
        sections = {s["name"]: s for s in header["sections"]}
        arrays = {name: _section(view, sections[name], dtype, where, header_offset, verify)
                  for name, dtype in COLUMNS}
        tree = _assemble(config, header, arrays, where)
    except IndexCorrupt:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexCorrupt(f"malformed header: {exc}", where=where) from exc
    if verify and tree.digest() != header["index_digest"]:
        raise IndexCorrupt("index digest does not match the stored content", where=where)
    tree._mapping = buffer  # type: ignore[attr-defined]  # keep the mapping alive with its views
    return tree


def _section(view: memoryview, section: dict[str, Any], dtype: str, where: str, limit: int, verify: bool) -> np.ndarray:
    name, offset, length = section["name"], int(section["offset"]), int(section["length"])
    if section["dtype"] != np.dtype(dtype).str or offset % ALIGN or offset < ALIGN or offset + length > limit:
        raise IndexCorrupt(f"section {name!r} has a bad dtype or extent", where=where)
    shape = tuple(int(x) for x in section["shape"])
    if int(np.prod(shape)) * np.dtype(dtype).itemsize != length:
        raise IndexCorrupt(f"section {name!r}: shape {shape} does not match {length} bytes", where=where)
    raw = view[offset:offset + length]
    if verify and hashlib.sha256(raw).hexdigest() != section["sha256"]:
        raise IndexCorrupt(f"section {name!r} failed its SHA-256 check", where=where)
    return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape) if length else np.zeros(shape, dtype)


def _assemble(config: TreeConfig, header: dict[str, Any], arrays: dict[str, np.ndarray], where: str) -> BloomTree:
    rows = int(header["rows"])
    for name in ("level", "log2"):
        if arrays[name].shape != (rows,):
            raise IndexCorrupt(f"section {name!r} has {arrays[name].shape} entries for {rows} rows",
                               where=where)
    log2 = arrays["log2"]
    if rows and (int(log2.min()) < 3 or (1 << int(log2.max())) > config.m):
        raise IndexCorrupt("stored node sizes are out of range", where=where)
    if rows and int(arrays["level"].min()) < 0:
        raise IndexCorrupt("negative node level", where=where)
    leaf_ts = arrays["leaf_ts"]
    if leaf_ts.ndim != 2 or leaf_ts.shape[1:] != (2,):
        raise IndexCorrupt("leaf time section has the wrong shape", where=where)
    try:
        tree = BloomTree.from_columns(config, n_events=int(header["events"]), level=arrays["level"],
                                      log2=log2, leaf_ts=leaf_ts, bits=arrays["bits"], opened=[],
                                      partial_bits=None, first_leaf=int(header.get("first_leaf", 0)))
    except ValueError as exc:
        raise IndexCorrupt(f"inconsistent tree structure: {exc}", where=where) from exc
    _restore_open(tree, header, arrays["open_bits"], arrays["open_positions"], where)
    return tree


def _restore_open(tree: BloomTree, header: dict[str, Any], extra: np.ndarray, positions: np.ndarray,
                  where: str) -> None:
    m = tree.config.m
    row_bytes = m // 8
    cursor = spot = 0
    opened = []
    for node, level, mode, count in header["open"]:
        if not 0 <= node < tree.rows:
            raise IndexCorrupt(f"open node {node} is out of range", where=where)
        bits: Bits
        if mode == SPARSE:
            bits = positions[spot:spot + count].astype(np.int64)
            spot += count
            if bits.size != count or (count and (int(bits.max()) >= m or (np.diff(bits) <= 0).any())):
                raise IndexCorrupt("merge state positions are damaged", where=where)
        else:
            if mode == IN_POOL:
                offset = int(tree._offsets.data[node])
                raw = tree._pool.data[offset:offset + row_bytes].tobytes()
            elif mode == DENSE:
                raw = extra[cursor:cursor + row_bytes].tobytes()
                cursor += row_bytes
            else:
                raise IndexCorrupt(f"unknown merge state mode {mode}", where=where)
            if len(raw) != row_bytes:
                raise IndexCorrupt("merge state is truncated", where=where)
            bits = int.from_bytes(raw, "little")
        opened.append(tree.open_node(int(node), int(level), bits))
    if cursor != extra.size or spot != positions.size:
        raise IndexCorrupt("merge state has trailing bytes", where=where)
    if header["partial"]:
        if not opened or opened[-1].id != tree.rows - 1:
            raise IndexCorrupt("partial leaf state is missing", where=where)
        tree._partial_bits = opened.pop().bits
    tree._open = opened
