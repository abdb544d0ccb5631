"""A read's row filter: only the rows some variable can bind by its type and its own conditions.

Under the automaton strategies an event that no variable can bind on its own — by type and by the
conditions on that variable alone (its *properties*, Θ^p_v; Cadonna 2013, Thm. 5.1) — changes no run: the
engine's own prefilter drops it before any automaton sees it (docs/semantics.md §5).  So a read for such a
query may drop it too, where the values are cheapest to test: in the seek files, before any column of the
row is gathered (:mod:`exact.store.reader`).  A verification over a stream of frequent types, where a
condition such as ``v.amount > 50000`` keeps a few per cent of a type's events, then hands the engine
those few per cent instead of every event of the type.

The filter is a disjunction of *clauses*, one per positive or negated variable: the variable's types
(None: any) and those of its properties that name attributes only (``v.a <op> literal``, ``v.a <op>
v.b``); properties on ``seq``, ``ts`` or ``type`` are left to the engine.  Leaving a property out keeps
more rows, never fewer, so a clause is a necessary condition for the variable to bind the row, and the
filter keeps every row the engine could use.  A condition is evaluated as the engine evaluates it
(:func:`exact.prefilter.values_condition_mask`: null or missing is false, a literal of another kind is
never equal), on values widened to the snapshot's attribute types as a read gives them.  An attribute a
part's seek file does not serve is not tested there (the row is kept).

The contiguity strategies are defined on every event: a left-out row must still break a run.  Under
``strict_contiguity`` a gap in seq shows where rows were left out, so a read whose seqs are stream positions
may filter (the engine is told by the frame's ``sparse`` mark); under ``partition_contiguity`` with
``PARTITION BY`` the reader also tells each row kept the seq of its next event in its partition
(``EventFrame.partition_next``, from every row's partition value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from exact.arrays import joined
from exact.events import cast_attr
from exact.frame import EventFrame
from exact.prefilter import condition_mask, type_mask, values_condition_mask
from exact.query.ast import Condition, Field, Literal, Query, Strategy
from exact.query.normalize import FLIPPED, Plan
from exact.store.seek import type_codes
from exact.store.seek_attrs import AttrColumn, numeric_values
from exact.store.seek_format import SeekFile


@dataclass(frozen=True)
class Clause:
    """One variable's test: a row of one of ``types`` (None: any) meeting every condition."""

    types: frozenset[str] | None
    conditions: tuple[Condition, ...]

    def attributes(self) -> frozenset[str]:
        return frozenset(o.attr for c in self.conditions for o in (c.left, c.right) if isinstance(o, Field))


@dataclass(frozen=True)
class RowFilter:
    """Keep a row when some clause holds for it (see the module docstring)."""

    clauses: tuple[Clause, ...]

    def attributes(self) -> frozenset[str]:
        """The attributes the conditions name."""
        return frozenset().union(*(c.attributes() for c in self.clauses))

    def mask(self, n: int, type_test: Callable[[frozenset[str]], NDArray[np.bool_]], values: RowValues
             ) -> NDArray[np.bool_]:
        """Per row of ``n``: does some clause hold?  ``type_test(types)`` says which rows are of ``types``;
        ``values`` gives attributes' values of some of the rows (see :class:`RowValues`).  Each clause looks
        only at the rows of its types not kept already, and each condition only at those the clause's
        conditions before it left: an attribute's values are decoded for those rows, once per clause."""
        keep = np.zeros(n, dtype=bool)
        for clause in self.clauses:
            at = (np.arange(n) if clause.types is None else np.flatnonzero(type_test(clause.types)))
            at = at[~keep[at]]
            decoded = _Decoded(values, at)
            for cond in sorted(clause.conditions, key=_attrs):
                if not len(decoded.at):
                    break
                if not all(values.served(a) for a in _attrs(cond)):
                    continue  # not told here: the condition holds (the engine tests it)
                decoded.narrow(values_condition_mask(decoded.get, len(decoded.at), cond))
            at = decoded.at
            keep[at] = True
            if keep.all():
                break
        return keep

    def frame_mask(self, frame: EventFrame) -> NDArray[np.bool_]:
        """:meth:`mask` over an :class:`EventFrame` (the rows of a part read from Parquet)."""
        keep = np.zeros(len(frame), dtype=bool)
        for clause in self.clauses:
            rows = np.array(type_mask(frame, clause.types), dtype=bool, copy=True)
            for cond in clause.conditions:
                if not rows.any():
                    break
                rows &= condition_mask(frame, cond)
            keep |= rows
        return keep


