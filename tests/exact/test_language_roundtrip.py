"""Property tests: generated valid ASTs round-trip exactly through text and JSON; arbitrary and mangled text
only ever raises our own errors, with positions inside the text."""

from __future__ import annotations

import json

from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from exact.errors import SeqsketchError
from exact.query.ast import (
    AGGREGATES,
    OPERATORS,
    RUN_ENDS,
    Absent,
    Aggregate,
    AnyOf,
    Between,
    Condition,
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
from exact.query.language import from_json, load, parse, to_json, to_text
from exact.query.language.checks import minimum_events
from exact.query.language.lexical import RESERVED_NAMES
from exact.query.language.temporal import (
    MAX_TIME_MICROS,
    MAX_WITHIN_EVENTS,
    MAX_WITHIN_MICROS,
    MIN_TIME_MICROS,
    duration_micros,
    format_duration,
)
from tests.generators import scaled

# Any text a user could put in quotes (lone surrogates cannot be encoded, so no event type holds one).
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
_IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_:]{0,6}", fullmatch=True)
_NAMES = _IDENT.filter(lambda n: n.lower() not in RESERVED_NAMES)
_TYPES = st.one_of(st.none(), _IDENT, _TEXT, st.sampled_from(["W_Completeren aanvraag", "A_SUBMITTED", "Or"]))
_ATTRS = st.one_of(_IDENT, _TEXT, st.sampled_from(["type", "ts", "seq", "case", "org:resource", "not"]))
_INT64 = st.integers(-(2**63), 2**63 - 1)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_SCALARS = st.one_of(st.none(), st.booleans(), _INT64, _FLOATS, _TEXT)


@st.composite
def _elements(draw: st.DrawFn) -> list[tuple[str, list[bool]]]:
    """Element kinds with the Kleene flags of their variables: first positive, no two NOTs in a row."""
    count = draw(st.integers(1, 5))
    shapes: list[tuple[str, list[bool]]] = []
    for k in range(count):
        kinds = ["single", "set", "or"] + (["not"] if k > 0 and shapes[-1][0] != "not" else [])
        kind = draw(st.sampled_from(kinds))
        size = 1 if kind == "single" else draw(st.integers(1 if kind == "not" else 2, 3))
        flags = st.lists(st.booleans(), min_size=size, max_size=size)
        kleene = [False] * size if kind == "not" else draw(flags)
        shapes.append((kind, kleene))
    return shapes


def _build_element(kind: str, variables: tuple[Var, ...]):
    return {"single": lambda: Single(variables[0]), "set": lambda: EventSet(variables),
            "or": lambda: AnyOf(variables), "not": lambda: Absent(variables)}[kind]()


@st.composite
def _condition(draw: st.DrawFn, variables: list[Var], negated: set[str],
               alternatives: list[set[str]]) -> Condition:
    """One condition that the checks accept, drawn from the shapes the language allows."""
    op = draw(st.sampled_from(OPERATORS))
    var = draw(st.sampled_from(variables))
    run_shapes = ["prev", "run_end", "aggregate", "aggregate", "before", "before"]  # several functions each
    shape = draw(st.sampled_from(["literal", "field"] + (run_shapes if var.kleene else [])))
    if shape in ("run_end", "aggregate", "before"):
        return draw(_run_condition(var, variables, negated, alternatives, shape, op))
    if shape == "prev":
        attr = draw(_ATTRS.filter(lambda a: a not in ("type", "ts", "seq")))
        other = Field(var.name, draw(_ATTRS.filter(lambda a: a not in ("type", "ts", "seq"))))
        return Condition(Field(var.name, attr, prev=True), op, other)
    if shape == "field":
        partner = draw(st.sampled_from(variables))
        both_negated = partner.name != var.name and {partner.name, var.name} <= negated
        same_or = partner.name != var.name and any({partner.name, var.name} <= g for g in alternatives)
        if both_negated or same_or:
            partner = var
        attrs = _ATTRS.filter(lambda a: a not in ("type", "ts", "seq"))
        return Condition(Field(var.name, draw(attrs)), op, Field(partner.name, draw(attrs)))
    attr = draw(_ATTRS)
    if attr == "type":
        value = draw(_TEXT)
    elif attr in ("ts", "seq"):
        value = draw(st.one_of(_INT64, st.integers(MIN_TIME_MICROS, MAX_TIME_MICROS)))
    elif op in ("=", "!="):
        value = draw(st.one_of(st.booleans(), st.none(), _SCALARS))
    else:
        value = draw(st.one_of(_INT64, _FLOATS, _TEXT))
    field, literal = Field(var.name, attr), Literal(value)
    return Condition(field, op, literal) if draw(st.booleans()) else Condition(literal, op, field)


_PLAIN_ATTRS = _ATTRS.filter(lambda a: a not in ("type", "ts", "seq"))
_NUMBERS = st.one_of(_INT64, _FLOATS)


