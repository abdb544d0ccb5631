"""Operands over Kleene runs (SASE+, Agrawal et al. 2008, §2 and Fig. 5): which conditions are checked event
by event as a run grows and which on the finished run, when a condition can be decided on part of a match,
and what an aggregate's value is.

The definitions are in docs/query-language.md ("Kleene runs and aggregates"); this module holds the few
rules that the brute-force reference (:mod:`exact.reference`) and an engine must share word for word:

* A condition **iterates** a variable it reads through ``v.x`` / ``v[i].x``, ``prev(v.x)`` / ``v[i-1].x``
  or an aggregate over ``v[..i-1]``: it must hold at each event of the run.  It starts at the run's second
  event when it also reads an *earlier* event of the same run (``v[i-1]``, ``v[..i-1]``, ``v[1]``) — the
  first event has none, as SASE+'s ``a[1]`` begin edge carries no ``a[i]`` predicate — and at the first
  event otherwise.
* A condition reads the **finished run** of ``v`` through ``v[last].x``, ``count(v)`` or an aggregate over
  the whole run.  Such a condition is decided only once the run is over: when an event of a later element is
  bound, or, for the last element, when the match is complete (never while a trailing Kleene run may still
  grow).
* ``v[1].x`` is one value known from the run's first event on.
* Aggregates skip null and missing values (as SQL does); ``sum``/``avg`` need numbers, ``min``/``max`` values
  of one kind; an aggregate of no values is null, and a NaN propagates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from exact.query.ast import AGGREGATES, Aggregate, Condition, Field, Literal, Operand, RunEvent

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_:]*\Z")


def _attr(name: str) -> str:
    return name if _IDENT.match(name) else "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def describe(operand: Operand) -> str:
    """An operand as a query writes it (``a[last].volume``, ``avg(a[..i-1].price)``, ``count(a)``), for
    messages; the printer (:mod:`exact.query.language.printer`) is the canonical form."""
    if isinstance(operand, Literal):
        return repr(operand.value)
    if isinstance(operand, Field):
        field = f"{operand.var}.{_attr(operand.attr)}"
        return f"prev({field})" if operand.prev else field
    if isinstance(operand, RunEvent):
        index = "1" if operand.end == "first" else "last"
        return f"{operand.var}[{index}].{_attr(operand.attr)}"
    if operand.attr is None:
        return f"{operand.func}({operand.var})"
    run = f"{operand.var}[..i-1]" if operand.before else operand.var
    return f"{operand.func}({run}.{_attr(operand.attr)})"


def _operands(cond: Condition) -> tuple[Operand, Operand]:
    return cond.left, cond.right


def iterated(cond: Condition) -> frozenset[str]:
    """The variables ``cond`` ranges over event by event (∀ over the events of each)."""
    return frozenset(o.var for o in _operands(cond)
                     if isinstance(o, Field) or (isinstance(o, Aggregate) and o.before))


def finished_runs(cond: Condition) -> frozenset[str]:
    """The variables whose finished run ``cond`` reads (``v[last]``, ``count(v)``, ``avg(v.x)``, …)."""
    return frozenset(o.var for o in _operands(cond)
                     if (isinstance(o, RunEvent) and o.end == "last")
                     or (isinstance(o, Aggregate) and not o.before))


def reads_earlier_event(cond: Condition, var: str) -> bool:
    """Whether ``cond`` compares the current event of ``var``'s run with an earlier one of the same run."""
    if var not in iterated(cond):
        return False
    return any(o.var == var and ((isinstance(o, Field) and o.prev) or (isinstance(o, Aggregate) and o.before)
                                 or (isinstance(o, RunEvent) and o.end == "first"))
               for o in _operands(cond) if not isinstance(o, Literal))


def first_position(cond: Condition, var: str) -> int:
    """The 0-based position of ``var``'s run at which ``cond`` is first checked: 1 (the second event) when it
    reads an earlier event of the run, else 0."""
    return 1 if reads_earlier_event(cond, var) else 0


def decidable(cond: Condition, bound: Iterable[str], finished: Iterable[str]) -> bool:
    """Whether ``cond`` can be decided on a partial match binding ``bound`` whose runs ``finished`` are over:
    every variable it names is bound and every run it reads as a whole is finished."""
    bound, finished = set(bound), set(finished)
    return cond.variables() <= bound and finished_runs(cond) <= finished


# ------------------------------------------------------------------------------------------------- values


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "b"
    if _is_number(value):
        return "n"
    return "s" if isinstance(value, str) else "o"


