"""Values inside the kernels: comparison by the project's rule, growing arrays, exact averages of integers.

Comparison follows :func:`exact.query.normalize.compare`: a null operand is false, values of different kinds
are never equal, integers compare exactly with integers and with floats (as Python compares them).  An
average of integers is the float nearest the exact quotient (:func:`int_avg`), as
:func:`exact.query.operands.aggregate` computes it.

Plain functions: :mod:`exact.engine.kernels.factory` compiles them into the kernels.
"""

from __future__ import annotations

import math

import numpy as np

from exact.engine.kernels.layout import (
    EQ,
    FLIP,
    GT,
    INEXACT,
    K_FLOAT,
    K_INT,
    K_NULL,
    LE,
    LT,
    NE,
    PYTHON,
    SEEN_BOOL,
    SEEN_NUMBER,
    SEEN_STRING,
    TWO53,
    Int,
)


def order(c: int, op: Int) -> bool:
    """The operator ``op`` applied to a three-way comparison ``c`` (-1, 0, 1)."""
    if op == EQ:
        return c == 0
    if op == NE:
        return c != 0
    if op == LT:
        return c < 0
    if op == LE:
        return c <= 0
    if op == GT:
        return c > 0
    return c >= 0


def int_float(i: Int, op: Int, f: float) -> bool:
    """``i op f`` for an integer and a float, exactly (as Python compares them): a NaN is unordered."""
    if f != f:
        return op == NE
    if PYTHON:
        a = int(i)
        b = float(f)
        return order((a > b) - (a < b), op)
    if f >= 9.223372036854775808e18:
        return order(-1, op)
    if f < -9.223372036854775808e18:
        return order(1, op)
    fl = math.floor(f)
    fi = np.int64(fl)
    if i < fi:
        return order(-1, op)
    if i > fi:
        return order(1, op)
    return order(0 if fl == f else -1, op)


def compare(left_kind: Int, left_value: float, left_int: Int, op: Int, right_kind: Int, right_value: float,
            right_int: Int) -> bool:
    """``left op right`` for values given as (kind, float, integer), by the project's rule: null → false;
    different kinds: only ``!=`` holds; numbers compare as numbers (integers exactly); strings by rank."""
    if left_kind == K_NULL or right_kind == K_NULL:
        return False
    if left_kind == K_INT and right_kind == K_INT:
        a = int(left_int)
        b = int(right_int)
        return order((a > b) - (a < b), op)
    if left_kind == K_INT and right_kind == K_FLOAT:
        return int_float(left_int, op, right_value)
    if left_kind == K_FLOAT and right_kind == K_INT:
        return int_float(right_int, FLIP[op], left_value)
    if left_kind != right_kind:
        return op == NE
    if op == EQ:
        return left_value == right_value
    if op == NE:
        return left_value != right_value
    if op == LT:
        return left_value < right_value
    if op == LE:
        return left_value <= right_value
    if op == GT:
        return left_value > right_value
    return left_value >= right_value


def grow(a: np.ndarray, need: int) -> np.ndarray:
    """``a``, or a copy with room for ``need`` rows (1-D or 2-D along the first axis)."""
    if need <= a.shape[0]:
        return a
    size = max(need, 2 * a.shape[0] + 16)
    if a.ndim == 1:
        out = np.empty(size, dtype=a.dtype)
    else:
        out = np.empty((size, a.shape[1]), dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


def mixed(flags: int) -> bool:
    """Has a min/max slot seen values of more than one kind (numbers, strings, booleans)?"""
    seen = flags & (SEEN_NUMBER | SEEN_STRING | SEEN_BOOL)
    return seen != SEEN_NUMBER and seen != SEEN_STRING and seen != SEEN_BOOL


def int_avg(total: int, cnt: int, out: np.ndarray) -> float:
    """``total / cnt`` for integers as Python computes it: the float nearest the exact quotient."""
    if PYTHON:
        return total / cnt
    if -TWO53 <= total <= TWO53:
        return float(total) / float(cnt)  # both exact: one rounding
    if cnt >= 2147483648:
        out[INEXACT] = 1
        return float(total) / float(cnt)
    q = total // cnt
    r = total - q * cnt  # total = q·cnt + r, 0 <= r < cnt
    if r == 0:
        return float(q)
    if q >= TWO53 or q < -TWO53:
        # spacing of floats here >= 2: q + r/cnt rounds as q + 1/2 does (no float or midpoint between)
        return float(2 * q + 1) / 2.0
    # |q| >= 2**22 (|total| > 2**53, cnt < 2**31): floats near q are multiples of 2**-30 and c - q is exact;
    # pick, among the neighbours of an estimate, the float c nearest q + r/cnt by (c - q)·2**30·cnt vs
    # r·2**30 in integers (ties to an even significand)
    y = float(q) + float(r) / float(cnt)
    best = y
    best_err: Int = -1
    c = y
    for _ in range(2):
        c = np.nextafter(c, -np.inf)
    for _ in range(5):
        d = np.int64((c - float(q)) * 1073741824.0)
        err = d * cnt - r * 1073741824
        if err < 0:
            err = -err
        if best_err < 0 or err < best_err or (err == best_err and even(c) and not even(best)):
            best = c
            best_err = err
        c = np.nextafter(c, np.inf)
    return best


def even(c: float) -> bool:
    """Is the significand of float ``c`` even?"""
    m, _ = math.frexp(c)
    return bool(np.int64(m * 9007199254740992.0) % 2 == 0)