class _Decoded:
    """The rows a clause still holds for (``at``) and the values decoded for them, narrowed together."""

    def __init__(self, values: RowValues, at: np.ndarray) -> None:
        self.values, self.at = values, at
        self.known: dict[str, pa.Array] = {}

    def get(self, attr: str) -> pa.Array:
        if attr not in self.known:
            found = self.values.of(attr, self.at)
            assert found is not None  # (asked only for attributes served)
            self.known[attr] = found
        return self.known[attr]

    def narrow(self, hit: NDArray[np.bool_]) -> None:
        if not hit.all():
            self.at = self.at[hit]
            chosen = pa.array(hit)
            self.known = {a: v.filter(chosen) for a, v in self.known.items()}


def _attrs(cond: Condition) -> list[str]:
    return [o.attr for o in (cond.left, cond.right) if isinstance(o, Field)]


@dataclass(frozen=True)
class _Bound:
    """``attr <op> literal`` (``=``, ``<``, ``<=``, ``>``, ``>=``; the attribute on the left) as a value
    index looks it up: the literal as a number for a numeric column, as a string for a string column's
    equality (None where it is not one)."""

    attr: str
    op: str
    number: float | None
    text: str | None


def _bound(cond: Condition) -> _Bound | None:
    """``cond`` as a :class:`_Bound`, or None where no value index can tell which rows may meet it."""
    left, op, right = cond.left, cond.op, cond.right
    if isinstance(left, Literal) and isinstance(right, Field):
        left, op, right = right, FLIPPED[op], left
    if not isinstance(left, Field) or not isinstance(right, Literal) or op not in ("=", "<", "<=", ">", ">="):
        return None
    value, number = right.value, None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = None
        if number is not None and math.isnan(number):
            number = None
    text = value if isinstance(value, str) and op == "=" else None
    return _Bound(left.attr, op, number, text) if number is not None or text is not None else None


def _bucket_range(column: AttrColumn, bounds: list[_Bound]) -> tuple[int, int] | None:
    """The value buckets of ``column``'s index (it has one) holding every row that may meet all of ``bounds``
    (conditions on its attribute), inclusive (empty: lo > hi); None where none of them can be told by it (a
    number on a numeric column, a string's equality on a string one)."""
    index = column.index
    assert index is not None
    lo, hi = 0, index.width - 2
    told = False
    numeric = column.kind in ("int64", "double")
    for b in bounds:
        if numeric and b.number is not None:
            x = b.number
        elif column.kind == "string" and b.text is not None:
            at = column.code_of.get(b.text)
            if at is None:
                return 1, 0  # no row of the part has the value
            x = float(at)
        else:
            continue
        told = True
        k = index.bucket(x)
        if b.op in ("=", "<", "<="):
            hi = min(hi, k)
        if b.op in ("=", ">", ">="):
            lo = max(lo, k)
    return (lo, hi) if told else None


#: A clause's rows from the value indexes are those in the buckets of at most this many of its attributes
#: (the narrowest first): each further one costs a look-up of the rows' values.
_INTERSECTED = 3
#: The rows found are put in order by a sort when they are fewer than 1/this of the ranges' span, else by
#: marking them in a bitmap of it.
_SORTED_BELOW = 16
#: Ranges holding under 1/this of a part's rows (a read around anchors): a clause's rows from the index are
#: cut to them before the next attributes' buckets are looked up.
_NARROW_RANGES = 4


