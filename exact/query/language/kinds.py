"""The kinds of values a query compares, checked against a dataset's attributes: a comparison of an attribute
with a value of another kind holds for no event, so it is refused with the attribute's kind named
(docs/query-language.md, "Attribute types")."""

from __future__ import annotations

from collections.abc import Mapping

import exact.query.language.lexical as lexical
from exact.errors import QuerySemanticError
from exact.query.ast import BUILTIN_FIELDS, Aggregate, Condition, Literal, Operand, Query
from exact.query.language.locator import Locator
from exact.query.operands import describe

_BUILTIN_KIND = {"type": "string", "ts": "time", "seq": "integer"}
#: Kinds that are all numbers: they may be compared with each other.
NUMERIC_KINDS = frozenset({"integer", "number"})
#: The kind of value each stored attribute type holds (the names of :data:`exact.events.ATTR_TYPE_NAMES`).
_STORED_KINDS = {"int64": "integer", "double": "number", "bool": "boolean", "string": "string"}


def attribute_kinds(attr_types: Mapping[str, str]) -> dict[str, str]:
    """A dataset's attribute → stored type name (``int64``, ``double``, ``bool``, ``string``) as the kinds
    :func:`check_query` compares: ``integer``, ``number``, ``boolean``, ``string``."""
    return {name: _STORED_KINDS[t] for name, t in attr_types.items() if t in _STORED_KINDS}


def stored_kind(operand: Operand, attr_kinds: Mapping[str, str]) -> str | None:
    """The kind of value an attribute operand holds in the dataset (None: not an attribute, or unknown)."""
    if isinstance(operand, Literal) or operand.attr is None or operand.attr in _BUILTIN_KIND:
        return None
    if isinstance(operand, Aggregate) and operand.func != "min" and operand.func != "max":
        return None  # count, sum and avg are numbers whatever they fold (operand_kind says so)
    return attr_kinds.get(operand.attr)


def kind_words(kind: str) -> str:
    return {"integer": "an integer", "number": "a number", "boolean": "a boolean", "string": "a string"}[kind]


def check_attribute_kinds(query: Query, locator: Locator, attr_kinds: Mapping[str, str]) -> None:
    """Only the comparisons of ``query``'s attributes against ``attr_kinds`` (a query built as an AST, whose
    other checks are its builder's business)."""
    for j, cond in enumerate(query.where):
        check_condition_kinds(cond, j, locator, attr_kinds)
    check_group_attribute(query, locator, attr_kinds)


def check_condition_kinds(cond: Condition, j: int, locator: Locator, attr_kinds: Mapping[str, str]) -> None:
    """A comparison of a dataset attribute with a literal or a field of another kind holds for no event (values
    of different kinds are never equal and never ordered): refused, with the form that would work."""
    if not attr_kinds:
        return
    sides = ((0, cond.left, cond.right), (1, cond.right, cond.left))
    for side, operand, other in sides:
        kind = stored_kind(operand, attr_kinds)
        if kind is None:
            continue
        target = describe(operand)
        if isinstance(other, Literal):
            value = other.value
            if value is None:
                continue  # = null / != null name no kind (and, as every comparison with null, hold for none)
            shown = lexical.format_scalar(value)
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            if kind == "string" and not isinstance(value, str):
                form = f"{target} {cond.op} '{value}'" if is_number else f"{target} {cond.op} 'text'"
                order = (" (strings order as text: '9' > '10')" if cond.op not in ("=", "!=") and is_number
                         else "")
                raise locator.error(QuerySemanticError, f"{target} is a string attribute in this dataset; it "
                                    f"is never equal to or ordered with {shown}, so the condition would hold for "
                                    f"no event. Compare it with a string, e.g. {form}{order}",
                                    ("operand", j, 1 - side))
            if kind in NUMERIC_KINDS and not is_number:
                hint = ""
                if isinstance(value, str) and _numeric_text(value):
                    hint = f"; write the number without quotes, e.g. {target} {cond.op} {value.strip()}"
                raise locator.error(QuerySemanticError, f"{target} is {kind_words(kind)} attribute "
                                    f"({'int64' if kind == 'integer' else 'double'}) in this dataset; it is never "
                                    f"equal to or ordered with {shown}, so the condition would hold for no "
                                    f"event{hint}", ("operand", j, 1 - side))
            if kind == "boolean" and not isinstance(value, bool):
                raise locator.error(QuerySemanticError, f"{target} is a boolean attribute in this dataset; "
                                    f"compare it with true or false, not {shown}", ("operand", j, 1 - side))
            continue
        other_kind = stored_kind(other, attr_kinds) or operand_kind(other)
        if other_kind is None or other_kind == kind or {kind, other_kind} <= NUMERIC_KINDS:
            continue
        words = kind_words(other_kind) if other_kind in _STORED_KINDS.values() else f"a {other_kind}"
        raise locator.error(QuerySemanticError, f"{target} is {kind_words(kind)} attribute in this dataset and "
                            f"{describe(other)} is {words}: values of different kinds are never equal or "
                            "ordered, so the condition would hold for no event", ("cond", j))


def _numeric_text(text: str) -> bool:
    try:
        float(text.strip())
    except ValueError:
        return False
    return True


def operand_kind(operand: Operand) -> str | None:
    """What an operand holds when that is known from the query alone: ``string``, ``time``, ``integer``,
    ``number`` (count, sum, avg), or None (an attribute: any kind)."""
    if isinstance(operand, Literal):
        return None
    if isinstance(operand, Aggregate):
        if operand.func == "count":
            return "integer"
        if operand.func == "sum":
            return "number"
        if operand.func == "avg":
            return "time" if operand.attr == "ts" else "number"
    return _BUILTIN_KIND.get(operand.attr) if operand.attr in _BUILTIN_KIND else None


def check_group_attribute(query: Query, locator: Locator, attr_kinds: Mapping[str, str]) -> None:
    by = query.group_by
    if by is not None and by.attr not in BUILTIN_FIELDS and by.attr not in attr_kinds:
        known = ", ".join(sorted(attr_kinds)) or "none"
        raise locator.error(QuerySemanticError, f"BY {by.var}.{by.attr}: the dataset has no attribute "
                            f"'{by.attr}' (its attributes: {known})", ("group_by",))
