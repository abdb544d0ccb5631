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

The contiguity strategies are defined on every event: a read for them takes no filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from exact.events import cast_attr
from exact.prefilter import EventFrame, condition_mask, type_mask, values_condition_mask
from exact.query.ast import Condition, Field, Literal, Strategy
from exact.query.normalize import Plan
from exact.store.seek_attrs import AttrColumn


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

    def mask(self, n: int, type_test: Callable[[frozenset[str]], NDArray[np.bool_]],
             array: Callable[[str], pa.Array | None]) -> NDArray[np.bool_]:
        """Per row of ``n``: does some clause hold?  ``type_test(types)`` says which rows are of ``types``;
        ``array(attr)`` gives an attribute's values (None: they cannot be told here, the condition holds)."""
        keep = np.zeros(n, dtype=bool)
        for clause in self.clauses:
            rows = np.ones(n, dtype=bool) if clause.types is None else np.array(type_test(clause.types))
            for cond in clause.conditions:
                if not rows.any():
                    break
                if any(array(a) is None for a in _attrs(cond)):
                    continue
                rows &= values_condition_mask(lambda a: _given(array, a), n, cond)
            keep |= rows
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


def _attrs(cond: Condition) -> list[str]:
    return [o.attr for o in (cond.left, cond.right) if isinstance(o, Field)]


def _given(array: Callable[[str], pa.Array | None], attr: str) -> pa.Array:
    out = array(attr)
    assert out is not None
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


def row_filter(plan: Plan) -> RowFilter | None:
    """The filter of ``plan``'s query (None: it would keep every row its types keep — no variable has a
    property on attributes — or the strategy is a contiguity one)."""
    if plan.query.strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY):
        return None
    clauses = tuple(Clause(v.types, tuple(c for c in v.properties if _on_attributes(c)))
                    for v in plan.positives + plan.negatives)
    if not any(c.conditions for c in clauses):
        return None
    return RowFilter(clauses)


def widened(values: pa.Array, typ: pa.DataType | None) -> pa.Array:
    """A part's values of an attribute as a read gives them: in the snapshot's type ``typ``."""
    return values if typ is None or values.type == typ else cast_attr(values, typ)


def seek_arrays(attrs: Mapping[str, AttrColumn], unserved: frozenset[str] | None, rows: np.ndarray,
                types: Mapping[str, pa.DataType]) -> Callable[[str], pa.Array | None]:
    """``array(attr)`` for :meth:`RowFilter.mask` over ``rows`` of a seek file with attribute columns
    ``attrs`` (:class:`~exact.store.seek_attrs.AttrColumn`): values widened to the snapshot's ``types``,
    all null for an attribute the part does not have, None for one its file does not serve."""
    cache: dict[str, pa.Array | None] = {}

    def array(attr: str) -> pa.Array | None:
        if attr not in cache:
            column = attrs.get(attr)
            if column is None:
                served = unserved is not None and attr not in unserved
                cache[attr] = pa.nulls(len(rows), types.get(attr, pa.null())) if served else None
            else:
                cache[attr] = widened(column.values(rows), types.get(attr))
        return cache[attr]

    return array