@st.composite
def _run_condition(draw: st.DrawFn, var: Var, variables: list[Var], negated: set[str],
                   alternatives: list[set[str]], shape: str, op: str) -> Condition:
    """A condition over the run of Kleene variable ``var``: ``var[1]``/``var[last]``, an aggregate over the
    whole run (against a literal, another variable's field or another aggregate), or one over
    ``var[..i-1]`` against ``var[i]``."""
    if shape == "before":
        func = draw(st.sampled_from(["sum", "avg", "min", "max"]))
        agg = Aggregate(func, var.name, draw(_PLAIN_ATTRS), before=True)
        current = Field(var.name, draw(_PLAIN_ATTRS))
        return Condition(current, op, agg) if draw(st.booleans()) else Condition(agg, op, current)
    if shape == "run_end":
        operand: Operand = RunEvent(var.name, draw(_PLAIN_ATTRS), draw(st.sampled_from(RUN_ENDS)))
    else:
        func = draw(st.sampled_from(AGGREGATES))
        operand = Aggregate(func, var.name, None if func == "count" else draw(_PLAIN_ATTRS))
    partners = [v for v in variables if v.name != var.name and not any({v.name, var.name} <= g
                                                                        for g in alternatives)]
    other_kind = draw(st.sampled_from(["literal", "field"] + (["first"] if shape == "run_end" else [])))
    if other_kind == "first" and operand.end == "first":  # type: ignore[union-attr]
        other: Operand = Field(var.name, draw(_PLAIN_ATTRS))  # var[i].x against var[1].y
    elif other_kind == "field" and partners:
        other = Field(draw(st.sampled_from(partners)).name, draw(_PLAIN_ATTRS))
    elif isinstance(operand, Aggregate) or op not in ("=", "!="):
        other = Literal(draw(_NUMBERS if isinstance(operand, Aggregate) else st.one_of(_NUMBERS, _TEXT)))
    else:
        other = Literal(draw(_SCALARS))
    return Condition(operand, op, other) if draw(st.booleans()) else Condition(other, op, operand)


@st.composite
def queries(draw: st.DrawFn) -> Query:
    """Valid Query ASTs: what the checks accept, over the whole language."""
    shapes = draw(_elements())
    total = sum(len(k) for _, k in shapes)
    names = draw(st.lists(_NAMES, min_size=total, max_size=total, unique=True))
    types = iter(draw(st.lists(_TYPES, min_size=total, max_size=total)))
    name_iter = iter(names)
    pattern = []
    for kind, kleene in shapes:
        variables = tuple(Var(next(name_iter), next(types), flag) for flag in kleene)
        pattern.append(_build_element(kind, variables))
    variables = [v for e in pattern for v in e.vars]
    negated = {v.name for e in pattern if isinstance(e, Absent) for v in e.vars}
    alternatives = [{v.name for v in e.vars} for e in pattern if isinstance(e, AnyOf)]
    where = tuple(draw(st.lists(_condition(variables, negated, alternatives), max_size=4)))
    partition_by = tuple(draw(st.lists(_ATTRS, max_size=3, unique=True)))
    probe = Query(pattern=tuple(pattern))
    needed = minimum_events(probe)
    within = draw(st.one_of(
        st.builds(WithinTime, st.integers(1, MAX_WITHIN_MICROS)),
        st.builds(WithinEvents, st.integers(max(needed, 1), MAX_WITHIN_EVENTS)),
        st.none() if not isinstance(pattern[-1], Absent) else st.nothing(),
    ))
    between = draw(st.one_of(st.none(), st.tuples(st.integers(MIN_TIME_MICROS, MAX_TIME_MICROS),
                                                  st.integers(MIN_TIME_MICROS, MAX_TIME_MICROS))
                             .map(lambda p: Between(min(p), max(p)))))
    strategies = [s for s in Strategy if partition_by or s is not Strategy.PARTITION_CONTIGUITY]
    return Query(pattern=tuple(pattern), where=where, partition_by=partition_by, within=within,
                 between=between, strategy=draw(st.sampled_from(strategies)),
                 returns=draw(st.sampled_from([r for r in Return if partition_by or r is not Return.CASES])))


def _exact(query: Query) -> str:
    """A type-exact fingerprint: dataclass equality says 1 == 1.0 == True, JSON text does not."""
    return json.dumps(to_json(query), sort_keys=True)


@scaled(150)
@given(queries())
def test_text_round_trip_is_exact(query):
    text = to_text(query)
    again = parse(text)
    assert again == query
    assert _exact(again) == _exact(query)
    assert to_text(again) == text


@scaled(150)
@given(queries())
def test_json_round_trip_is_exact(query):
    obj = to_json(query)
    assert from_json(obj) == query
    assert _exact(from_json(obj)) == _exact(query)
    through_text = load(json.dumps(obj))
    assert _exact(through_text) == _exact(query)


