"""Seek files read: the rows of a part's ranges of the wanted types, their ts, and the files opened once per process.

The file format (what a seek file holds, its versions, how it is written and checked) is
:mod:`exact.store.seek_format`; this module reads parts through it.  A read finds the rows of the wanted types
in a part's ranges by testing their codes, or from the part's rows by type when those types are few
(:func:`select`), and their ts in place (:func:`ts_of`).  A seek file is opened once per process
(:func:`open_seek`): mapped and checked whole on local disk; on a replica that does not hold it, read by
ranges (the header, the core sections, an attribute's sections when first asked for).  A reader that finds a
seek file missing, damaged or of a version it does not know reads the Parquet part instead, so a bad seek
file costs time, never a wrong answer.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from exact.arrays import joined, run_positions, sorted_ints
from exact.errors import out_of_resources
from exact.store.packing import BLOCK, Packed
from exact.store.seek_format import (
    WIDE,
    SeekFile,
    SeekUnavailable,
    ShortHead,
    parse_file,
    parse_ranged,
    read_head,
)

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
#: a type's rows in a packed seek file are decoded whole, not searched by their blocks, when they are at most
#: this many per range looked up: each range's two ends decode a block each (of :data:`~exact.store.packing.BLOCK`
#: rows), and a whole run decodes in one pass
_SEARCHED_ROWS = 2 * BLOCK
#: a read of at most this many ranges decodes each range's rows of a type as a run; more are gathered
_DECODED_RANGES = 4


def ts_of(files: Sequence[SeekFile], rows: Sequence[np.ndarray]) -> np.ndarray:
    """The ts (int64 µs) of ``rows[i]`` of ``files[i]``, one file's after the other's.  Only the look-ups
    are made file by file; the arithmetic, and the search for the rows kept apart as wide, once for all."""
    steps = joined([f.steps[r] for f, r in zip(files, rows, strict=True)])
    base = joined([f.base[r // f.block] for f, r in zip(files, rows, strict=True)])
    units = [f.unit for f in files]
    unit = units[0] if len(set(units)) == 1 else np.repeat(units, [len(r) for r in rows])
    out = base + steps.astype(np.int64) * unit
    wide = np.flatnonzero(steps == WIDE)
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
        if isinstance(by_type, Packed) and b - a <= len(ranges) * _SEARCHED_ROWS:
            rows = by_type.decode(a, b)  # (a short run decoded whole costs less than a search per range end)
        elif isinstance(by_type, Packed):  # (found by the blocks' first rows: only the blocks asked for decode)
            first = by_type.searchsorted(a, b, ranges[:, 0], "left")
            end = by_type.searchsorted(a, b, ranges[:, 1], "right")
            if len(ranges) <= _DECODED_RANGES:  # (a run decodes in one pass, without a position per row)
                pieces.extend(by_type.decode(lo, hi) for lo, hi in zip(first.tolist(), end.tolist(), strict=True)
                              if hi > lo)
            elif int((end - first).sum()):
                pieces.append(by_type.gather(run_positions(first, end - first)))
            continue
        else:
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
            exhausted = out_of_resources(err)
            if exhausted is not None:  # (not the file's fault: the query fails, the store stays trusted)
                raise exhausted from err
            raise SeekUnavailable(f"cannot map: {err}") from None
        try:
            found = parse_file(buf)
        except SeekUnavailable:
            from exact.store.fetch import refetch

            if not again or not refetch(path):  # (a replica's damaged copy is fetched again)
                raise
            return open_seek(path, rows, again=False)
        _remember(key, found)
    if found.rows != rows:
        raise SeekUnavailable(f"holds {found.rows} rows, the part {rows}")
    return found


def _most_open() -> int:
    """How many mapped files to keep: :data:`_OPEN_MAX`, or a quarter of the open files this process may
    hold if that is fewer (each map keeps a file open)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return _OPEN_MAX
    return _OPEN_MAX if soft == resource.RLIM_INFINITY else max(8, min(_OPEN_MAX, soft // 4))


def _remember(key: tuple[str, int, int, int], found: SeekFile) -> None:
    most = _most_open()
    with _OPEN_LOCK:
        for gone in [k for k in _OPEN if not _same_file(k)]:
            del _OPEN[gone]
        while _OPEN and len(_OPEN) >= most:
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
            head = read_head(first)
        except ShortHead as short:
            head = read_head(remote.read(0, short.length))
    except NotFound:
        return None
    if head.crcs is None:  # (an older file: fetched whole, then mapped)
        if not fetched(path):
            return None
        return open_seek(path, head.rows)
    found = parse_ranged(head, remote.read)
    _remember(key, found)
    return found
