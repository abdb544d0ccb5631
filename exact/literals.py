"""Comparisons with a number the other side cannot hold exactly, rewritten as tests on numbers it holds.

Arrow compares an int64 column with a double by making doubles of the integers (refused past 2**53), and a
double column with an integer past 2**53 likewise; Python compares an int with a float exactly, and so does
the brute-force reference.  These rewrite such a comparison as one Arrow makes exactly — or as "every present
value" / "none" — so the engine's answer is the definition's (:func:`exact.prefilter.condition_mask`).
"""

from __future__ import annotations

import math
from typing import Any


def integer_against(op: str, value: float) -> tuple[str, Any]:
    """``x <op> value`` for integers ``x`` and a double ``value``, as a test against an int64 (or, as in
    :func:`exact_against`, every present value or none)."""
    if math.isnan(value):
        return ("valid" if op == "!=" else "none"), None
    if math.isinf(value):
        return exact_against(op, 1 << 64 if value > 0 else -(1 << 64), False)
    low, high = math.floor(value), math.ceil(value)
    if low != high:  # between two integers: equal to none
        if op in ("=", "!="):
            return ("none" if op == "=" else "valid"), None
        op, target = ("<=", low) if op in ("<", "<=") else (">=", high)
    else:
        target = low
    if not -(1 << 63) <= target < 1 << 63:
        return exact_against(op, target, False)
    return op, target


def exact_against(op: str, value: int, floating: bool) -> tuple[str, Any]:
    """``x <op> value`` for an integer ``value`` beyond what the column's numbers hold exactly, as a test
    against a number they hold: the nearest double (the comparison shifted by which side of ``value`` it
    lies on) — or, for an integer column and a value past int64, ``("valid", None)`` / ``("none", None)``:
    every present value, or none, meets it."""
    if not floating:
        above = value > 0  # every int64 lies below the value (or above it, when negative)
        every = op == "!=" or (op in ("<", "<=") if above else op in (">", ">="))
        return ("valid" if every else "none"), None
    try:
        near = float(value)
    except OverflowError:
        near = math.inf if value > 0 else -math.inf
    if near == value:
        return op, near
    high = near > value  # no double lies strictly between ``value`` and ``near``
    if op == "=":
        return "none", None
    if op == "!=":
        return "valid", None  # (NaN included: it equals nothing)
    if op in ("<", "<="):
        return ("<" if high else "<="), near
    return (">=" if high else ">"), near