def constructs(query) -> set[str]:
    """The parts of the language ``query`` uses, as the coverage test below names them."""
    seen: set[str] = set()
    for element in query.pattern:
        seen.add(type(element).__name__)
    seen.update("kleene" for v in query.variables() if v.kleene)
    seen.update("any" for v in query.variables() if v.type is None)
    for cond in query.where:
        for operand in (cond.left, cond.right):
            if isinstance(operand, Field):
                seen.add("prev" if operand.prev else "field")
            elif isinstance(operand, RunEvent):
                seen.add("run:" + operand.end)
            elif isinstance(operand, Aggregate):
                seen.add("agg:" + operand.func + (" before" if operand.before else ""))
            else:
                seen.add("literal:" + type(operand.value).__name__)
    seen.add(type(query.within).__name__)
    seen.add("between" if query.between else "no-between")
    seen.add(query.strategy.value)
    return seen


def test_the_generator_covers_every_construct():
    """Guard against a strategy that silently stops producing some part of the language: each part is
    searched for on its own (a shared sample of a fixed size misses a rare part now and then)."""
    expected = {"Single", "EventSet", "AnyOf", "Absent", "kleene", "any", "prev", "field", "literal:str",
                "literal:int", "literal:float", "literal:bool", "literal:NoneType", "WithinTime",
                "WithinEvents", "NoneType", "between", "no-between", "run:first", "run:last"} | {
        s.value for s in Strategy} | {"agg:" + f for f in AGGREGATES} | {
        f"agg:{f} before" for f in ("sum", "avg", "min", "max")}
    for part in sorted(expected):
        found = find(queries(), lambda q, part=part: part in constructs(q),
                     settings=settings(max_examples=5000, database=None, derandomize=True,
                                       phases=[Phase.generate]))
        assert part in constructs(found)


@given(st.integers(1, 10**9), st.sampled_from(["ms", "s", "sec", "min", "h", "hour", "d", "day", "days"]))
def test_durations_scale_by_the_unit_definition(count, unit):
    scale = {"ms": 10**3, "s": 10**6, "sec": 10**6, "min": 60 * 10**6, "h": 3600 * 10**6,
             "hour": 3600 * 10**6, "d": 86400 * 10**6, "day": 86400 * 10**6, "days": 86400 * 10**6}[unit]
    assert duration_micros(str(count), unit) == count * scale


@given(st.integers(1, MAX_WITHIN_MICROS))
def test_printed_durations_read_back(micros):
    number, unit = format_duration(micros).split()
    assert duration_micros(number, unit) == micros


# --------------------------------------------------------------------------------------------- robustness

_ALPHABET = st.sampled_from(list("PATTERNSEQWHEREANDORNOTANYabcAB (){}[],.+-'\"=<>!0123456789_:\n\t@%éil"))


@scaled(400)
@given(st.text(_ALPHABET, max_size=80))
def test_arbitrary_text_raises_only_our_errors(text):
    try:
        query = parse(text)
    except SeqsketchError as error:
        _assert_position_inside(error, text)
    else:  # what it accepts is a query that prints back to itself
        assert parse(to_text(query)) == query


_SEED_TEXTS = [
    "PATTERN SEQ(Shelf a, NOT(Register b), Exit c) WHERE a.tag_id = b.tag_id AND a.tag_id = c.tag_id "
    "WITHIN 12 hours",
    "PATTERN SEQ({C c, P+ p, D d}, B b) WHERE c.PID = p.PID AND prev(p.V) < p.V WITHIN 15 days",
    "PATTERN SEQ(A_SUBMITTED a, OR(O_SELECTED s, O_DECLINED d), 'W_Completeren aanvraag'+ w) "
    "PARTITION BY case BETWEEN '2011-10-01' AND '2012-03-15' STRATEGY partition_contiguity RETURN count",
    "PATTERN SEQ(Stock+ a, Stock b) WHERE a[1].volume > 1000 AND a[i].price > avg(a[..i-1].price) "
    "AND b.volume < a[last].volume AND count(a) >= 3 PARTITION BY symbol WITHIN 1 hour",
]


@scaled(400)
@given(st.sampled_from(_SEED_TEXTS), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 3), _ALPHABET),
                                              min_size=1, max_size=4))
def test_mangled_queries_raise_only_our_errors(seed, edits):
    text = seed
    for position, length, char in edits:
        position %= len(text) + 1
        text = text[:position] + char + text[position + length:]
    try:
        query = parse(text)
    except SeqsketchError as error:
        _assert_position_inside(error, text)
    else:
        assert parse(to_text(query)) == query


def _assert_position_inside(error: SeqsketchError, text: str) -> None:
    assert error.line is not None and error.column is not None, str(error)
    lines = text.split("\n")
    assert 1 <= error.line <= len(lines), str(error)
    assert 1 <= error.column <= len(lines[error.line - 1]) + 1, str(error)
