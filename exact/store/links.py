"""Each kept event's next event in its partition, from the partition attribute's codes in the seek files.

Under ``partition_contiguity`` with ``PARTITION BY`` a read that leaves events out must tell each event it
keeps the seq of the next event of its partition, whether that one was read or not
(:attr:`exact.frame.EventFrame.partition_next`): an event of the partition that binds nothing still ends
the run.  Knowing it takes every event's partition value in the ranges read — but only that value, not the
event.  A seek file holds each served attribute as a narrow code per row (:mod:`exact.store.seek_attrs`), so
one pass over those codes, in place, finds the successors: a table of the kept event waiting in each
partition, filled as the next event of that partition goes by.  Per event that is one code read and two
look-ups, against decoding seq, ts, type and the value of every event and sorting them into partitions.

A run needs only some of those links, though: one to a later kept event of the same partition, and within
the window (a match holding both spans no more).  Told each kept event's horizon, :func:`partition_next_near`
numbers the kept events' partitions first, pairs each with the next kept one of its partition, and passes
only the rows between the pairs within reach; the others are told -1.  With many partitions (a case, an
account, a value of a thousand) those rows are a few gaps between nearby kept events, not every row.

Codes are made comparable across parts first: a string's code is its rank in its part's own dictionary
(mapped through the union of the parts' dictionaries), an integer's is ``value - base`` (shifted by the
part's base).  Doubles, integers stored raw (wider than 32 bits), integers over too wide a range,
attributes a part does not serve, a part the snapshot widened to another type, and several partition
attributes are left to the general path (:func:`exact.engine.ordering.partition_links` over a full read):
:func:`partition_next` says None.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.store.manifest import PARTS, PartInfo, SeqRanges, Snapshot, StoreBase
from exact.store.seek import open_seek
from exact.store.seek_attrs import AttrColumn
from exact.store.seek_format import SeekFile, SeekUnavailable, seek_name

_I64 = np.int64
#: Integer partition values are numbered by ``value - least`` (over every part's codes, which may be 8, 16
#: or 32 bits wide); over a wider range than this the pending table would be too large, and the general path
#: is taken.
MAX_INT_SPAN = 1 << 22
_KINDS = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_()}


def store_partition_next(store: StoreBase, ranges: SeqRanges, attrs: Sequence[str], seqs: np.ndarray,
                         snapshot: Snapshot | None = None, horizon: np.ndarray | None = None,
                         joins: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """For ``seqs`` (sorted, inside ``ranges``) of ``store``'s ``snapshot``: the seq of each one's next event in
    its partition (``PARTITION BY attrs``) among the events of ``ranges``, -1 for none, and the rows whose
    partition value was looked at — from the seek files' codes of the attribute, in place; None when they
    cannot tell (a part without a seek file serving it, several attributes, a kind the codes do not number).

    With ``horizon`` (per seq, the last seq a match holding it can reach; and ``joins``: may a run go on to it)
    only the links a run can follow are told (:func:`partition_next_near`): far fewer rows are looked at when
    the partitions are many."""
    if len(attrs) != 1:
        return None
    snap = snapshot or store.snapshot()
    bounds = np.asarray(ranges, dtype=_I64).reshape(-1, 2)
    bounds = bounds[bounds[:, 0] <= bounds[:, 1]]
    if horizon is not None:
        seqs = np.ascontiguousarray(seqs, dtype=_I64)
        if not len(seqs):
            return np.zeros(0, dtype=_I64), 0
        # (a link runs from one kept event to a later one: every row it passes lies between the first and last)
        opened = _opened(store, snap, np.asarray([[seqs[0], seqs[-1]]], dtype=_I64))
        return None if opened is None else partition_next_near(
            opened, attrs[0], snap.attr_types().get(attrs[0]), seqs, np.asarray(horizon, dtype=_I64), joins)
    parts = _opened(store, snap, bounds)
    if parts is None:
        return None
    found = partition_next(parts, attrs[0], snap.attr_types().get(attrs[0]), seqs)
    if found is None:
        return None
    return found, int(sum(int((inside[:, 1] - inside[:, 0] + 1).sum()) for _, _, inside in parts))


def _opened(store: StoreBase, snap: Snapshot, bounds: np.ndarray
            ) -> list[tuple[PartInfo, SeekFile, np.ndarray]] | None:
    """The parts ``bounds`` meet, each with its seek file and the ranges inside it; None where a part has none."""
    parts = []
    for part, inside in snap.parts_in(bounds):
        if not part.seek_bytes:
            return None
        try:
            seek = open_seek(store.root / PARTS / seek_name(part.file), part.rows)
        except SeekUnavailable:
            return None
        parts.append((part, seek, inside))
    return parts


def partition_next_near(parts: Sequence[tuple[PartInfo, SeekFile, np.ndarray]], attr: str,
                        typ: pa.DataType | None, seqs: np.ndarray, horizon: np.ndarray,
                        joins: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """The links of ``seqs`` (sorted) a run can follow, and the rows looked at: for each one whose partition
    (``PARTITION BY attr``) holds a later one of ``seqs`` at or before its ``horizon`` (below the seq itself:
    no run goes on from it) that a run may go on to (``joins``, per seq; None: all), the seq of its next event
    in the partition among every event of the stream (that later one, or an event between that ends the
    run); -1 for the others (a run from it could go on only to an event it is not linked to, to one no run
    takes, or past its horizon, which no match reaches).  ``parts``: every part from the first of ``seqs`` to the
    last, with its seek file.  None when the codes cannot tell (as :func:`partition_next`).

    Only the rows between such an event and its partition's next one of ``seqs`` are looked at, besides the
    codes of ``seqs`` themselves: with many partitions and a window those gaps are few and short, where
    :func:`partition_next` passes every row of the ranges read."""
    numbered = _columns_numbered(parts, attr, typ)
    if numbered is None:
        return None
    columns, numbers, distinct = numbered
    out = np.full(len(seqs), -1, dtype=_I64)
    # each kept event's partition number, from its part's codes
    group = np.full(len(seqs), -1, dtype=_I64)
    for (part, _, _), column, number in zip(parts, columns, numbers, strict=True):
        a, b = np.searchsorted(seqs, [part.first_seq, part.last_seq + 1])
        if column is None or number is None or a == b:
            continue
        assert column.codes is not None
        codes = column.codes[seqs[a:b] - part.first_seq].astype(_I64)
        table, offset, null = number
        if len(table):
            group[a:b] = table[codes]
        else:
            group[a:b] = np.where(codes == null, -1, codes + offset)
    # the next kept event of the same partition; a link is wanted where it lies within the horizon
    order = np.lexsort((seqs, group))
    same = (group[order[1:]] == group[order[:-1]]) & (group[order[:-1]] >= 0)
    later = np.full(len(seqs), -1, dtype=_I64)
    later[order[:-1][same]] = order[1:][same]  # (its index in seqs)
    ok = later >= 0
    if joins is not None:
        ok[ok] = np.asarray(joins, dtype=bool)[later[ok]]
    later[ok] = seqs[later[ok]]
    wanted = np.flatnonzero(ok & (later <= horizon))
    if not len(wanted):
        return out, len(seqs)
    if all(_searchable(c) for c in columns):
        return _near_by_index(parts, columns, numbers, distinct, seqs, group, wanted, later[wanted], out)
    gaps = _union(seqs[wanted], later[wanted])
    kernel = _pass_compiled()
    pending = np.full(distinct, -1, dtype=_I64)
    found = np.full(len(wanted), -1, dtype=_I64)
    targets = np.ascontiguousarray(seqs[wanted])
    at = 0
    firsts = np.asarray([p.first_seq for p, _, _ in parts], dtype=_I64)
    lasts = np.asarray([p.last_seq for p, _, _ in parts], dtype=_I64)
    for i in range(len(parts)):
        column, number = columns[i], numbers[i]
        inside = gaps[(gaps[:, 1] >= firsts[i]) & (gaps[:, 0] <= lasts[i])].copy()
        if not len(inside):
            continue
        inside[:, 0] = np.maximum(inside[:, 0], firsts[i])
        inside[:, 1] = np.minimum(inside[:, 1], lasts[i])
        if column is None or number is None:  # all null here: in no partition, yet the kept seqs go by
            at = int(np.searchsorted(targets, lasts[i], "right"))
            continue
        assert column.codes is not None
        table, offset, null = number
        at = kernel(column.plain_codes, inside - firsts[i], table, offset, null, int(firsts[i]), targets, at, pending,
                    found)
    out[wanted] = found
    return out, len(seqs) + int((gaps[:, 1] - gaps[:, 0] + 1).sum())


def _searchable(column: AttrColumn | None) -> bool:
    """Does ``column``'s value index find its rows of one value by the codes (see :meth:`AttrColumn.in_buckets`)?"""
    return column is None or (column.index is not None and column.codes is not None and column.null is not None
                              and (column.kind == "string" or (column.kind == "int64" and abs(column.base) < 1 << 52)))


