"""The JSON form of the query AST (version :data:`exact.query.ast.AST_VERSION`), accepted wherever text is.

Shape (docs/query-language.md, "JSON form")::

    {"version": 1,
     "pattern": [{"kind": "var" | "set" | "or" | "not",
                  "vars": [{"name": "a", "type": "A" | null, "kleene": false}, ...]}, ...],
     "where": [{"left": OPERAND, "op": "=", "right": OPERAND}, ...],
     "partition_by": ["case"],
     "within": {"micros": 900000000} | {"events": 5} | null,
     "between": {"start": MICROS | "ISO", "end": MICROS | "ISO"} | null,
     "strategy": "skip_till_next_match",
     "returns": "matches",
     "group_by": {"var": "o", "attr": "org:resource"}, "top": 10,   only with RETURN count / cases BY
     "following": 3, "following_within": {"micros": n}}                only with RETURN next k

    OPERAND = {"var": "a", "attr": "amount", "prev": false}       a.amount, prev(a.amount) (= a[i-1].amount)
            | {"var": "a", "attr": "amount", "run": "first"}      a[1].amount ("last": a[last].amount)
            | {"agg": "avg", "var": "a", "attr": "amount", "before": false}
                                                               avg(a.amount) (before: avg(a[..i-1].amount));
                                                               count(a) has "attr": null
            | {"value": 3}

Only ``version`` and ``pattern`` are required; a variable without ``name`` gets the default name, exactly as
in text.  ``to_json`` writes every key.  Shape errors are QuerySyntaxError naming the JSON path; meaning
errors go through the same checks as text (:mod:`exact.query.language.checks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

import exact.query.language.lexical as lexical
import exact.query.language.temporal as temporal
from exact.errors import QueryLimitError, QuerySyntaxError
from exact.query.ast import (
    AST_VERSION,
    RUN_ENDS,
    Absent,
    Aggregate,
    AnyOf,
    Between,
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
from exact.query.language.checks import MAX_CONDITIONS, MAX_VARIABLES, check_query
from exact.query.language.locator import Key, Locator

_KINDS: dict[type, str] = {Single: "var", EventSet: "set", AnyOf: "or", Absent: "not"}


def to_json(query: Query) -> dict[str, Any]:
    """The JSON form of ``query`` (plain dicts, lists, strings, numbers, booleans and nulls)."""
    within: dict[str, int] | None = None
    if isinstance(query.within, WithinTime):
        within = {"micros": query.within.micros}
    elif isinstance(query.within, WithinEvents):
        within = {"events": query.within.count}
    between = None if query.between is None else {"start": query.between.start, "end": query.between.end}
    return {
        "version": AST_VERSION,
        "pattern": [{"kind": _KINDS[type(e)], "vars": [_var_json(v) for v in e.vars]} for e in query.pattern],
        "where": [{"left": _operand_json(c.left), "op": c.op, "right": _operand_json(c.right)}
                  for c in query.where],
        "partition_by": list(query.partition_by),
        "within": within,
        "between": between,
        "strategy": query.strategy.value,
        "returns": query.returns.value,
        **({"group_by": {"var": query.group_by.var, "attr": query.group_by.attr}} if query.group_by else {}),
        **({"top": query.top} if query.top is not None else {}),
        **({"following": query.following} if query.following is not None else {}),
        **({"following_within": {"micros": query.following_within}} if query.following_within is not None
           else {}),
    }


def _var_json(var: Var) -> dict[str, Any]:
    return {"name": var.name, "type": var.type, "kleene": var.kleene}


def _operand_json(operand: Operand) -> dict[str, Any]:
    if isinstance(operand, Field):
        return {"var": operand.var, "attr": operand.attr, "prev": operand.prev}
    if isinstance(operand, RunEvent):
        return {"var": operand.var, "attr": operand.attr, "run": operand.end}
    if isinstance(operand, Aggregate):
        return {"agg": operand.func, "var": operand.var, "attr": operand.attr, "before": operand.before}
    return {"value": operand.value}


# --------------------------------------------------------------------------------------------- JSON → AST


class _PathLocator(Locator):
    """Positions in the JSON form are paths such as ``pattern[1].vars[0].name``."""

    def __init__(self, var_paths: list[str]) -> None:
        self._var_paths = var_paths

    def position(self, key: Key) -> dict[str, Any]:
        return {"where": "JSON " + self._path(key)}

    def _path(self, key: Key) -> str:
        kind = key[0]
        if kind in ("var", "var_name", "var_type"):
            index = min(key[1], len(self._var_paths) - 1)
            suffix = {"var": "", "var_name": ".name", "var_type": ".type"}[kind]
            return self._var_paths[index] + suffix if index >= 0 else "pattern"
        side = {0: "left", 1: "right"}
        paths: dict[str, Callable[[], str]] = {
            "element": lambda: f"pattern[{key[1]}]",
            "cond": lambda: f"where[{key[1]}]",
            "op": lambda: f"where[{key[1]}].op",
            "operand": lambda: f"where[{key[1]}].{side[key[2]]}",
            "operand_var": lambda: f"where[{key[1]}].{side[key[2]]}.var",
            "partition": lambda: f"partition_by[{key[1]}]",
            "within": lambda: "within", "within_value": lambda: "within",
            "between": lambda: "between", "between_start": lambda: "between.start",
            "between_end": lambda: "between.end",
            "strategy": lambda: "strategy", "returns": lambda: "returns",
            "group_by": lambda: "group_by", "top": lambda: "top", "following": lambda: "following",
            "following_within": lambda: "following_within",
        }
        return paths.get(kind, lambda: "(query)")()


def _shape_error(message: str, path: str) -> QuerySyntaxError:
    return QuerySyntaxError(message, where=f"JSON {path}")


_T = TypeVar("_T")


@overload
def _expect(value: Any, kind: type[_T], what: str, path: str) -> _T: ...
@overload
def _expect(value: Any, kind: tuple[type, ...], what: str, path: str) -> Any: ...
def _expect(value: Any, kind: type | tuple[type, ...], what: str, path: str) -> Any:
    ok = isinstance(value, kind) and not (isinstance(value, bool) and bool not in _as_tuple(kind))
    if not ok:
        raise _shape_error(f"expected {what}, got {_json_type(value)}", path)
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _keys(obj: dict[str, Any], required: set[str], optional: set[str], path: str) -> None:
    for key in obj:
        if key not in required | optional:
            allowed = ", ".join(sorted(required | optional))
            raise _shape_error(f"unknown key '{key}'; expected only {allowed}", path)
    for key in sorted(required):
        if key not in obj:
            raise _shape_error(f"missing key '{key}'", path)


def from_json(obj: dict[str, Any], attr_kinds: Mapping[str, str] | None = None) -> Query:
    """The checked :class:`Query` of a JSON form; raises QuerySyntaxError / QuerySemanticError /
    QueryLimitError naming the JSON path."""
    _expect(obj, dict, "a JSON object with 'version' and 'pattern'", "(top level)")
    _keys(obj, {"version", "pattern"}, {"where", "partition_by", "within", "between", "strategy", "returns",
                                        "group_by", "top", "following", "following_within"}, "(top level)")
    version = obj["version"]
    if isinstance(version, bool) or version != AST_VERSION:
        raise _shape_error(f"unsupported version {version!r}; expected {AST_VERSION}", "version")
    pattern, var_paths = _pattern(obj["pattern"])
    where = _where(obj.get("where", []))
    query = Query(
        pattern=pattern,
        where=where,
        partition_by=_partition(obj.get("partition_by", [])),
        within=_within(obj.get("within")),
        between=_between(obj.get("between")),
        strategy=_enum(Strategy, obj.get("strategy", Strategy.SKIP_TILL_NEXT_MATCH.value), "strategy"),
        returns=_enum(Return, obj.get("returns", Return.MATCHES.value), "returns"),
        group_by=_group_by(obj.get("group_by")),
        top=_whole(obj.get("top"), "top"),
        following=_whole(obj.get("following"), "following"),
        following_within=_following_within(obj.get("following_within")),
    )
    return check_query(query, _PathLocator(var_paths), attr_kinds)


def _group_by(raw: Any) -> Field | None:
    if raw is None:
        return None
    _expect(raw, dict, "an object {\"var\": NAME, \"attr\": NAME}", "group_by")
    _keys(raw, {"var", "attr"}, set(), "group_by")
    return Field(_expect(raw["var"], str, "a variable name", "group_by.var"),
                 _expect(raw["attr"], str, "an attribute name", "group_by.attr"))


def _following_within(raw: Any) -> int | None:
    if raw is None:
        return None
    _expect(raw, dict, "an object {\"micros\": n}", "following_within")
    _keys(raw, {"micros"}, set(), "following_within")
    return _whole(raw["micros"], "following_within.micros")


def _whole(raw: Any, path: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise _shape_error(f"expected a whole number, got {raw!r}", path)
    return raw


def _pattern(raw: Any) -> tuple[tuple[Element, ...], list[str]]:
    _expect(raw, list, "an array of elements", "pattern")
    if not raw:
        raise _shape_error("empty pattern; expected at least one element", "pattern")
    kinds: list[str] = []
    declared: list[tuple[str | None, str | None, bool]] = []
    var_paths: list[str] = []
    counts: list[int] = []
    for k, element in enumerate(raw):
        path = f"pattern[{k}]"
        _expect(element, dict, "an element object", path)
        _keys(element, {"kind", "vars"}, set(), path)
        kind = _expect(element["kind"], str, "a kind", f"{path}.kind")
        if kind not in ("var", "set", "or", "not"):
            raise _shape_error(f"unknown kind '{kind}'; expected var, set, or or not", f"{path}.kind")
        variables = _expect(element["vars"], list, "an array of variables", f"{path}.vars")
        if kind == "var" and len(variables) != 1:
            raise _shape_error("kind 'var' holds exactly one variable", f"{path}.vars")
        if len(declared) + len(variables) > MAX_VARIABLES:
            raise QueryLimitError(f"the query declares more than {MAX_VARIABLES} variables",
                                  where=f"JSON {path}.vars")
        for m, var in enumerate(variables):
            var_paths.append(f"{path}.vars[{m}]")
            declared.append(_var(var, var_paths[-1]))
        kinds.append(kind)
        counts.append(len(variables))
    names = lexical.assign_default_names([(t, n) for t, n, _ in declared])
    made = iter(Var(name, t, kleene) for name, (t, _, kleene) in zip(names, declared, strict=True))
    elements: list[Element] = []
    for kind, count in zip(kinds, counts, strict=True):
        group = tuple(next(made) for _ in range(count))
        elements.append(_make_element(kind, group))
    return tuple(elements), var_paths


def _make_element(kind: str, group: tuple[Var, ...]) -> Element:
    if kind == "var":
        return Single(group[0])
    make: dict[str, Callable[[tuple[Var, ...]], Element]] = {"set": EventSet, "or": AnyOf, "not": Absent}
    return make[kind](group)


def _var(raw: Any, path: str) -> tuple[str | None, str | None, bool]:
    _expect(raw, dict, "a variable object", path)
    _keys(raw, {"type"}, {"name", "kleene"}, path)
    type_name = raw["type"]
    if type_name is not None:
        _expect(type_name, str, "a type name or null (ANY)", f"{path}.type")
    name = raw.get("name")
    if name is not None:
        _expect(name, str, "a variable name", f"{path}.name")
    kleene = _expect(raw.get("kleene", False), bool, "true or false", f"{path}.kleene")
    return type_name, name, kleene


def _where(raw: Any) -> tuple[Condition, ...]:
    _expect(raw, list, "an array of conditions", "where")
    if len(raw) > MAX_CONDITIONS:
        raise QueryLimitError(f"the query has {len(raw)} conditions; at most {MAX_CONDITIONS} are allowed",
                              where="JSON where")
    conditions = []
    for j, cond in enumerate(raw):
        path = f"where[{j}]"
        _expect(cond, dict, "a condition object", path)
        _keys(cond, {"left", "op", "right"}, set(), path)
        op = _expect(cond["op"], str, "an operator", f"{path}.op")
        conditions.append(Condition(_operand(cond["left"], f"{path}.left"), op,
                                    _operand(cond["right"], f"{path}.right")))
    return tuple(conditions)


def _operand(raw: Any, path: str) -> Operand:
    _expect(raw, dict, "an operand object ({\"var\", \"attr\"}, {\"agg\", \"var\"} or {\"value\"})", path)
    if "value" in raw:
        _keys(raw, {"value"}, set(), path)
        value = raw["value"]
        if value is not None and not isinstance(value, str | int | float | bool):
            raise _shape_error(f"expected a string, number, boolean or null, got {_json_type(value)}",
                               f"{path}.value")
        out_of_range = isinstance(value, int) and not lexical.INT_MIN <= value <= lexical.INT_MAX
        if out_of_range and not isinstance(value, bool):
            raise _shape_error("integer outside the signed 64-bit range", f"{path}.value")
        return Literal(value)
    if "agg" in raw:
        _keys(raw, {"agg", "var"}, {"attr", "before"}, path)
        func = _expect(raw["agg"], str, "an aggregate name", f"{path}.agg")
        var = _expect(raw["var"], str, "a variable name", f"{path}.var")
        attr = raw.get("attr")
        if attr is not None:
            _expect(attr, str, "an attribute name or null (count)", f"{path}.attr")
        before = _expect(raw.get("before", False), bool, "true or false", f"{path}.before")
        return Aggregate(func, var, attr, before)
    if "run" in raw:
        _keys(raw, {"var", "attr", "run"}, set(), path)
        end = _expect(raw["run"], str, "'first' or 'last'", f"{path}.run")
        if end not in RUN_ENDS:
            raise _shape_error(f"unknown run end '{end}'; expected 'first' (v[1]) or 'last' (v[last])",
                               f"{path}.run")
        var = _expect(raw["var"], str, "a variable name", f"{path}.var")
        return RunEvent(var, _expect(raw["attr"], str, "an attribute name", f"{path}.attr"), end)
    _keys(raw, {"var", "attr"}, {"prev"}, path)
    var = _expect(raw["var"], str, "a variable name", f"{path}.var")
    attr = _expect(raw["attr"], str, "an attribute name", f"{path}.attr")
    prev = _expect(raw.get("prev", False), bool, "true or false", f"{path}.prev")
    return Field(var, attr, prev)


def _partition(raw: Any) -> tuple[str, ...]:
    _expect(raw, list, "an array of attribute names", "partition_by")
    return tuple(_expect(a, str, "an attribute name", f"partition_by[{j}]") for j, a in enumerate(raw))


def _within(raw: Any) -> WithinTime | WithinEvents | None:
    if raw is None:
        return None
    _expect(raw, dict, "{\"micros\": n} or {\"events\": n}", "within")
    if set(raw) == {"micros"}:
        return WithinTime(_expect(raw["micros"], int, "an integer", "within.micros"))
    if set(raw) == {"events"}:
        return WithinEvents(_expect(raw["events"], int, "an integer", "within.events"))
    raise _shape_error("expected {\"micros\": n} or {\"events\": n}", "within")


def _between(raw: Any) -> Between | None:
    if raw is None:
        return None
    _expect(raw, dict, "{\"start\": …, \"end\": …}", "between")
    _keys(raw, {"start", "end"}, set(), "between")
    return Between(_instant(raw["start"], "between.start"), _instant(raw["end"], "between.end"))


def _instant(raw: Any, path: str) -> int:
    if isinstance(raw, str):
        try:
            return temporal.iso_to_micros(raw)
        except ValueError as exc:
            raise _shape_error(str(exc), path) from None
    return _expect(raw, int, "microseconds or an ISO-8601 string", path)


def _enum(enum: type[Strategy] | type[Return], raw: Any, path: str) -> Any:
    value = _expect(raw, str, "a string", path)
    try:
        return enum(value.lower())
    except ValueError:
        valid = ", ".join(m.value for m in enum)
        raise _shape_error(f"unknown {path} '{value}'; expected one of {valid}", path) from None
