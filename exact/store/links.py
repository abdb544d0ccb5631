"""Each kept event's next event in its partition, from the partition attribute's codes in the seek files.

Under ``partition_contiguity`` with ``PARTITION BY`` a read that leaves events out must tell each event it
keeps the seq of the next event of its partition, whether that one was read or not
(:attr:`exact.prefilter.EventFrame.partition_next`): an event of the partition that binds nothing still ends
the run.  Knowing it takes every event's partition value in the ranges read — but only that value, not the
event.  A seek file holds each served attribute as a narrow code per row (:mod:`exact.store.seek_attrs`), so
one pass over those codes, in place, finds the successors: a table of the kept event waiting in each
partition, filled as the next event of that partition goes by.  Per event that is one code read and two
look-ups, against decoding seq, ts, type and the value of every event and sorting them into partitions.

Codes are made comparable across parts first: a string's code is its rank in its part's own dictionary
(mapped through the union of the parts' dictionaries), an integer's is ``value - base`` (shifted by the
part's base).  Doubles, integers stored raw (wider than 32 bits), integers over too wide a range,
attributes a part does not serve, a part the snapshot widened to another type, and several partition
attributes are left to the general path (:func:`exact.engine.ordering.partition_links` over a full read):
:func:`partition_next` says None.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.store.manifest import PARTS, PartInfo, SeqRanges, Snapshot, StoreBase
from exact.store.seek import SeekFile, SeekUnavailable, open_seek, seek_name
from exact.store.seek_attrs import AttrColumn

_I64 = np.int64
#: Integer partition values are numbered by ``value - least`` (over every part's codes, which may be 8, 16
#: or 32 bits wide); over a wider range than this the pending table would be too large, and the general path
#: is taken.
MAX_INT_SPAN = 1 << 22
_KINDS = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_()}


def store_partition_next(store: StoreBase, ranges: SeqRanges, attrs: Sequence[str], seqs: np.ndarray,
                         snapshot: Snapshot | None = None) -> tuple[np.ndarray, int] | None:
    """For ``seqs`` (sorted, inside ``ranges``) of ``store``'s ``snapshot``: the seq of each one's next event in
    its partition (``PARTITION BY attrs``) among the events of ``ranges``, -1 for none, and the rows whose
    partition value was looked at — from the seek files' codes of the attribute, in place; None when they
    cannot tell (a part without a seek file serving it, several attributes, a kind the codes do not number)."""
    if len(attrs) != 1:
        return None
    snap = snapshot or store.snapshot()
    bounds = np.asarray(ranges, dtype=_I64).reshape(-1, 2)
    bounds = bounds[bounds[:, 0] <= bounds[:, 1]]
    parts = []
    for part, inside in snap.parts_in(bounds):
        if not part.seek_bytes:
            return None
        try:
            seek = open_seek(store.root / PARTS / seek_name(part.file), part.rows)
        except SeekUnavailable:
            return None
        parts.append((part, seek, inside))
    found = partition_next(parts, attrs[0], snap.attr_types().get(attrs[0]), seqs)
    if found is None:
        return None
    return found, int(sum(int((inside[:, 1] - inside[:, 0] + 1).sum()) for _, _, inside in parts))


def partition_next(parts: Sequence[tuple[PartInfo, SeekFile, np.ndarray]], attr: str, typ: pa.DataType | None,
                   seqs: np.ndarray) -> np.ndarray | None:
    """For ``seqs`` (sorted, each inside the ranges read): the seq of the next event of its partition
    (``PARTITION BY attr``) among the rows of ``parts`` (per part: its seek file and the seq ranges read in
    it, ``(n, 2)`` inclusive, in stream order), -1 for none or a null value — or None when the codes cannot
    tell (see the module docstring).  ``typ`` is the attribute's type in the snapshot."""
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
        at = kernel(column.codes, rows, table, offset, null, int(part.first_seq), seqs, at, pending, out)
    return out


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