class ValueProbe:
    """The rows of a part a read's filter may keep, from the part's value indexes
    (:class:`~exact.store.value_index.ValueIndex`): made once per read, asked once per part
    (:meth:`candidates`).  Each clause's conditions of the form ``v.a <op> literal`` are grouped by
    attribute here, once, so that a part costs a few look-ups per condition and a few array operations per
    clause."""

    def __init__(self, keep: RowFilter) -> None:
        self.clauses: list[tuple[frozenset[str] | None, dict[str, list[_Bound]]]] = []
        for clause in keep.clauses:
            by_attr: dict[str, list[_Bound]] = {}
            for cond in clause.conditions:
                found = _bound(cond)
                if found is not None:
                    by_attr.setdefault(found.attr, []).append(found)
            self.clauses.append((clause.types, by_attr))

    def estimates(self, f: SeekFile) -> list[float] | None:
        """Per clause, about how many of ``f``'s rows it keeps, by the value indexes: the rows of its types
        times the share of them in the buckets each indexed attribute's conditions admit (as if the
        attributes were independent), or None where the file has no rows by type.  Counts only, no row is
        looked at: a planner's estimate."""
        type_start = f.type_start
        if f.by_type is None or type_start is None:
            return None
        out = []
        for types, by_attr in self.clauses:
            codes = range(len(f.types)) if types is None else type_codes(f.types, types)
            of_types = sum(int(type_start[c + 1]) - int(type_start[c]) for c in codes)
            share = 1.0
            for attr, bounds in by_attr.items():
                column = f.attrs.get(attr)
                found = None if column is None or column.index is None else _bucket_range(column, bounds)
                if found is not None and of_types:
                    assert column is not None and column.index is not None
                    lo, hi = found
                    spans = [column.index.span(c, lo, hi) for c in codes] if lo <= hi else []
                    share *= sum(b - a for a, b in spans) / of_types
            out.append(of_types * share)
        return out

    def candidates(self, f: SeekFile, ranges: np.ndarray) -> np.ndarray | None:
        """The rows of ``f`` inside ``ranges`` (an (n, 2) array of inclusive row ranges, sorted, disjoint)
        that some clause may keep, sorted: per clause, the rows of its types in the value buckets its
        narrowest indexed attribute's conditions admit together that the buckets of its next narrowest
        attributes (up to :data:`_INTERSECTED` in all) hold too, or all rows of its types when none is
        indexed.  A superset of the rows the clause keeps, which :meth:`RowFilter.mask` then tests.  None
        where the file has no rows by type, no index narrows a clause, or the index would hand on more rows
        than the ranges hold."""
        type_start = f.type_start
        if f.by_type is None or type_start is None or not len(ranges):
            return None
        in_ranges = int((ranges[:, 1] - ranges[:, 0]).sum()) + len(ranges)
        narrow = in_ranges * _NARROW_RANGES < f.rows
        pieces: list[np.ndarray] = []
        total = 0
        narrowed = False
        for types, by_attr in self.clauses:
            codes = range(len(f.types)) if types is None else type_codes(f.types, types)
            of_types = sum(int(type_start[c + 1]) - int(type_start[c]) for c in codes)
            options: list[tuple[int, list[tuple[int, int]], AttrColumn, int, int]] = []
            for attr, bounds in by_attr.items():
                column = f.attrs.get(attr)
                if column is None or column.index is None:
                    continue
                found = _bucket_range(column, bounds)
                if found is None:
                    continue
                lo, hi = found
                spans = [column.index.span(c, lo, hi) for c in codes] if lo <= hi else []
                count = sum(b - a for a, b in spans)
                if count < of_types or not spans:
                    options.append((count, spans, column, lo, hi))
            if not options:  # no index narrows this clause: all rows of its types
                total += of_types
                if total > in_ranges:
                    return None
                pieces.extend(f.by_type[int(type_start[c]):int(type_start[c + 1])] for c in codes)
                continue
            narrowed = True
            # the narrowest condition's rows, then only those the next narrowest ones' buckets hold too (a
            # row the clause keeps meets every condition, so it lies in each one's buckets)
            options.sort(key=lambda o: o[0])
            _, spans, column, _, _ = options[0]
            assert column.index is not None
            index = column.index
            rows = joined([index.rows_in(a, b) for a, b in spans if b > a] or [index.rows_in(0, 0)])
            if narrow and len(rows):  # (ranges over a small share of the part: cut to them before testing)
                k = np.searchsorted(ranges[:, 0], rows, "right") - 1
                rows = rows[(k >= 0) & (rows <= ranges[np.maximum(k, 0), 1])]
            for _, _, other, lo, hi in options[1:_INTERSECTED]:
                if not len(rows):
                    break
                rows = rows[other.in_buckets(rows, lo, hi)]
            total += len(rows)
            if total > in_ranges:
                return None
            pieces.append(rows)
        if not narrowed:
            return None  # (no index narrows: the rows of the types, as a read without one finds them)
        return _in_ranges(pieces, total, ranges)