def _near_by_index(parts: Sequence[tuple[PartInfo, SeekFile, np.ndarray]], columns: Sequence[AttrColumn | None],
                   numbers: Sequence[_Numbers | None], distinct: int, seqs: np.ndarray, group: np.ndarray,
                   wanted: np.ndarray, later: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`partition_next_near`'s links ``wanted`` (indices into ``seqs``; ``later``: each one's next kept
    event of its partition) found in the value indexes of the partition attribute: an event of the partition
    between the two lies in its value's bucket, among each type's rows of that bucket (sorted by row), so per
    part and type a search finds the first row after the earlier event and the rows of the bucket up to the
    later one are compared with the partition's code.  With 256 buckets that is a few rows per link and type,
    where a pass over the gap reads every row of it."""
    kernel = _search_compiled()
    lo_seq = seqs[wanted]
    result = later.copy()  # (no event of the partition between: the later kept one is the next)
    open_ = np.ones(len(wanted), dtype=bool)
    looked = len(seqs)
    for (part, _, _), column, number in zip(parts, columns, numbers, strict=True):
        if column is None or number is None:
            continue  # (all null here: in no partition)
        first, last = int(part.first_seq), int(part.last_seq)
        here = np.flatnonzero(open_ & (lo_seq < last) & (later > first))
        if not len(here):
            continue
        index = column.index
        assert index is not None and column.codes is not None
        table, offset, _ = number
        # each partition number's code in this part (-1: no such value here)
        if len(table):
            code_of = np.full(distinct, -1, dtype=_I64)
            valid = np.flatnonzero(table[:len(table)] >= 0)
            code_of[table[valid]] = valid
            codes = code_of[group[wanted[here]]]
        else:
            codes = group[wanted[here]] - offset
            codes[codes == column.null] = -1  # (a value this part cannot hold: its code stands for null)
        shift = column.base if column.kind == "int64" else 0
        edges = np.asarray([math.ceil(e) - shift for e in index.edge_list], dtype=_I64)
        bucket = np.searchsorted(edges, codes, "right").astype(_I64)
        width = index.width
        found = np.empty(len(here), dtype=_I64)
        looked += kernel(lo_seq[here] - first, later[here] - first, codes, bucket, index.plain_rows, index.start,
                         width, (len(index.start) - 1) // width, column.plain_codes, found)
        hit = found < later[here] - first
        result[here[hit]] = found[hit] + first
        open_[here[hit]] = False
    out[wanted] = result
    return out, looked


@functools.cache
def _search_compiled() -> Callable[..., int]:
    """:func:`_bucket_search` compiled (cached on disk) on first use."""
    import numba

    compiled: Callable[..., int] = numba.njit(cache=True, nogil=True)(_bucket_search)
    return compiled


def _bucket_search(lo: Any, hi: Any, code: Any, bucket: Any, rows: Any, start: Any, width: int, n_types: int,
                   codes: Any, found: Any) -> int:
    """Per link ``k``: the first row strictly between ``lo[k]`` and ``hi[k]`` (row numbers of the part; either
    may lie outside it) whose code is ``code[k]`` (-1: none here), found among each type's rows of the
    value-index bucket ``bucket[k]``; ``hi[k]`` where there is none.  Returns how many rows' codes were
    compared."""
    looked = 0
    for k in range(len(lo)):
        best = hi[k]
        if code[k] >= 0:
            for c in range(n_types):
                a = start[c * width + bucket[k]]
                b = start[c * width + bucket[k] + 1]
                left, right = a, b
                while left < right:  # the first of the cell's rows after lo
                    mid = (left + right) // 2
                    if rows[mid] <= lo[k]:
                        left = mid + 1
                    else:
                        right = mid
                while left < b and rows[left] < best:
                    looked += 1
                    if codes[rows[left]] == code[k]:
                        best = rows[left]
                        break
                    left += 1
        found[k] = best
    return looked


def partition_next(parts: Sequence[tuple[PartInfo, SeekFile, np.ndarray]], attr: str, typ: pa.DataType | None,
                   seqs: np.ndarray) -> np.ndarray | None:
    """For ``seqs`` (sorted, each inside the ranges read): the seq of the next event of its partition
    (``PARTITION BY attr``) among the rows of ``parts`` (per part: its seek file and the seq ranges read in
    it, ``(n, 2)`` inclusive, in stream order), -1 for none or a null value — or None when the codes cannot
    tell (see the module docstring).  ``typ`` is the attribute's type in the snapshot."""
    numbered = _columns_numbered(parts, attr, typ)
    if numbered is None:
        return None
    columns, numbers, distinct = numbered
    seqs = np.ascontiguousarray(seqs, dtype=_I64)
    out = np.full(len(seqs), -1, dtype=_I64)
    pending = np.full(distinct, -1, dtype=_I64)
    kernel = _pass_compiled()
    at = 0
    for (part, _, inside), column, number in zip(parts, columns, numbers, strict=True):
        if column is None or number is None:  # all null here: in no partition, yet the kept seqs go by
            at = int(np.searchsorted(seqs, part.last_seq, "right"))
            continue
        assert column.codes is not None
        table, offset, null = number
        rows = np.ascontiguousarray(inside, dtype=_I64).reshape(-1, 2) - part.first_seq
        at = kernel(column.plain_codes, rows, table, offset, null, int(part.first_seq), seqs, at, pending, out)
    return out


