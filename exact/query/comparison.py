"""Comparison by the project's rule, the one every part of the engine and the reference uses (scalar here,
vectorised in :mod:`exact.prefilter`; docs/semantics.md, "Comparison rules").

A condition with a null or missing operand is false; values of different kinds (number, string, boolean) are
never equal, so ``=`` is false, ``!=`` true and orderings false.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

OP_FUNCS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

#: The operator with its operands swapped (``a < b`` ⇔ ``b > a``).
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def value_kind(value: Any) -> str | None:
    """The comparison kind of a scalar: ``"b"`` boolean, ``"n"`` number, ``"s"`` string, None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int | float):
        return "n"
    if isinstance(value, str):
        return "s"
    return "o"


def compare(left: Any, op: str, right: Any) -> bool:
    """Evaluate ``left op right`` with the project's semantics: null → false; mixed kinds never equal."""
    if left is None or right is None:
        return False
    kl, kr = value_kind(left), value_kind(right)
    if kl != kr:
        return op == "!="
    try:
        return bool(OP_FUNCS[op](left, right))
    except TypeError:
        return op == "!="


_NUMBERS = (int, float)


def comparator(op: str) -> Callable[[Any, Any], bool]:
    """``compare`` specialised to one operator (the hot loops call this once per pair of events)."""
    fn = OP_FUNCS[op]
    mixed = op == "!="

    def cmp(left: Any, right: Any) -> bool:
        if left is None or right is None:
            return False
        tl, tr = type(left), type(right)
        if tl is tr or (tl in _NUMBERS and tr in _NUMBERS):
            try:
                return bool(fn(left, right))
            except TypeError:
                return mixed
        return compare(left, op, right)  # mixed kinds, or subclasses: the general rule

    return cmp


COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {op: comparator(op) for op in OP_FUNCS}