def _in_ranges(pieces: list[np.ndarray], total: int, ranges: np.ndarray) -> np.ndarray:
    """The rows of ``pieces`` (``total`` in all) inside ``ranges``, each once and in order (int64): marked in
    a bitmap of the ranges' span when they fill much of it, else sorted (a bitmap is cleared and read back
    whole)."""
    first, last = int(ranges[0, 0]), int(ranges[-1, 1])
    found: np.ndarray
    if total * _SORTED_BELOW < last - first + 1:
        found = np.sort(joined(pieces) if pieces else np.zeros(0, np.int64)).astype(np.int64)
        keep = (found >= first) & (found <= last)
        if len(pieces) > 1:  # (the rows of one piece are distinct; np.unique hashes first: slower here)
            keep[1:] &= found[1:] != found[:-1]
        found = found[keep]
    else:
        marked = np.zeros(last - first + 1, dtype=bool)
        for piece in pieces:
            piece = piece[(piece >= first) & (piece <= last)]
            marked[piece.astype(np.int64) - first] = True
        found = np.flatnonzero(marked) + first
    if len(ranges) == 1:
        return found
    k = np.searchsorted(ranges[:, 0], found, "right") - 1
    inside = (k >= 0) & (found <= ranges[np.maximum(k, 0), 1])
    out: np.ndarray = found[inside]
    return out


def index_candidates(keep: RowFilter, f: SeekFile, ranges: np.ndarray) -> np.ndarray | None:
    """:meth:`ValueProbe.candidates` of ``keep`` for one part."""
    return ValueProbe(keep).candidates(f, ranges)


def _on_attributes(cond: Condition) -> bool:
    """Does ``cond`` compare an attribute (not ``seq``, ``ts`` or ``type``) with a literal or another
    attribute?  (``v.x = v.x``, the "x is present" of ``PARTITION BY``, is left to the engine: a partitioned
    read knows the key by its layout's group numbers, without its values.)"""
    operands = (cond.left, cond.right)
    fields = [o for o in operands if isinstance(o, Field)]
    return (all(isinstance(o, (Field, Literal)) for o in operands) and bool(fields)
            and all(not o.builtin and not o.prev for o in fields)
            and not (len(fields) == 2 and fields[0].attr == fields[1].attr))


def filter_tests(cond: Condition) -> bool:
    """Would a row filter test ``cond``: is it a variable's own condition (a property) on attributes?"""
    return len(cond.variables()) == 1 and _on_attributes(cond)


