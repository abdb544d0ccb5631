"""The vectorised prefilter (Cadonna 2013, Thm. 5.1), over an :class:`~exact.frame.EventFrame`.

:func:`property_mask` evaluates the
properties ``Θ^p_v`` of one variable over the whole frame with ``pyarrow.compute``; by Theorem 5.1 every
event of a match satisfies the properties of the variable it is bound to, so events that satisfy no
variable's properties never enter the Python loops of the strategies (the *filtered match windows* of
Cadonna ch. 5.1).

Semantics of a property over a column (the same as :func:`exact.query.normalize.compare` on scalars): a null or
missing attribute makes it false; a literal of a different kind than the column (number, string, boolean)
is never equal (``=`` false, ``!=`` true for present values, orderings false).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from exact.frame import EventFrame
from exact.literals import exact_against, integer_against
from exact.query.ast import Condition, Field, Literal
from exact.query.normalize import FLIPPED, Plan, VarPlan, value_kind

_PC_OPS = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
           ">=": "greater_equal"}


def _column_kind(typ: pa.DataType) -> str | None:
    if pa.types.is_boolean(typ):
        return "b"
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return "n"
    if pa.types.is_timestamp(typ):
        return "n"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "s"
    return None  # null type / unsupported: behaves as all-null


def _mask(arr: pa.Array | pa.ChunkedArray) -> NDArray[np.bool_]:
    """A boolean Arrow array without nulls as a NumPy mask."""
    mask: NDArray[np.bool_] = arr.to_numpy(zero_copy_only=False)
    return mask


def _literal_mask(arr: pa.Array, op: str, value: object) -> NDArray[np.bool_]:
    n = len(arr)
    col_kind = _column_kind(arr.type)
    lit_kind = value_kind(value)
    if col_kind is None or lit_kind is None:
        return np.zeros(n, dtype=bool)
    valid = pc.is_valid(arr)
    if col_kind != lit_kind:
        if op == "!=":
            return _mask(valid)
        return np.zeros(n, dtype=bool)
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.int64())
    if col_kind == "n" and isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1 << 53:
        # an integer a double cannot hold (nor, past int64, an integer column): compared exactly
        if pa.types.is_floating(arr.type) or not -(1 << 63) <= value < 1 << 63:
            op, value = exact_against(op, value, pa.types.is_floating(arr.type))
            if value is None:
                return _mask(valid) if op == "valid" else np.zeros(n, dtype=bool)
    elif col_kind == "n" and isinstance(value, float) and pa.types.is_integer(arr.type):
        # a double against integers: as an integer test (Arrow would make doubles of integers past 2**53)
        op, value = integer_against(op, value)
        if value is None:
            return _mask(valid) if op == "valid" else np.zeros(n, dtype=bool)
    scalar = pa.scalar(value, type=arr.type) if col_kind != "n" else pa.scalar(value)
    res = getattr(pc, _PC_OPS[op])(arr, scalar)
    return _mask(pc.fill_null(res, False))


def _field_field_mask(a: pa.Array, op: str, b: pa.Array) -> NDArray[np.bool_]:
    n = len(a)
    ka, kb = _column_kind(a.type), _column_kind(b.type)
    if ka is None or kb is None:
        return np.zeros(n, dtype=bool)
    both = pc.and_(pc.is_valid(a), pc.is_valid(b))
    if ka != kb:
        if op == "!=":
            return _mask(both)
        return np.zeros(n, dtype=bool)
    if pa.types.is_timestamp(a.type):
        a = a.cast(pa.int64())
    if pa.types.is_timestamp(b.type):
        b = b.cast(pa.int64())
    res = getattr(pc, _PC_OPS[op])(a, b)
    return _mask(pc.fill_null(res, False))


def condition_mask(frame: EventFrame, cond: Condition) -> NDArray[np.bool_]:
    """Evaluate a one-variable, non-prev condition over every event of ``frame``."""
    left, op, right = _oriented(cond)
    if isinstance(right, Field) and right.attr == left.attr and left.attr in frame.keys:
        # ``v.x = v.x`` on an attribute the frame knows by codes: present where it has a code
        if op in ("=", "<=", ">="):
            return frame.keys[left.attr] >= 0
        return np.zeros(len(frame), dtype=bool)
    # the same comparison is asked again by each variable of a type and by an explain's relaxed queries:
    # kept per frame, within a bound (by the literal's type too: 1, 1.0 and True are one dict key)
    key = (left.attr, op, right.attr if isinstance(right, Field) else (type(right.value), right.value),
           isinstance(right, Field))
    found = frame._masks.get(key)
    if found is None:
        found = values_condition_mask(frame.array, len(frame), cond)
        if (len(frame._masks) + 1) * len(frame) <= _MASK_BYTES:
            frame._masks[key] = found
    return found.copy()


#: Bytes of condition masks a frame keeps.
_MASK_BYTES = 64 << 20


def _oriented(cond: Condition) -> tuple[Field, str, Field | Literal]:
    left, op, right = cond.left, cond.op, cond.right
    if isinstance(left, Literal) and isinstance(right, Field):
        left, op, right = right, FLIPPED[op], left
    assert isinstance(left, Field) and isinstance(right, (Field, Literal))
    return left, op, right


def values_condition_mask(array: Callable[[str], pa.Array], n: int, cond: Condition) -> NDArray[np.bool_]:
    """A one-variable, non-prev condition over ``n`` events whose values of an attribute ``array`` gives."""
    left, op, right = _oriented(cond)
    if isinstance(right, Literal):
        return _literal_mask(array(left.attr), op, right.value)
    # (a property has no run operands: v[1], v[last], aggregates)
    arr = array(left.attr)
    if right.attr == left.attr and not pa.types.is_floating(arr.type) and _column_kind(arr.type):
        # ``v.x = v.x`` (PARTITION BY's "x is present"): a value equals itself unless it is null (or NaN,
        # hence not for floating columns)
        if op in ("=", "<=", ">="):
            return _mask(pc.is_valid(arr))
        return np.zeros(n, dtype=bool)
    return _field_field_mask(arr, op, array(right.attr))


def type_mask(frame: EventFrame, types: frozenset[str] | None) -> NDArray[np.bool_]:
    """Per event: is its type one of ``types`` (None = any)?  Types are tested on the frame's distinct
    types, then looked up per event by code, so a query's variables cost one pass over the stream each
    instead of one string comparison per event."""
    if types is None:
        return np.ones(len(frame), dtype=bool)
    if not types:
        return np.zeros(len(frame), dtype=bool)
    mask: NDArray[np.bool_] = _type_lut(frame, types)[frame.type_codes()[0]]
    return mask


def _type_lut(frame: EventFrame, types: frozenset[str]) -> NDArray[np.bool_]:
    """Per distinct type of ``frame``: is it one of ``types``?"""
    names = frame.type_names()
    if names is None:
        return _distinct_in(frame.type_codes()[1], types)
    return np.array([name in types for name in names], dtype=bool)


def _distinct_in(distinct: pa.Array, types: frozenset[str]) -> NDArray[np.bool_]:
    """Per distinct type of a frame: is it one of ``types``?"""
    lut = pc.fill_null(pc.is_in(distinct, value_set=pa.array(sorted(types), pa.string())), False)
    return _mask(lut)


def _with_properties(frame: EventFrame, mask: NDArray[np.bool_], var: VarPlan) -> NDArray[np.bool_]:
    """``mask`` (the events of ``var``'s types; changed in place) narrowed by its properties."""
    for cond in var.properties:
        if not mask.any():
            break
        mask &= condition_mask(frame, cond)
    return mask


def property_mask(frame: EventFrame, var: VarPlan) -> NDArray[np.bool_]:
    """Θ^p_v over the frame: the events ``var`` can bind on their own (type and properties)."""
    return _with_properties(frame, np.array(type_mask(frame, var.types), dtype=bool, copy=True), var)


def variable_bits(frame: EventFrame, variables: Iterable[VarPlan], *, counts: bool = True
                  ) -> tuple[np.ndarray, list[int] | None]:
    """Per event, the bits (``1 << v.index``) of the ``variables`` whose Θ^p_v it satisfies, and (with
    ``counts``) per variable the number of such events: :func:`property_mask` of each, combined.

    Types are resolved per distinct type into one bit pattern, so the stream is passed once for all
    variables' types (a long pattern cost one pass per variable before); only variables with properties
    pass it again, for their conditions, once for all the variables of the same types and properties.  The
    bits come in the narrowest unsigned integer type that holds them (a smaller array to gather into and
    scan)."""
    variables = list(variables)
    n = len(frame)
    width = max((v.index for v in variables), default=0)
    dtype = next(t for t, bits in ((np.uint8, 8), (np.uint16, 16), (np.uint32, 32), (np.uint64, 64))
                 if width < bits)
    if not variables or n == 0:
        return np.zeros(n, dtype=dtype), ([0] * len(variables) if counts else None)
    codes, distinct = frame.type_codes()
    by_type = _type_bits(frame, variables, dtype)
    bits = by_type[codes]
    per_type = np.bincount(codes, minlength=len(distinct)) if counts else None
    found: dict[int, int] = {}
    # variables of the same types and properties (unnamed: a partition's ``v.key = v.key`` is one of each)
    # bind the same events: their properties are tested once, and their bits cleared together
    alike: dict[tuple[frozenset[str] | None, frozenset[Condition]], list[VarPlan]] = {}
    for v in variables:
        if v.properties:
            alike.setdefault((v.types, frozenset(c.unnamed() for c in v.properties)), []).append(v)
        elif per_type is not None:
            found[v.index] = int(per_type[(by_type & (dtype(1) << dtype(v.index))) != 0].sum())
    for group in alike.values():
        together: np.unsignedinteger[Any] = dtype(0)
        for v in group:
            together |= dtype(1) << dtype(v.index)
        mask = _with_properties(frame, (bits & (dtype(1) << dtype(group[0].index))) != 0, group[0])
        bits &= ~((~mask).astype(bits.dtype) * together)  # branch-free: an indexed update is thirty times slower
        if counts:
            held = int(mask.sum())
            found.update((v.index, held) for v in group)
    out = [found[v.index] for v in variables] if counts else []
    return bits, (out if counts else None)


def _type_bits(frame: EventFrame, variables: list[VarPlan], dtype: type[np.unsignedinteger[Any]]) -> np.ndarray:
    """Per distinct type of ``frame``, the bits of the ``variables`` whose types include it."""
    names = frame.type_names()
    if names is None:
        by_type = np.zeros(len(frame.type_codes()[1]), dtype=dtype)
        for v in variables:
            bit = dtype(1) << dtype(v.index)
            if v.types is None:
                by_type |= bit
            elif v.types:
                by_type[_distinct_in(frame.type_codes()[1], v.types)] |= bit
        return by_type
    # few distinct types: each type's bits in Python, one array made of them
    anything = 0
    of_type: dict[str | None, int] = {}
    for v in variables:
        if v.types is None:
            anything |= 1 << v.index
        else:
            for t in v.types:
                of_type[t] = of_type.get(t, 0) | 1 << v.index
    return np.array([anything | of_type.get(name, 0) for name in names], dtype=dtype)


def variable_masks(plan: Plan, events: pa.Table | Iterable[pa.RecordBatch] | EventFrame
                   ) -> dict[str, NDArray[np.bool_]]:
    """Per variable (positive and negated) of ``plan``: which events of ``events`` satisfy its type and
    properties — the filter of Thm. 5.1, vectorised; a superset of the events it can bind."""
    frame = events if isinstance(events, EventFrame) else EventFrame.build(events)
    return {v.name: property_mask(frame, v) for v in plan.positives + plan.negatives}
