"""The query language: every construct of docs/contract.md §2 parses to the AST it means, in text and JSON form."""

from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

import pytest

from exact.query.ast import (
    AST_VERSION,
    Absent,
    Aggregate,
    AnyOf,
    Between,
    Condition,
    EventSet,
    Field,
    Literal,
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
from exact.query.language.lexical import assign_default_names, default_name_base

HOUR = 3_600_000_000
DAY = 24 * HOUR


def test_seq_of_single_variables_with_explicit_names():
    q = parse("PATTERN SEQ(Shelf a, Exit c)")
    assert q == Query(pattern=(Single(Var("a", "Shelf")), Single(Var("c", "Exit"))))


def test_a_single_element_pattern_needs_no_seq():
    assert parse("PATTERN A_SUBMITTED").pattern == (Single(Var("a_submitted", "A_SUBMITTED")),)


def test_event_set_in_braces_and_as_and_are_the_same():
    braces = parse("PATTERN SEQ({C c, P+ p, D d}, B b)")
    conj = parse("PATTERN SEQ(AND(C c, P+ p, D d), B b)")
    assert braces == conj
    assert braces.pattern[0] == EventSet((Var("c", "C"), Var("p", "P", kleene=True), Var("d", "D")))


def test_kleene_or_not_and_any():
    q = parse("PATTERN SEQ(A+ a, OR(B b, C+ c), NOT(D d, E e), ANY x) WITHIN 5 EVENTS")
    assert q.pattern == (
        Single(Var("a", "A", kleene=True)),
        AnyOf((Var("b", "B"), Var("c", "C", kleene=True))),
        Absent((Var("d", "D"), Var("e", "E"))),
        Single(Var("x", None)),
    )


def test_keywords_are_case_insensitive():
    lower = parse("pattern seq(A a, not(B b), C c) where a.x = 1 and b.x = a.x partition by case "
                  "within 1 h between '2012-01-01' and '2012-02-01' strategy skip_till_any_match "
                  "return count")
    upper = parse("PATTERN SEQ(A a, NOT(B b), C c) WHERE a.x = 1 AND b.x = a.x PARTITION BY case "
                  "WITHIN 1 H BETWEEN '2012-01-01' AND '2012-02-01' STRATEGY SKIP_TILL_ANY_MATCH "
                  "RETURN COUNT")
    assert lower == upper
    assert lower.strategy is Strategy.SKIP_TILL_ANY_MATCH and lower.returns is Return.COUNT


def test_names_are_case_sensitive_and_types_keep_their_spelling():
    q = parse("PATTERN SEQ(Order o, order O) WHERE o.x = O.x")
    assert [(v.name, v.type) for v in q.variables()] == [("o", "Order"), ("O", "order")]


def test_default_names_are_lower_cased_types_with_suffixes_on_repeats():
    q = parse("PATTERN SEQ(A, B, A, ANY, ANY, A)")
    assert [v.name for v in q.variables()] == ["a", "b", "a_2", "any", "any_2", "a_3"]


def test_default_names_skip_explicit_names():
    q = parse("PATTERN SEQ(A, B a, A)")
    assert [v.name for v in q.variables()] == ["a_2", "a", "a_3"]


@pytest.mark.parametrize(("type_name", "expected"), [
    ("W_Completeren aanvraag", "w_completeren_aanvraag"),
    ("A - B", "a_b"),
    ("Überprüfung", "uberprufung"),
    ("404", "v_404"),
    ("!!", "_"),
    ("where", "v_where"),
    ("concept:name", "concept_name"),
])
def test_default_name_of_odd_types_is_a_valid_identifier(type_name, expected):
    assert default_name_base(type_name) == expected
    q = parse(f"PATTERN SEQ(X, '{type_name}') WHERE {expected}.amount > 0")
    assert q.pattern[1].var.name == expected


def test_default_names_follow_the_definition():
    """Reference from the rule: explicit names kept; each unnamed one the first free of base, base_2 …"""
    declared = [("A", None), ("A", "a_2"), ("A", None), (None, None), ("B", "any"), (None, None), ("A", None)]
    names = assign_default_names(declared)
    assert len(set(names)) == len(names)
    taken: set[str] = {n for _, n in declared if n}
    for (type_name, explicit), name in zip(declared, names, strict=True):
        if explicit:
            assert name == explicit
            continue
        base = default_name_base(type_name)
        candidates = [base] + [f"{base}_{k}" for k in range(2, 20)]
        assert name == next(c for c in candidates if c not in taken)
        taken.add(name)


def test_quoted_types_with_spaces_and_both_quote_styles():
    q = parse("""PATTERN SEQ('W_Completeren aanvraag' w, "O_SENT_BACK" s, 'it\\'s' i)""")
    assert [v.type for v in q.variables()] == ["W_Completeren aanvraag", "O_SENT_BACK", "it's"]


def test_identifiers_may_hold_underscores_digits_and_colons():
    q = parse("PATTERN SEQ(A_1 a1, B:2 b_2) WHERE a1.org:resource = b_2.org:resource "
              "PARTITION BY org:resource")
    assert q.where[0] == Condition(Field("a1", "org:resource"), "=", Field("b_2", "org:resource"))
    assert q.partition_by == ("org:resource",)


def test_keywords_are_plain_names_after_a_dot_and_any_is_a_variable_name():
    q = parse("PATTERN SEQ(A x, B any) WHERE x.not = any.where AND x.seq < any.seq")
    assert q.where[0] == Condition(Field("x", "not"), "=", Field("any", "where"))
    assert q.where[1].left == Field("x", "seq") and q.where[1].left.builtin


def test_a_keyword_as_type_needs_quotes():
    q = parse("PATTERN SEQ('Or' o, 'ANY' a)")
    assert [v.type for v in q.variables()] == ["Or", "ANY"]


@pytest.mark.parametrize(("text", "value"), [
    ("'text'", "text"), ('"double"', "double"), ("42", 42), ("-7", -7), ("2.5", 2.5), ("-1.5e3", -1500.0),
    ("1e2", 100.0), ("true", True), ("FALSE", False), ("null", None), ("'a\\nb\\t\\u00e9'", "a\nb\té"),
    ("9223372036854775807", 2**63 - 1),
])
def test_literals(text, value):
    cond = parse(f"PATTERN A a WHERE a.x = {text}").where[0]
    assert cond.right == Literal(value)
    assert type(cond.right.value) is type(value)


def test_all_operators_and_their_alternative_spellings():
    spellings = ("=", "==", "!=", "<>", "<", "<=", ">", ">=")
    ops = [parse(f"PATTERN A a WHERE a.x {op} 1").where[0].op for op in spellings]
    assert ops == ["=", "=", "!=", "!=", "<", "<=", ">", ">="]


def test_conditions_on_builtin_fields_prev_and_variables():
    q = parse("PATTERN SEQ(Alert a, Shipment+ b) WHERE a.type = 'Alert' AND b.from = a.site "
              "AND prev(b.to) = b.from AND a.seq >= 10")
    assert q.where == (
        Condition(Field("a", "type"), "=", Literal("Alert")),
        Condition(Field("b", "from"), "=", Field("a", "site")),
        Condition(Field("b", "to", prev=True), "=", Field("b", "from")),
        Condition(Field("a", "seq"), ">=", Literal(10)),
    )


def test_ts_compared_with_an_iso_string_becomes_utc_microseconds():
    q = parse("PATTERN A a WHERE a.ts >= '2011-10-01T00:38:44.546+02:00' AND '2012-01-01' > a.ts")
    assert q.where[0].right == Literal(1317422324546000)
    assert q.where[1].left == Literal(1325376000000000)


def test_ts_compared_with_integer_microseconds_is_kept():
    assert parse("PATTERN A a WHERE a.ts < 5").where[0].right == Literal(5)


@pytest.mark.parametrize(("text", "micros"), [
    ("250 ms", 250_000), ("1 s", 1_000_000), ("3 sec", 3_000_000), ("3 secs", 3_000_000),
    ("90 min", 90 * 60_000_000), ("2 mins", 2 * 60_000_000), ("12 h", 12 * HOUR), ("12 hours", 12 * HOUR),
    ("1 hour", HOUR), ("15 d", 15 * DAY), ("1 day", DAY), ("15 days", 15 * DAY), ("15d", 15 * DAY),
    ("0.5 s", 500_000), ("1.5 h", 90 * 60_000_000), ("0.001 ms", 1), ("2 SECONDS", 2_000_000),
    ("3 mss", 3_000), ("3 ss", 3_000_000), ("2 hs", 2 * HOUR), ("2 ds", 2 * DAY), ("5 MIN", 300_000_000),
])
def test_durations_become_microseconds(text, micros):
    assert parse(f"PATTERN SEQ(A a, B b) WITHIN {text}").within == WithinTime(micros)


def test_within_events():
    assert parse("PATTERN SEQ(A a, B b) WITHIN 10 EVENTS").within == WithinEvents(10)
    assert parse("PATTERN A a WITHIN 1 event").within == WithinEvents(1)


def test_between_takes_iso_times_naive_ones_as_utc():
    q = parse("PATTERN A a BETWEEN '2011-10-01' AND '2011-10-01T02:00:00+02:00'")
    assert q.between == Between(1317427200000000, 1317427200000000)


def test_partition_by_several_attributes_and_quoted_ones():
    q = parse("PATTERN SEQ(A a, B b) PARTITION BY case, 'odd attr' STRATEGY partition_contiguity")
    assert q.partition_by == ("case", "odd attr")
    assert q.strategy is Strategy.PARTITION_CONTIGUITY


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy(strategy):
    partition = " PARTITION BY case" if strategy is Strategy.PARTITION_CONTIGUITY else ""
    assert parse(f"PATTERN SEQ(A a, B b){partition} STRATEGY {strategy.value}").strategy is strategy


@pytest.mark.parametrize("mode", list(Return))
def test_every_return_mode(mode):
    # (a case is a value of PARTITION BY: RETURN cases needs one)
    assert parse(f"PATTERN A a PARTITION BY case RETURN {mode.value}").returns is mode


def test_defaults():
    q = parse("PATTERN A a")
    assert (q.where, q.partition_by, q.within, q.between) == ((), (), None, None)
    assert q.strategy is Strategy.SKIP_TILL_NEXT_MATCH and q.returns is Return.MATCHES


def test_comments_and_line_breaks_are_ignored():
    q = parse("-- shoplifting\nPATTERN SEQ(Shelf a,   -- first\n  NOT(Register b), Exit c)\n"
              "WITHIN 12 hours -- end")
    assert [v.name for v in q.variables()] == ["a", "b", "c"]


def test_conditions_on_a_negated_variable_may_reference_other_elements():
    q = parse("PATTERN SEQ(Shelf a, NOT(Register b), Exit c) WHERE a.tag_id = b.tag_id "
              "AND a.tag_id = c.tag_id WITHIN 12 hours")
    assert q.where[0] == Condition(Field("a", "tag_id"), "=", Field("b", "tag_id"))


def test_negation_last_is_allowed_with_a_window():
    for window in ("1 h", "5 EVENTS"):
        q = parse(f"PATTERN SEQ(O_SELECTED o, NOT(O_DECLINED d)) WITHIN {window}")
        assert isinstance(q.pattern[-1], Absent)


# ------------------------------------------------------------------------------------------- canonical text


def test_canonical_text_of_a_full_query():
    q = parse("pattern seq(A_SUBMITTED, {O_SELECTED, 'W_Completeren aanvraag'+ w}, not(O_DECLINED)) "
              "where o_selected.ts > '2012-01-01' and prev(w.x) < w.x partition by case within 30 days "
              "between '2011-10-01' and '2012-03-15' strategy skip_till_any_match return intervals")
    assert to_text(q) == (
        "PATTERN SEQ(A_SUBMITTED a_submitted, {O_SELECTED o_selected, 'W_Completeren aanvraag'+ w}, "
        "NOT(O_DECLINED o_declined))\n"
        "WHERE o_selected.ts > '2012-01-01T00:00:00+00:00' AND prev(w.x) < w.x\n"
        "PARTITION BY case\n"
        "WITHIN 30 days\n"
        "BETWEEN '2011-10-01T00:00:00+00:00' AND '2012-03-15T00:00:00+00:00'\n"
        "STRATEGY skip_till_any_match\n"
        "RETURN intervals"
    )
    assert parse(to_text(q)) == q


@pytest.mark.parametrize(("micros", "text"), [
    (DAY, "1 day"), (2 * DAY, "2 days"), (HOUR, "1 hour"), (36 * HOUR, "36 hours"), (60_000_000, "1 min"),
    (1_000_000, "1 s"), (1_500_000, "1500 ms"), (1, "0.001 ms"), (1_234_567, "1234.567 ms"),
])
def test_canonical_durations(micros, text):
    q = Query(pattern=(Single(Var("a", "A")),), within=WithinTime(micros))
    assert to_text(q) == f"PATTERN A a\nWITHIN {text}"
    assert parse(to_text(q)) == q


def test_printer_quotes_keyword_types_and_odd_attributes():
    q = Query(pattern=(Single(Var("a", "NOT")), Single(Var("b", "x y"))),
              where=(Condition(Field("a", "my attr"), "=", Field("b", "not")),), partition_by=("a b",))
    text = to_text(q)
    assert text == "PATTERN SEQ('NOT' a, 'x y' b)\nWHERE a.'my attr' = b.not\nPARTITION BY 'a b'"
    assert parse(text) == q


# ------------------------------------------------------------------------------------------------ JSON form


def test_json_form_is_versioned_and_complete():
    q = parse("PATTERN SEQ(A a, OR(B b, C+ c), NOT(D d), {E e, F f}) WHERE a.x = 'y' AND prev(c.v) < c.v "
              "PARTITION BY case WITHIN 9 EVENTS BETWEEN '1970-01-01' AND '1970-01-02' RETURN exists")
    obj = to_json(q)
    assert obj == {
        "version": AST_VERSION,
        "pattern": [
            {"kind": "var", "vars": [{"name": "a", "type": "A", "kleene": False}]},
            {"kind": "or", "vars": [{"name": "b", "type": "B", "kleene": False},
                                    {"name": "c", "type": "C", "kleene": True}]},
            {"kind": "not", "vars": [{"name": "d", "type": "D", "kleene": False}]},
            {"kind": "set", "vars": [{"name": "e", "type": "E", "kleene": False},
                                     {"name": "f", "type": "F", "kleene": False}]},
        ],
        "where": [
            {"left": {"var": "a", "attr": "x", "prev": False}, "op": "=", "right": {"value": "y"}},
            {"left": {"var": "c", "attr": "v", "prev": True}, "op": "<", "right": {"var": "c", "attr": "v",
                                                                                    "prev": False}},
        ],
        "partition_by": ["case"],
        "within": {"events": 9},
        "between": {"start": 0, "end": DAY},
        "strategy": "skip_till_next_match",
        "returns": "exists",
    }
    assert from_json(obj) == q
    assert from_json(json.loads(json.dumps(obj))) == q


def test_json_form_fills_defaults_and_default_names():
    q = from_json({"version": 1, "pattern": [{"kind": "var", "vars": [{"type": "A"}]},
                                             {"kind": "var", "vars": [{"type": "A"}]},
                                             {"kind": "var", "vars": [{"type": None, "kleene": True}]}]})
    assert q == parse("PATTERN SEQ(A, A, ANY+)")


def test_json_form_accepts_iso_times_and_ts_strings():
    q = from_json({"version": 1, "pattern": [{"kind": "var", "vars": [{"name": "a", "type": "A"}]}],
                   "where": [{"left": {"var": "a", "attr": "ts"}, "op": ">",
                              "right": {"value": "2012-01-01"}}],
                   "between": {"start": "2011-10-01", "end": 1325376000000000}})
    assert q == parse("PATTERN A a WHERE a.ts > '2012-01-01' BETWEEN '2011-10-01' AND '2012-01-01'")


def test_load_takes_text_json_text_or_a_dict():
    text = "PATTERN SEQ(A a, B+ b) WHERE prev(b.v) < b.v WITHIN 1 h"
    q = parse(text)
    assert load(text) == q
    assert load(to_json(q)) == q
    assert load("  \n" + json.dumps(to_json(q), indent=2)) == q


# ------------------------------------------------------------------------------------------- real data


_VALUE = re.compile(r'value="([^"]*)"')


def _event_types(path: Path) -> list[str]:
    """The ``concept:name`` of every ``<event>`` of an XES log (the event type, docs/contract.md §1)."""
    opener = gzip.open if path.suffix == ".gz" else open
    names: set[str] = set()
    in_event = False
    with opener(path, "rt", encoding="utf-8") as stream:
        for line in stream:
            if "<event" in line:
                in_event = True
            elif "</event>" in line:
                in_event = False
            elif in_event and 'key="concept:name"' in line:
                names.add(html.unescape(_VALUE.search(line).group(1)))
    return sorted(names)


def test_every_bpi_2012_event_type_reads_back_and_gets_a_usable_default_name(shared_data: Path):
    types = _event_types(shared_data / "bpic2012.xes.gz")
    assert len(types) == 24
    for type_name in types:
        q = Query(pattern=(Single(Var(default_name_base(type_name), type_name)),))
        assert parse(to_text(q)) == q
        quoted = "'" + type_name + "'"
        assert parse(f"PATTERN {quoted}").pattern == q.pattern
    everything = parse("PATTERN SEQ(" + ", ".join("'" + t + "'" for t in types) + ") PARTITION BY case")
    names = [v.name for v in everything.variables()]
    assert len(set(names)) == len(types)
    assert "w_completeren_aanvraag" in names and "a_submitted" in names


def test_running_example_types_with_spaces_work_unquoted_nowhere_and_quoted_everywhere(shared_data: Path):
    types = _event_types(shared_data / "running-example.xes")
    assert "register request" in types
    text = "PATTERN SEQ(" + ", ".join(f"'{t}'" for t in types) + ") PARTITION BY case WITHIN 30 days"
    query = parse(text)
    assert [v.type for v in query.variables()] == types
    assert all(" " not in v.name for v in query.variables())
    assert parse(to_text(query)) == query


# ------------------------------------------------------------------ SASE+ run operands and aggregates


def test_run_indexes_and_aggregates_parse_to_their_ast():
    q = parse("PATTERN SEQ(Stock+ a, Stock b) WHERE a[i].price > avg(a[..i-1].price) AND a[1].volume > 1000 "
              "AND a[i-1].price < a[i].price AND b.volume < a[last].volume AND count(a) >= 3 "
              "AND max(a.price) < b.price AND sum(a.volume) != 0 AND min(a[..i-1].price) <= a.price")
    assert q.where == (
        Condition(Field("a", "price"), ">", Aggregate("avg", "a", "price", before=True)),
        Condition(RunEvent("a", "volume", "first"), ">", Literal(1000)),
        Condition(Field("a", "price", prev=True), "<", Field("a", "price")),
        Condition(Field("b", "volume"), "<", RunEvent("a", "volume", "last")),
        Condition(Aggregate("count", "a"), ">=", Literal(3)),
        Condition(Aggregate("max", "a", "price"), "<", Field("b", "price")),
        Condition(Aggregate("sum", "a", "volume"), "!=", Literal(0)),
        Condition(Aggregate("min", "a", "price", before=True), "<=", Field("a", "price")),
    )


def test_v_i_is_v_and_v_i_minus_1_is_prev():
    """One meaning, one AST: the SASE+ spellings and the short ones parse alike."""
    sase = parse("PATTERN SEQ(A a, B+ b) WHERE b[i].from = b[i-1].to AND b[i].x > 1")
    short = parse("PATTERN SEQ(A a, B+ b) WHERE b.from = prev(b.to) AND b.x > 1")
    assert sase == short


def test_function_names_and_run_words_are_case_insensitive_and_stay_usable_as_names():
    q = parse("PATTERN SEQ(A+ count, B sum) WHERE COUNT(count) > 1 AND Avg(count[..I-1].x) < count[ I ].x "
              "AND count[LAST].x = sum.x AND count.last = 1 RETURN count")
    assert q.where[0] == Condition(Aggregate("count", "count"), ">", Literal(1))
    assert q.where[1] == Condition(Aggregate("avg", "count", "x", before=True), "<", Field("count", "x"))
    assert q.where[2] == Condition(RunEvent("count", "x", "last"), "=", Field("sum", "x"))
    assert q.where[3] == Condition(Field("count", "last"), "=", Literal(1))  # v.last is the attribute 'last'
    assert q.returns is Return.COUNT


def test_run_operands_on_builtin_fields_and_times():
    q = parse("PATTERN SEQ(A+ a, B b) WHERE min(a.ts) >= '2012-01-01' AND a[last].type = 'A' "
              "AND max(a.seq) < b.seq AND avg(a.ts) < 1.5")
    assert q.where[0].right == Literal(1325376000000000)
    assert q.where[3].right == Literal(1.5)
    assert "min(a.ts) >= '2012-01-01T00:00:00+00:00'" in to_text(q)


def test_canonical_text_writes_the_current_event_as_in_sase():
    q = parse("PATTERN SEQ(Stock+ a, Stock b) WHERE a.price > avg(a[..i-1].price) AND a.s = a[1].s "
              "AND a[i].v > 3 AND a[i-1].p < a[i].p AND count(a) >= 2")
    assert to_text(q).splitlines()[1] == ("WHERE a[i].price > avg(a[..i-1].price) AND a[i].s = a[1].s "
                                          "AND a.v > 3 AND prev(a.p) < a.p AND count(a) >= 2")
    assert parse(to_text(q)) == q


def test_json_form_of_run_operands():
    q = parse("PATTERN SEQ(A+ a, B b) WHERE a[i].x > avg(a[..i-1].x) AND a[1].y = b.y AND count(a) < 4")
    where = to_json(q)["where"]
    assert where[0]["right"] == {"agg": "avg", "var": "a", "attr": "x", "before": True}
    assert where[1]["left"] == {"var": "a", "attr": "y", "run": "first"}
    assert where[2]["left"] == {"agg": "count", "var": "a", "attr": None, "before": False}
    assert from_json(to_json(q)) == q
    assert to_json(q)["version"] == AST_VERSION == 1  # an addition: every older JSON query still reads
    terse = {"version": 1, "pattern": [{"kind": "var", "vars": [{"name": "a", "type": "A", "kleene": True}]}],
             "where": [{"left": {"agg": "count", "var": "a"}, "op": ">", "right": {"value": 1}},
                       {"left": {"agg": "max", "var": "a", "attr": "x"}, "op": "<",
                        "right": {"var": "a", "attr": "x", "run": "last"}}]}
    assert from_json(terse).where == (Condition(Aggregate("count", "a"), ">", Literal(1)),
                                      Condition(Aggregate("max", "a", "x"), "<", RunEvent("a", "x", "last")))
