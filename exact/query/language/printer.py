"""AST → canonical query text.

The canonical form: keywords upper-case; every variable printed with its name (``A+ a``); types and attribute
names bare when they are plain identifiers (types: and not keywords), else single-quoted; event sets as
``{…}``; one clause per line; clauses left out when they hold their default (no WHERE, no window,
``skip_till_next_match``, ``RETURN matches``); a literal compared with ``x.ts`` printed as an ISO-8601 string.
``parse(to_text(q)) == q`` for every checked query ``q``, and ``to_text`` is idempotent through ``parse``.

The pieces of a query print alone in the same form (:func:`condition_text`, :func:`element_text`,
:func:`window_text`), for messages that quote one part of a query.
"""

from __future__ import annotations

import exact.query.language.lexical as lexical
import exact.query.language.temporal as temporal
from exact.errors import QuerySemanticError
from exact.query.ast import (
    Absent,
    Aggregate,
    AnyOf,
    Condition,
    Element,
    EventSet,
    Field,
    Literal,
    Operand,
    Query,
    Return,
    RunEvent,
    Single,
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.language.kinds import operand_kind


def to_text(query: Query) -> str:
    """The canonical text of ``query``."""
    lines = ["PATTERN " + _pattern(query.pattern)]
    if query.where:
        lines.append("WHERE " + " AND ".join(_condition(c) for c in query.where))
    if query.partition_by:
        lines.append("PARTITION BY " + ", ".join(lexical.attribute(a) for a in query.partition_by))
    if query.within is not None:
        lines.append(window_text(query.within))
    if query.between is not None:
        bounds = (query.between.start, query.between.end)
        if not all(temporal.is_printable_time(b) for b in bounds):
            # Text only has ISO times for BETWEEN; the checks refuse such a query anyway.
            raise QuerySemanticError("BETWEEN time is outside the years 1 to 9999", where="between")
        start, end = (lexical.quote(temporal.micros_to_iso(b)) for b in bounds)
        lines.append(f"BETWEEN {start} AND {end}")
    if query.strategy is not Strategy.SKIP_TILL_NEXT_MATCH:
        lines.append("STRATEGY " + query.strategy.value)
    if query.returns is not Return.MATCHES or query.group_by is not None:
        text = "RETURN " + query.returns.value
        if query.following is not None:
            text += f" {query.following}"
        if query.following_within is not None:
            text += " " + window_text(WithinTime(query.following_within))
        if query.group_by is not None:
            text += f" BY {query.group_by.var}.{lexical.attribute(query.group_by.attr)}"
            if query.top is not None:
                text += f" TOP {query.top}"
        lines.append(text)
    return "\n".join(lines)


def condition_text(cond: Condition) -> str:
    """One condition as it stands in the canonical WHERE clause (``a.amount > 50000``)."""
    return _condition(cond)


def element_text(element: Element) -> str:
    """One pattern element as it stands in the canonical pattern (``NOT(O_SENT_BACK b)``)."""
    return _element(element)


def window_text(within: WithinTime | WithinEvents) -> str:
    """The canonical WITHIN clause (``WITHIN 30 days``, ``WITHIN 20 EVENTS``)."""
    if isinstance(within, WithinTime):
        return "WITHIN " + temporal.format_duration(within.micros)
    return f"WITHIN {within.count} EVENTS"


def _pattern(pattern: tuple[Element, ...]) -> str:
    if len(pattern) == 1 and not isinstance(pattern[0], Absent):
        return _element(pattern[0])
    return "SEQ(" + ", ".join(_element(e) for e in pattern) + ")"


def _element(element: Element) -> str:
    if isinstance(element, Single):
        return _var(element.var)
    inner = ", ".join(_var(v) for v in element.vars)
    if isinstance(element, EventSet):
        return "{" + inner + "}"
    if isinstance(element, AnyOf):
        return f"OR({inner})"
    return f"NOT({inner})"


def _var(var: Var) -> str:
    type_text = "ANY" if var.type is None else lexical.word(var.type)
    return f"{type_text}{'+' if var.kleene else ''} {var.name}"


def _condition(cond: Condition) -> str:
    left = _operand(cond.left, cond.right)
    right = _operand(cond.right, cond.left)
    return f"{left} {cond.op} {right}"


def _operand(operand: Operand, other: Operand) -> str:
    if isinstance(operand, Field):
        if not operand.prev and _reads_earlier_of(other, operand.var):
            # a[i].price > avg(a[..i-1].price), a[i].symbol = a[1].symbol: the current event, as in SASE+
            return f"{operand.var}[i].{lexical.attribute(operand.attr)}"
        field = f"{operand.var}.{lexical.attribute(operand.attr)}"
        return f"prev({field})" if operand.prev else field
    if isinstance(operand, RunEvent):
        index = "1" if operand.end == "first" else "last"
        return f"{operand.var}[{index}].{lexical.attribute(operand.attr)}"
    if isinstance(operand, Aggregate):
        if operand.attr is None:
            return f"{operand.func}({operand.var})"
        run = f"{operand.var}[..i-1]" if operand.before else operand.var
        return f"{operand.func}({run}.{lexical.attribute(operand.attr)})"
    return _literal(operand, other)


def _reads_earlier_of(operand: Operand, var: str) -> bool:
    return ((isinstance(operand, RunEvent) and operand.end == "first")
            or (isinstance(operand, Aggregate) and operand.before)) and operand.var == var


def _literal(literal: Literal, other: Operand) -> str:
    value = literal.value
    compared_with_ts = operand_kind(other) == "time"
    if (compared_with_ts and isinstance(value, int) and not isinstance(value, bool)
            and temporal.is_printable_time(value)):
        # Readable and exact: the parser turns the ISO string back into these microseconds.
        return lexical.quote(temporal.micros_to_iso(value))
    return lexical.format_scalar(value)