def aggregate(func: str, values: Sequence[Any]) -> Any:
    """``func`` (sum, avg, min, max) over the attribute values of a run's events, in stream order.

    Null (None) values are skipped; no values left gives None.  ``sum`` and ``avg`` are None unless every
    value is a number; integers sum exactly, floats in float64 from left to right (Python's ``+``), and
    ``avg`` is the sum divided by the number of values (``int / int`` is the float nearest the exact
    quotient).  ``min`` and ``max`` are None unless the values are of one kind (numbers, strings or
    booleans) and NaN if one of them is NaN; otherwise the smallest or largest value itself.
    """
    present = [v for v in values if v is not None]
    if not present:
        return None
    if func in ("sum", "avg"):
        if not all(_is_number(v) for v in present):
            return None
        total = present[0]
        for v in present[1:]:
            total = total + v
        return total if func == "sum" else total / len(present)
    if func not in ("min", "max"):
        raise ValueError(f"unknown aggregate {func!r}")
    if len({_kind(v) for v in present}) != 1:
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in present):
        return math.nan
    return min(present) if func == "min" else max(present)


# ----------------------------------------------------------------------------------------------- validity


def operand_problem(operand: Operand, kleene: set[str], negated: set[str]) -> str | None:
    """Why ``operand`` is not meaningful in a query whose Kleene and negated variables are given, or None.
    (Unknown variables are the caller's to report.)"""
    if isinstance(operand, Literal) or (isinstance(operand, Field) and not operand.prev):
        return None
    var = operand.var
    if isinstance(operand, Aggregate):
        problem = _aggregate_shape_problem(operand)
        if problem:
            return problem
    if var in kleene:
        return None
    if isinstance(operand, Field):
        return f"prev() needs a Kleene variable (declared like 'B+ {var}'), but '{var}' binds a single event"
    if var in negated:
        return (f"{describe(operand)}: '{var}' is negated, so a match binds no event to it and it has no "
                "run; run operands and aggregates need a positive Kleene variable (declared like 'B+ b')")
    problem = (f"{describe(operand)} needs a Kleene variable (declared like 'B+ {var}'), but '{var}' binds a "
               "single event")
    return problem + f"; write its field as {var}.{_attr(operand.attr)}" if isinstance(operand, RunEvent) \
        else problem


def _aggregate_shape_problem(agg: Aggregate) -> str | None:
    if agg.func not in AGGREGATES:
        return f"unknown aggregate '{agg.func}'; expected one of " + ", ".join(AGGREGATES)
    if agg.func == "count":
        if agg.before:
            return (f"count({agg.var}[..i-1]) is not part of the language; count({agg.var}) counts the "
                    "events of the whole run")
        if agg.attr is not None:
            return (f"count({agg.var}) counts the events of {agg.var}'s run and takes no attribute; write "
                    f"count({agg.var})")
        return None
    if agg.attr is None:
        run = f"{agg.var}[..i-1]" if agg.before else agg.var
        return f"{agg.func}({run}) needs an attribute, e.g. {agg.func}({run}.price)"
    return None


def condition_problem(cond: Condition) -> tuple[int, str] | None:
    """Why the two operands of ``cond`` cannot be compared as written — ``(side, message)`` with side 0 (left)
    or 1 (right) the operand to blame — or None.  Operands must each be valid (:func:`operand_problem`)."""
    operands = _operands(cond)
    for side, (this, other) in enumerate((operands, operands[::-1])):
        if isinstance(this, Field) and this.prev:
            if not isinstance(other, Field) or other.prev or other.var != this.var:
                return 1 - side, (f"prev({this.var}.{_attr(this.attr)}) must be compared with a field of "
                                  f"'{this.var}' itself, e.g. prev({this.var}.{_attr(this.attr)}) < "
                                  f"{this.var}.{_attr(this.attr)}")
        if isinstance(this, Aggregate) and this.before:
            if not isinstance(other, Field) or other.prev or other.var != this.var:
                shown = describe(this)
                return 1 - side, (f"{shown} aggregates the events of {this.var}'s run before the current "
                                  f"one, {this.var}[i]; compare it with a field of '{this.var}' itself, e.g. "
                                  f"{this.var}[i].{_attr(this.attr or 'x')} > {shown}")
    for var in sorted(iterated(cond) & finished_runs(cond)):
        side = next(k for k, o in enumerate(operands)
                    if not isinstance(o, Literal) and o.var == var and var in finished_runs(
                        Condition(o, "=", Literal(None))))
        return side, (f"{describe(operands[side])} is known only once {var}'s run is complete, while "
                      f"{describe(operands[1 - side])} is checked as each event joins it; compare "
                      f"{var}[i] with {var}[1], {var}[i-1] or an aggregate over {var}[..i-1] instead, and "
                      "the finished run with other variables")
    return None
