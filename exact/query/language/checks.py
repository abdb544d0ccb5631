"""Semantic checks of a query AST, shared by the text parser and the JSON form.

The grammar (or the JSON shape check) only says what is well-formed; this module says what is meaningful
(docs/contract.md §2): every variable declared once and every condition naming declared variables, ``prev()`` only
on Kleene variables (Cadonna 2013, Def. 3.1: ``prev(v.A) φ v.A``), run indexes and aggregates only on
positive Kleene variables and in the shapes :mod:`exact.query.operands` allows, negation neither first nor —
without a window — last (SASE+, Agrawal et al. 2008 §2: negation is checked between the neighbouring positive
events), literal types that fit the event's own fields, windows in range.  It also rewrites ISO-8601
strings compared with ``x.ts`` into microseconds, which is the only change it makes.

Errors point at the offending piece through a :class:`Locator`: line and column of its token for text, a JSON
path for the JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import exact.query.language.lexical as lexical
import exact.query.language.temporal as temporal
from exact.errors import QueryLimitError, QuerySemanticError
from exact.query.ast import (
    MAX_FOLLOWING,
    MAX_TOP,
    OPERATORS,
    Absent,
    Aggregate,
    AnyOf,
    Condition,
    Element,
    EventSet,
    Literal,
    Query,
    Return,
    Strategy,
    VarOperand,
    WithinEvents,
    WithinTime,
)
from exact.query.language.kinds import (
    NUMERIC_KINDS,
    check_condition_kinds,
    check_group_attribute,
    operand_kind,
)
from exact.query.language.locator import Key, Locator
from exact.query.operands import condition_problem, describe, operand_problem

#: Documented limits (docs/query-language.md, "Limits").
MAX_QUERY_BYTES = 64 * 1024
MAX_VARIABLES = 64
MAX_CONDITIONS = 256
MAX_PARTITION_ATTRIBUTES = 16

def check_query(query: Query, locator: Locator, attr_kinds: Mapping[str, str] | None = None) -> Query:
    """Raise the first problem found (QuerySemanticError / QueryLimitError); return the query with ts literals
    converted to microseconds.

    ``attr_kinds`` — a dataset's attributes and the kind each holds (:func:`attribute_kinds` of its stored
    types) — also checks every comparison of an attribute against that kind: a string attribute compared with
    a number (or a numeric one with a string) would hold for no event, so it is refused, naming the
    attribute's type and the form that works (docs/query-language.md, "Attribute types")."""
    _check_sizes(query, locator)
    _check_variables(query, locator)
    _check_elements(query, locator)
    kinds = attr_kinds or {}
    where = tuple(_check_condition(query, j, c, locator, kinds) for j, c in enumerate(query.where))
    _check_partition(query, locator)
    _check_window(query, locator)
    _check_between(query, locator)
    _check_strategy(query, locator)
    _check_summary(query, locator, attr_kinds)
    return replace(query, where=where) if where != query.where else query


def _check_sizes(query: Query, locator: Locator) -> None:
    variables = list(query.variables())
    if len(variables) > MAX_VARIABLES:
        raise locator.error(QueryLimitError, f"the query declares {len(variables)} variables; at most "
                            f"{MAX_VARIABLES} are allowed", ("var", MAX_VARIABLES))
    if len(query.where) > MAX_CONDITIONS:
        raise locator.error(QueryLimitError, f"the query has {len(query.where)} conditions; at most "
                            f"{MAX_CONDITIONS} are allowed", ("cond", MAX_CONDITIONS))
    if len(query.partition_by) > MAX_PARTITION_ATTRIBUTES:
        raise locator.error(QueryLimitError, f"PARTITION BY lists {len(query.partition_by)} attributes; "
                            f"at most {MAX_PARTITION_ATTRIBUTES} are allowed",
                            ("partition", MAX_PARTITION_ATTRIBUTES))


def _check_variables(query: Query, locator: Locator) -> None:
    first_seen: dict[str, int] = {}
    for i, var in enumerate(query.variables()):
        if not lexical.is_identifier(var.name):
            raise locator.error(QuerySemanticError, f"'{var.name}' is not a valid variable name; expected a "
                                "letter or '_' followed by letters, digits, '_' or ':'", ("var_name", i))
        if var.name.lower() in lexical.RESERVED_NAMES:
            raise locator.error(QuerySemanticError, f"'{var.name}' is a keyword and cannot be a variable "
                                "name; choose another name", ("var_name", i))
        if var.type is not None and var.type == "":
            raise locator.error(QuerySemanticError, "empty event type name; expected a type or ANY",
                                ("var_type", i))
        if var.name in first_seen:
            raise locator.error(QuerySemanticError, f"variable '{var.name}' is declared twice (first as "
                                f"variable {first_seen[var.name] + 1} of the pattern); give each variable "
                                "its own name",
                                ("var_name", i))
        first_seen[var.name] = i