def _columns_numbered(parts: Sequence[tuple[PartInfo, SeekFile, np.ndarray]], attr: str, typ: pa.DataType | None
                      ) -> tuple[list[AttrColumn | None], list[_Numbers | None], int] | None:
    """Per part, the attribute's codes (None: all null there) and how they become partition numbers, and how
    many numbers there are; None when the codes cannot tell (see the module docstring)."""
    columns: list[AttrColumn | None] = []
    for _, seek, _ in parts:
        column = seek.attrs.get(attr)
        if column is None and not seek.serves([attr]):
            return None
        if column is not None and column.kind != "null" and (
                _KINDS.get(column.kind) != typ or column.codes is None or column.valid is not None):
            return None
        columns.append(column if column is not None and column.kind != "null" else None)
    numbering = _numbering(columns)
    if numbering is None:
        return None
    numbers, distinct = numbering
    return columns, numbers, distinct


def _union(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The inclusive ranges ``[lo, hi]`` (``lo`` sorted) as disjoint, sorted ranges ((k, 2) int64)."""
    reach = np.maximum.accumulate(hi)
    new = np.ones(len(lo), dtype=bool)
    new[1:] = lo[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(lo)) - 1
    return np.stack([lo[first], reach[last]], axis=1).astype(_I64)


#: How a part's codes become partition numbers: a table from code to number (-1: null) for strings and
#: booleans, or, for integers, ``code + offset`` with ``null`` the code of null (-1: none).
_Numbers = tuple[np.ndarray, int, int]
_NO_TABLE = np.zeros(0, dtype=_I64)


def _numbering(columns: Sequence[AttrColumn | None]) -> tuple[list[_Numbers | None], int] | None:
    """Per part, how its codes become partition numbers shared by all parts (None: all null), and how many
    numbers there are; None when the kind does not allow it."""
    present = [c for c in columns if c is not None]
    if not present:
        return [None] * len(columns), 1
    kinds = {c.kind for c in present}
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind == "string":
        if any(c.dictionary is None or c.codes is None or c.codes.dtype.itemsize > 2 for c in present):
            return None
        union = pc.unique(pa.chunked_array([c.dictionary for c in present], pa.string()))
        out: list[_Numbers | None] = []
        for c in columns:
            if c is None:
                out.append(None)
                continue
            assert c.dictionary is not None and c.codes is not None
            table = np.full(1 << (8 * c.codes.dtype.itemsize), -1, dtype=_I64)
            table[:len(c.dictionary)] = pc.index_in(c.dictionary, union).to_numpy(zero_copy_only=False)
            out.append(_table(table, c))
        return out, max(len(union), 1)
    if kind == "bool":
        return [None if c is None else _table(np.array([0, 1] + [-1] * 254, dtype=_I64), c) for c in columns], 2
    if kind != "int64" or any(c.null is None and c.codes is not None and c.codes.dtype == np.int64
                              for c in present):
        return None  # doubles; integers stored raw (their range is wider than 32 bits)
    least = min(c.base for c in present)
    top = max(c.base + _largest(c) for c in present)
    if top - least + 1 > MAX_INT_SPAN:
        return None
    out = []
    for c in columns:
        if c is None:
            out.append(None)
        else:
            out.append((_NO_TABLE, c.base - least, -1 if c.null is None else int(c.null)))
    return out, top - least + 1


def _largest(column: AttrColumn) -> int:
    """The largest code of ``column`` that is not null's (0 when there is none)."""
    codes = column.codes
    assert codes is not None
    if codes.dtype.itemsize <= 2:  # the width's range bounds it well enough: a table this size is small
        return (1 << (8 * codes.dtype.itemsize)) - 1
    codes = column.plain_codes
    values = codes if column.null is None else codes[codes != column.null]
    return int(values.max()) if len(values) else 0


def _table(table: np.ndarray, column: AttrColumn) -> _Numbers:
    if column.null is not None:
        table[column.null] = -1
    return table, 0, -1


@functools.cache
def _pass_compiled() -> Callable[..., int]:
    """:func:`_successor_pass` compiled (cached on disk) on first use."""
    import numba

    compiled: Callable[..., int] = numba.njit(cache=True, nogil=True)(_successor_pass)
    return compiled


def _successor_pass(codes: Any, ranges: Any, table: Any, offset: int, null: int, first_seq: int, seqs: Any,
                    at: int, pending: Any, out: Any) -> int:
    """One part's rows in ``ranges`` (row numbers, inclusive) in order: each row's partition (its code's entry
    in ``table``, or without a table ``code + offset`` unless the code is ``null``; -1: none) gives its seq
    to the kept event waiting in that partition (``pending``: an index into ``seqs``/``out``, -1: none), and
    a kept row (the next of ``seqs`` from ``at``) waits in its own.  Returns where ``at`` has got to."""
    n = len(seqs)
    for k in range(len(ranges)):
        for row in range(ranges[k, 0], ranges[k, 1] + 1):
            c = codes[row]
            if len(table):
                g = table[c]
            elif c == null:
                g = -1
            else:
                g = c + offset
            seq = first_seq + row
            if g >= 0:
                waiting = pending[g]
                if waiting >= 0:
                    out[waiting] = seq
                    pending[g] = -1
            while at < n and seqs[at] < seq:
                at += 1
            if at < n and seqs[at] == seq:
                if g >= 0:
                    pending[g] = at
                at += 1
    return at