def row_filter(plan: Plan, *, positional: bool = False) -> RowFilter | None:
    """The filter of ``plan``'s query (None: it would keep every row its types keep — no variable has a
    property on attributes — or the strategy is a contiguity one the read cannot serve).

    Under ``strict_contiguity`` a left-out row breaks every run that reaches it, as the row itself would:
    a read whose seqs are stream positions (``positional``, a frame marked ``sparse``) shows the engine
    where rows were left out; under ``partition_contiguity`` with ``PARTITION BY`` the reader must also tell
    each row its next event in its partition (``EventFrame.partition_next``).  A read that cannot (its seqs
    are not positions, or it reads a partition layout's groups) is not filtered."""
    if not filterable(plan.query, positional):
        return None
    clauses = tuple(Clause(v.types, tuple(c for c in v.properties if _on_attributes(c)))
                    for v in plan.positives + plan.negatives)
    if not any(c.conditions for c in clauses):
        return None
    return RowFilter(clauses)


def filterable(query: Query, positional: bool) -> bool:
    """May a read for ``query`` leave out rows no variable can bind (see :func:`row_filter`)?"""
    if query.strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY):
        return positional
    return True


def widened(values: pa.Array, typ: pa.DataType | None) -> pa.Array:
    """A part's values of an attribute as a read gives them: in the snapshot's type ``typ``."""
    return values if typ is None or values.type == typ else cast_attr(values, typ)


class RowValues:
    """Attributes' values of a read's rows, as :meth:`RowFilter.mask` asks for them."""

    def served(self, attr: str) -> bool:
        """Can ``attr`` be told here (else its conditions are not tested: the row is kept)?"""
        raise NotImplementedError

    def of(self, attr: str, positions: np.ndarray) -> pa.Array | None:
        """The values of ``attr`` at ``positions`` (of the rows), in the snapshot's type."""
        raise NotImplementedError


class SeekValues(RowValues):
    """``rows`` of a seek file with attribute columns ``attrs`` (:class:`~exact.store.seek_attrs.AttrColumn`)
    whose file leaves ``unserved`` unserved: values widened to the snapshot's ``types``, all null for an
    attribute the part does not have."""

    def __init__(self, attrs: Mapping[str, AttrColumn], unserved: frozenset[str] | None, rows: np.ndarray,
                 types: Mapping[str, pa.DataType]) -> None:
        self.attrs, self.unserved, self.rows, self.types = attrs, unserved, rows, types

    def served(self, attr: str) -> bool:
        return attr in self.attrs or (self.unserved is not None and attr not in self.unserved)

    def of(self, attr: str, positions: np.ndarray) -> pa.Array | None:
        if not self.served(attr):
            return None
        column = self.attrs.get(attr)
        if column is None:
            return pa.nulls(len(positions), self.types.get(attr, pa.null()))
        return widened(column.values(self.rows[positions]), self.types.get(attr))


class JoinedValues(RowValues):
    """The values of several seek files' rows, one file's after the other's (``starts``: where each begins)."""

    def __init__(self, parts: list[SeekValues], starts: np.ndarray) -> None:
        self.parts, self.starts = parts, starts

    def served(self, attr: str) -> bool:
        # (a file that does not serve it: the condition is left to the engine for every row, which keeps more)
        return all(p.served(attr) for p in self.parts)

    def of(self, attr: str, positions: np.ndarray) -> pa.Array | None:
        cuts = np.searchsorted(positions, self.starts).tolist()  # positions increase
        typ = self.parts[0].types.get(attr) if self.parts else None
        if typ is not None and len(self.parts) > 1:
            # a numeric attribute every part holds in the snapshot's kind: decoded over the parts at once
            at = [(p.attrs.get(attr), p.rows[positions[cuts[i]:cuts[i + 1]] - self.starts[i]])
                  for i, p in enumerate(self.parts) if cuts[i] < cuts[i + 1]]
            whole = numeric_values(at, typ)
            if whole is not None:
                return whole
        arrays = []
        for i, part in enumerate(self.parts):
            if cuts[i] < cuts[i + 1]:
                found = part.of(attr, positions[cuts[i]:cuts[i + 1]] - self.starts[i])
                if found is None:
                    return None
                arrays.append(found)
        if not arrays:
            return self.parts[0].of(attr, positions[:0])
        return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