def _check_elements(query: Query, locator: Locator) -> None:
    if not query.pattern:
        raise locator.error(QuerySemanticError, "empty pattern; expected at least one element", ("query",))
    var_index = 0
    for k, element in enumerate(query.pattern):
        _check_element_arity(element, k, locator)
        if isinstance(element, Absent):
            _check_negation_position(query, k, locator)
            for offset, var in enumerate(element.vars):
                if var.kleene:
                    raise locator.error(QuerySemanticError, f"negated variable '{var.name}' cannot be Kleene "
                                        "(one forbidden event is enough); drop the '+'",
                                        ("var_type", var_index + offset))
        var_index += len(element.vars)


def _check_element_arity(element: Element, k: int, locator: Locator) -> None:
    if isinstance(element, EventSet | AnyOf) and len(element.vars) < 2:
        what = "an event set {…}/AND(…)" if isinstance(element, EventSet) else "OR(…)"
        raise locator.error(QuerySemanticError, f"{what} needs at least two variables; for one, write the "
                            "variable on its own", ("element", k))
    if isinstance(element, Absent) and not element.vars:
        raise locator.error(QuerySemanticError, "NOT(…) needs at least one variable", ("element", k))


def _check_negation_position(query: Query, k: int, locator: Locator) -> None:
    if k == 0:
        raise locator.error(QuerySemanticError, "NOT cannot be the first element of a pattern: negation is "
                            "checked between two positive elements (or after the last one, with WITHIN)",
                            ("element", k))
    if isinstance(query.pattern[k - 1], Absent):
        raise locator.error(QuerySemanticError, "two NOT elements in a row; merge them into one NOT(…, …)",
                            ("element", k))
    if k == len(query.pattern) - 1 and query.within is None:
        raise locator.error(QuerySemanticError, "NOT at the end of a pattern needs WITHIN (a duration or n "
                            "EVENTS): none may occur within the window after the last positive event",
                            ("element", k))


def _check_condition(query: Query, j: int, cond: Condition, locator: Locator,
                     attr_kinds: Mapping[str, str]) -> Condition:
    if cond.op not in OPERATORS:
        raise locator.error(QuerySemanticError, f"unknown operator '{cond.op}'; expected one of "
                            + ", ".join(OPERATORS), ("op", j))
    kinds = _variable_kinds(query)
    for side, operand in enumerate((cond.left, cond.right)):
        if not isinstance(operand, Literal):
            _check_operand(query, operand, j, side, kinds, locator)
    if all(isinstance(o, Literal) for o in (cond.left, cond.right)):
        raise locator.error(QuerySemanticError, "a condition must name at least one variable field "
                            "(e.g. a.amount > 100); this one compares two literals", ("cond", j))
    found = condition_problem(cond)
    if found:
        raise locator.error(QuerySemanticError, found[1], ("operand", j, found[0]))
    _check_negated_and_alternatives(query, cond, j, locator)
    check_condition_kinds(cond, j, locator, attr_kinds)
    return _check_types(cond, j, locator)


def _variable_kinds(query: Query) -> dict[str, Any]:
    return {v.name: v for v in query.variables()}


def _check_operand(query: Query, operand: VarOperand, j: int, side: int, variables: dict[str, Any],
                   locator: Locator) -> None:
    if operand.var not in variables:
        declared = ", ".join(variables) or "none"
        raise locator.error(QuerySemanticError, f"unknown variable '{operand.var}' in condition; expected "
                            f"one of the declared variables ({declared})", ("operand_var", j, side))
    if operand.attr == "":
        raise locator.error(QuerySemanticError, "empty attribute name; expected a name after '.'",
                            ("operand", j, side))
    kleene = {name for name, v in variables.items() if v.kleene}
    negated = {v.name for e in query.pattern if isinstance(e, Absent) for v in e.vars}
    problem = operand_problem(operand, kleene, negated)
    if problem:
        raise locator.error(QuerySemanticError, problem, ("operand", j, side))
    if isinstance(operand, Aggregate) and operand.func in ("sum", "avg") and operand.attr == "type":
        raise locator.error(QuerySemanticError, f"{describe(operand)}: the event type is a string; sum and "
                            "avg need numbers", ("operand", j, side))


