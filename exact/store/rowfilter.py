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
import pyarrow.compute as pc
from numpy.typing import NDArray

from exact.arrays import joined
from exact.events import cast_attr
from exact.prefilter import EventFrame, condition_mask, type_mask, values_condition_mask
from exact.query.ast import Condition, Field, Literal, Query, Strategy
from exact.query.normalize import FLIPPED, Plan
from exact.store.seek import SeekFile
from exact.store.seek_attrs import AttrColumn, ValueIndex, numeric_values


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


def _bucket_range(f: SeekFile, cond: Condition) -> tuple[str, ValueIndex, int, int] | None:
    """The value buckets of ``f``'s index on ``cond``'s attribute holding every row that may meet ``cond``
    (``v.a <op> literal`` with ``=``, ``<``, ``<=``, ``>``, ``>=``; a number on a numeric column, a string's
    equality on a string one), inclusive (empty: lo > hi), with the attribute; None where the index cannot
    tell."""
    left, op, right = cond.left, cond.op, cond.right
    if isinstance(left, Literal) and isinstance(right, Field):
        left, op, right = right, FLIPPED[op], left
    if not isinstance(left, Field) or not isinstance(right, Literal) or op not in ("=", "<", "<=", ">", ">="):
        return None
    column = f.attrs.get(left.attr)
    if column is None or column.index is None:
        return None
    index, value = column.index, right.value
    if column.kind in ("int64", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        try:
            x = float(value)
        except OverflowError:
            return None
        if math.isnan(x):
            return None
    elif column.kind == "string" and op == "=" and isinstance(value, str) and column.dictionary is not None:
        at = pc.index(column.dictionary, pa.scalar(value, pa.string())).as_py()
        if at < 0:
            return left.attr, index, 1, 0  # no row of the part has the value
        x = float(at)
    else:
        return None
    b, last = index.bucket(x), index.width - 2
    lo, hi = (b, b) if op == "=" else (0, b) if op in ("<", "<=") else (b, last)
    return left.attr, index, lo, hi


#: A clause's rows from the value indexes are those in the buckets of at most this many of its attributes
#: (the narrowest first): each further one costs a look-up of the rows' values.
_INTERSECTED = 3
#: The rows found are put in order by a sort when they are fewer than 1/this of the ranges' span, else by
#: marking them in a bitmap of it.
_SORTED_BELOW = 16


def buckets_of(column: AttrColumn, rows: np.ndarray) -> np.ndarray:
    """The value-index bucket of each of ``rows`` (positions in the part) for ``column`` (one with an index):
    the number of edges not above its value, the null bucket for null and NaN (as the index was built: a
    string's value is its code, which orders as the values do)."""
    index = column.index
    assert index is not None and column.codes is not None
    codes = column.codes[rows]
    values = codes.astype(np.float64)
    if column.kind == "int64":
        values += float(column.base)
    null = np.isnan(values)
    if column.null is not None:
        null |= codes == column.null
    if column.valid is not None:
        null |= column.valid[rows] == 0
    out: np.ndarray = np.searchsorted(index.edges, values, "right")
    out[null] = index.width - 1
    return out


def index_candidates(keep: RowFilter, f: SeekFile, ranges: np.ndarray) -> np.ndarray | None:
    """The rows of ``f`` inside ``ranges`` (an (n, 2) array of inclusive row ranges, sorted, disjoint) that
    some clause of ``keep`` may keep, sorted: per clause, the rows of its types in the value buckets its
    narrowest indexed attribute's conditions admit together (:class:`~exact.store.seek_attrs.ValueIndex`)
    that the buckets of its next narrowest attributes (up to :data:`_INTERSECTED` in all) hold too, or all
    rows of its types when none is indexed.  A superset of the rows the clause keeps, which
    :meth:`RowFilter.mask` then tests.  None where the file has no rows by type, no index narrows a clause, or
    the index would hand on more rows than the ranges hold."""
    if f.by_type is None or f.type_start is None or not len(ranges):
        return None
    in_ranges = int((ranges[:, 1] - ranges[:, 0]).sum()) + len(ranges)
    pieces: list[np.ndarray] = []
    total = 0
    narrowed = False
    for clause in keep.clauses:
        codes = (range(len(f.types)) if clause.types is None
                 else [i for i, t in enumerate(f.types) if t in clause.types])
        of_types = sum(int(f.type_start[c + 1] - f.type_start[c]) for c in codes)
        # per attribute, the buckets all its conditions admit (``a >= 5 AND a <= 9``: one range)
        ranges_of: dict[str, tuple[ValueIndex, int, int]] = {}
        for cond in clause.conditions:
            found = _bucket_range(f, cond)
            if found is None:
                continue
            attr, index, lo, hi = found
            if attr in ranges_of:
                _, lo0, hi0 = ranges_of[attr]
                lo, hi = max(lo, lo0), min(hi, hi0)
            ranges_of[attr] = (index, lo, hi)
        options: list[tuple[int, list[tuple[np.ndarray, int, int]], str, int, int]] = []
        for attr, (index, lo, hi) in ranges_of.items():
            spans = [(index.rows, *index.span(c, lo, hi)) for c in codes] if lo <= hi else []
            count = sum(b - a for _, a, b in spans)
            if count < of_types or not spans:
                options.append((count, spans, attr, lo, hi))
        if not options:  # no index narrows this clause: all rows of its types
            total += of_types
            if total > in_ranges:
                return None
            pieces.extend(f.by_type[int(f.type_start[c]):int(f.type_start[c + 1])] for c in codes)
            continue
        narrowed = True
        # the narrowest condition's rows, then only those the next narrowest ones' buckets hold too (a row
        # the clause keeps meets every condition, so it lies in each one's buckets)
        options.sort(key=lambda o: o[0])
        rows = joined([r[a:b] for r, a, b in options[0][1]] or [np.zeros(0, np.int64)]).astype(np.int64)
        for _, _, attr, lo, hi in options[1:_INTERSECTED]:
            if not len(rows):
                break
            # the rows (of the clause's types) in those buckets: their own values' buckets, looked up
            bucket = buckets_of(f.attrs[attr], rows)
            rows = rows[(bucket >= lo) & (bucket <= hi)]
        total += len(rows)
        if total > in_ranges:
            return None
        pieces.append(rows)
    if not narrowed:
        return None  # (no index narrows: the rows of the types, as a read without one finds them)
    # the rows, each once and in order: marked in a bitmap of the ranges' span when they fill much of it,
    # else sorted (a bitmap is cleared and read back whole)
    first, last = int(ranges[0, 0]), int(ranges[-1, 1])
    found_rows: np.ndarray
    if total * _SORTED_BELOW < last - first + 1:
        found_rows = np.sort(joined([p.astype(np.int64) for p in pieces] or [np.zeros(0, np.int64)]))
        once = np.ones(len(found_rows), dtype=bool)  # (np.unique hashes first: several times slower here)
        once[1:] = found_rows[1:] != found_rows[:-1]
        found_rows = found_rows[once & (found_rows >= first) & (found_rows <= last)]
    else:
        marked = np.zeros(last - first + 1, dtype=bool)
        for piece in pieces:
            piece = piece[(piece >= first) & (piece <= last)]
            marked[piece.astype(np.int64) - first] = True
        found_rows = np.flatnonzero(marked) + first
    k = np.searchsorted(ranges[:, 0], found_rows, "right") - 1
    inside = (k >= 0) & (found_rows <= ranges[np.maximum(k, 0), 1])
    out: np.ndarray = found_rows[inside]
    return out


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