def _check_negated_and_alternatives(query: Query, cond: Condition, j: int, locator: Locator) -> None:
    """A condition may relate a negated variable to positive ones (SASE+), but not two negated variables,
    nor two alternatives of one OR (only one of them is ever bound)."""
    names = [o.var for o in (cond.left, cond.right) if not isinstance(o, Literal)]
    if len(names) < 2 or names[0] == names[1]:
        return
    for element in query.pattern:
        inside = [n for n in names if n in {v.name for v in element.vars}]
        if len(inside) == 2 and isinstance(element, AnyOf):
            raise locator.error(QuerySemanticError, f"'{names[0]}' and '{names[1]}' are alternatives of the "
                                "same OR; only one of them is bound, so a condition cannot relate them",
                                ("cond", j))
    negated = {v.name for e in query.pattern if isinstance(e, Absent) for v in e.vars}
    if names[0] in negated and names[1] in negated:
        raise locator.error(QuerySemanticError, f"'{names[0]}' and '{names[1]}' are both negated; a "
                            "condition may relate a negated variable only to positive ones", ("cond", j))


# The kind of value each builtin field holds; attributes are schemaless and accept any literal.
def _check_types(cond: Condition, j: int, locator: Locator) -> Condition:
    left, right = cond.left, cond.right
    if not isinstance(left, Literal) and not isinstance(right, Literal):
        lk, rk = operand_kind(left), operand_kind(right)
        if lk and rk and lk != rk and not {lk, rk} <= NUMERIC_KINDS:
            raise locator.error(QuerySemanticError, f"cannot compare {describe(left)} ({lk}) with "
                                f"{describe(right)} ({rk})", ("cond", j))
        return cond
    sides = [(0, left, right), (1, right, left)]
    for side, literal, operand in sides:
        if isinstance(literal, Literal) and not isinstance(operand, Literal):
            converted = _check_literal(literal, operand, cond.op, j, side, locator)
            if converted is not literal:
                return replace(cond, left=converted) if side == 0 else replace(cond, right=converted)
    return cond


def _check_literal(literal: Literal, operand: VarOperand, op: str, j: int, side: int,
                   locator: Locator) -> Literal:
    value = literal.value
    key = ("operand", j, side)
    shown = lexical.format_scalar(value)
    ordering = op not in ("=", "!=")
    if ordering and (value is None or isinstance(value, bool)):
        raise locator.error(QuerySemanticError, f"'{op}' cannot order {shown}; expected a number or a string "
                            "(true, false and null only work with = and !=)", key)
    if isinstance(value, float) and value != value:  # NaN from JSON never equals anything
        raise locator.error(QuerySemanticError, "NaN is not a valid literal", key)
    kind = operand_kind(operand)
    if kind is None:
        return literal
    target = describe(operand)
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(operand, Aggregate) and kind in NUMERIC_KINDS:
        if not is_number:
            what = "a number of events" if operand.func == "count" else "a number"
            raise locator.error(QuerySemanticError, f"{target} is {what}; cannot compare it with {shown}; "
                                "expected a number", key)
        return literal
    if kind == "string" and not isinstance(value, str):
        raise locator.error(QuerySemanticError, f"{target} is the event type, a string; cannot compare it "
                            f"with {shown}; expected a quoted type name", key)
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        raise locator.error(QuerySemanticError, f"{target} is the stream position, an integer; cannot "
                            f"compare it with {shown}", key)
    if kind == "time":
        if isinstance(operand, Aggregate) and isinstance(value, float):
            return literal  # an average time may fall between two microseconds
        return _time_literal(literal, target, key, locator)
    return literal


def _time_literal(literal: Literal, target: str, key: Key, locator: Locator) -> Literal:
    value = literal.value
    if isinstance(value, str):
        try:
            return Literal(temporal.iso_to_micros(value))
        except ValueError as exc:
            raise locator.error(QuerySemanticError, f"{target} is a time; {exc}", key) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise locator.error(QuerySemanticError, f"{target} is a time; cannot compare it with "
                            f"{lexical.format_scalar(value)}; expected an ISO-8601 string or integer "
                            "microseconds", key)
    return literal


def _check_partition(query: Query, locator: Locator) -> None:
    seen: set[str] = set()
    for j, attr in enumerate(query.partition_by):
        if attr == "":
            raise locator.error(QuerySemanticError, "empty attribute name in PARTITION BY", ("partition", j))
        if attr in seen:
            raise locator.error(QuerySemanticError, f"PARTITION BY lists '{attr}' twice", ("partition", j))
        seen.add(attr)


def _check_window(query: Query, locator: Locator) -> None:
    within = query.within
    if isinstance(within, WithinTime):
        if within.micros <= 0:
            raise locator.error(QuerySemanticError, "WITHIN needs a positive duration", ("within_value",))
        if within.micros > temporal.MAX_WITHIN_MICROS:
            raise locator.error(QuerySemanticError, "WITHIN duration is longer than 100 years; expected a "
                                "realistic window", ("within_value",))
    elif isinstance(within, WithinEvents):
        if within.count <= 0:
            raise locator.error(QuerySemanticError, "WITHIN n EVENTS needs n ≥ 1", ("within_value",))
        if within.count > temporal.MAX_WITHIN_EVENTS:
            raise locator.error(QuerySemanticError, f"WITHIN {within.count} EVENTS is larger than "
                                f"{temporal.MAX_WITHIN_EVENTS}; expected a realistic window",
                                ("within_value",))
        needed = minimum_events(query)
        if within.count < needed:
            raise locator.error(QuerySemanticError, f"WITHIN {within.count} EVENTS can never match: the "
                                f"pattern binds at least {needed} events", ("within_value",))


def minimum_events(query: Query) -> int:
    """The fewest events a match binds: one per variable of a set or single, one per OR."""
    return sum(1 if isinstance(e, AnyOf) else len(e.vars) for e in query.positive_elements())


def _check_between(query: Query, locator: Locator) -> None:
    between = query.between
    if between is None:
        return
    for key, value in ((("between_start",), between.start), (("between_end",), between.end)):
        if not temporal.is_printable_time(value):
            raise locator.error(QuerySemanticError, "BETWEEN time is outside the years 1 to 9999", key)
    if between.start > between.end:
        start, end = temporal.micros_to_iso(between.start), temporal.micros_to_iso(between.end)
        raise locator.error(QuerySemanticError, f"BETWEEN starts after it ends ({start} > {end}); expected "
                            "the earlier time first", ("between_end",))


def _check_strategy(query: Query, locator: Locator) -> None:
    if query.strategy is Strategy.PARTITION_CONTIGUITY and not query.partition_by:
        raise locator.error(QuerySemanticError, "STRATEGY partition_contiguity needs PARTITION BY: it is "
                            "contiguity within the partition", ("strategy",))
    if query.returns is Return.CASES and not query.partition_by:
        raise locator.error(QuerySemanticError, "RETURN cases needs PARTITION BY: a case is a value of the "
                            "partition attributes (e.g. PARTITION BY case)", ("returns",))



def _check_summary(query: Query, locator: Locator, attr_kinds: Mapping[str, str] | None) -> None:
    """``RETURN next k``, ``RETURN count|cases BY v.attr [TOP k]`` (docs/semantics.md §7)."""
    if query.following is not None:
        if query.returns is not Return.NEXT:
            raise locator.error(QuerySemanticError, f"a number after RETURN is for RETURN next k, not RETURN "
                                f"{query.returns.value}", ("following",))
        if not 1 <= query.following <= MAX_FOLLOWING:
            raise locator.error(QuerySemanticError, f"RETURN next k takes k from 1 to {MAX_FOLLOWING}, not "
                                f"{query.following}", ("following",))
    if query.following_within is not None:
        if query.returns is not Return.NEXT:
            raise locator.error(QuerySemanticError, "WITHIN after RETURN is for RETURN next k WITHIN d",
                                ("following_within",))
        if not 1 <= query.following_within <= temporal.MAX_WITHIN_MICROS:
            raise locator.error(QuerySemanticError, "RETURN next k WITHIN d takes d from 1 µs to 100 years",
                                ("following_within",))
    if query.top is not None and query.group_by is None:
        raise locator.error(QuerySemanticError, "TOP k goes with BY v.attr", ("top",))
    if query.top is not None and not 1 <= query.top <= MAX_TOP:
        raise locator.error(QuerySemanticError, f"TOP k takes k from 1 to {MAX_TOP}, not {query.top}", ("top",))
    by = query.group_by
    if by is None:
        return
    if query.returns not in (Return.COUNT, Return.CASES):
        raise locator.error(QuerySemanticError, f"BY groups RETURN count or RETURN cases, not RETURN "
                            f"{query.returns.value}", ("group_by",))
    positive = [v.name for v in query.positive_variables()]
    if by.var not in positive:
        negated = by.var in {v.name for v in query.variables()}
        raise locator.error(QuerySemanticError, f"BY {by.var}.{by.attr}: "
                            + ("a negated variable binds no event" if negated else
                               f"unknown variable '{by.var}'; expected one of {', '.join(positive)}"),
                            ("group_by",))
    if attr_kinds is not None:
        check_group_attribute(query, locator, attr_kinds)
