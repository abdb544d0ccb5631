"""Every mistake a user can make in a query is refused with our error, its line and column, and what was
expected; no Lark exception and no traceback-worthy exception escapes."""

from __future__ import annotations

import json

import pytest

from exact.errors import QueryLimitError, QuerySemanticError, QuerySyntaxError, SeqsketchError
from exact.query.ast import (
    Aggregate,
    Between,
    Condition,
    Field,
    Literal,
    Query,
    RunEvent,
    Single,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.language import MAX_QUERY_BYTES, MAX_VARIABLES, from_json, load, parse, to_json, to_text


def _position(text: str, marker: str, occurrence: int = 1) -> tuple[int, int]:
    """1-based line and column of the ``occurrence``-th ``marker`` in ``text``."""
    index = -1
    for _ in range(occurrence):
        index = text.index(marker, index + 1)
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _fails(text: str, cls: type[SeqsketchError], marker: str, *fragments: str, occurrence: int = 1) -> None:
    with pytest.raises(cls) as info:
        parse(text)
    error = info.value
    assert type(error) is cls
    assert (error.line, error.column) == _position(text, marker, occurrence), str(error)
    for fragment in fragments:
        assert fragment in error.message, error.message
    assert error.to_dict()["position"] == {"line": error.line, "column": error.column}


# ------------------------------------------------------------------------------------------ syntax errors


def test_missing_closing_parenthesis_says_what_was_expected_at_the_end():
    text = "PATTERN SEQ(A a, B b"
    with pytest.raises(QuerySyntaxError) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (1, len(text) + 1)
    assert info.value.message == "unexpected end of query; expected one of ',' or ')'"


def test_unexpected_token_names_the_token_and_the_expected_ones():
    _fails("PATTERN SEQ(A a, B b) WHERE a.x 3", QuerySyntaxError, "3",
           "unexpected number 3", "expected a comparison (=, !=, <, <=, >, >=)")


def test_unexpected_character_lists_only_what_the_parser_could_take():
    _fails("PATTERN SEQ(A a, B b) WHERE a.x @ 3", QuerySyntaxError, "@",
           "unexpected character '@'; expected a comparison (=, !=, <, <=, >, >=)")


def test_a_keyword_meant_as_a_type_suggests_quoting():
    _fails("PATTERN SEQ(A a, Or b)", QuerySyntaxError, "b)", "unexpected name 'b'; expected '('",
           "'Or' is read as the keyword OR; quote it")


def test_a_keyword_reads_as_a_name_where_no_keyword_can_stand():
    assert [v.type for v in parse("PATTERN SEQ(A a, where)").variables()] == ["A", "where"]


def test_pattern_keyword_is_required():
    _fails("SEQ(A a, B b)", QuerySyntaxError, "SEQ", "expected PATTERN")


def test_empty_query():
    with pytest.raises(QuerySyntaxError) as info:
        parse("   ")
    assert "unexpected end of query; expected PATTERN" in info.value.message


def test_error_position_on_a_later_line():
    text = "PATTERN SEQ(A a,\n            B b)\nWHERE a.x = 1\n  AND b.y == 2 AND"
    with pytest.raises(QuerySyntaxError) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (4, 19)
    assert "end of query" in info.value.message and "a name" in info.value.message


def test_unterminated_string():
    _fails("PATTERN A a WHERE a.x = 'abc", QuerySyntaxError, "'abc", "unterminated quoted string")


def test_bad_escape_in_a_string():
    _fails("PATTERN A a WHERE a.x = 'a\\qb'", QuerySyntaxError, "'a\\qb'", "unknown escape '\\q'")


def test_unknown_time_unit():
    _fails("PATTERN SEQ(A a, B b) WITHIN 5 fortnights", QuerySyntaxError, "fortnights",
           "unknown time unit 'fortnights'", "ms, s, sec, min, h, hour, d, day")


def test_unknown_strategy_lists_the_valid_ones():
    _fails("PATTERN SEQ(A a, B b) STRATEGY greedy", QuerySyntaxError, "greedy",
           "unknown strategy 'greedy'", "skip_till_next_match", "strict_contiguity")


def test_unknown_return_mode():
    _fails("PATTERN A a RETURN everything", QuerySyntaxError, "everything",
           "unknown RETURN 'everything'", "matches, intervals, exists, count")


def test_clauses_out_of_order():
    _fails("PATTERN SEQ(A a, B b) WITHIN 1 h WHERE a.x = 1", QuerySyntaxError, "WHERE",
           "unexpected keyword WHERE")


def test_nested_seq_is_not_allowed():
    _fails("PATTERN SEQ(A a, SEQ(B b, C c))", QuerySyntaxError, "(B", "unexpected '('",
           "SEQ(…) cannot be nested")
    _fails("PATTERN SEQ(A a, OR(B b, NOT(C c)))", QuerySyntaxError, "(C", "hold variables only")


# ---------------------------------------------------------------------------------------- semantic errors


def test_unknown_variable_in_a_condition():
    _fails("PATTERN SEQ(A a, B b) WHERE a.x = c.x", QuerySemanticError, "c.x",
           "unknown variable 'c' in condition", "declared variables (a, b)")


def test_unknown_variable_inside_prev():
    _fails("PATTERN SEQ(A+ a, B b) WHERE prev(z.x) < a.x", QuerySemanticError, "z.x", "unknown variable 'z'")


def test_variable_declared_twice():
    _fails("PATTERN SEQ(A a, {B a, C c})", QuerySemanticError, "a,", "variable 'a' is declared twice",
           occurrence=2)


def test_default_name_never_clashes_but_explicit_duplicates_do():
    assert [v.name for v in parse("PATTERN SEQ(A, B a)").variables()] == ["a_2", "a"]
    _fails("PATTERN SEQ(A x, B x)", QuerySemanticError, "x)", "declared twice")


def test_prev_on_a_non_kleene_variable():
    _fails("PATTERN SEQ(A a, B+ b) WHERE prev(a.x) < a.x", QuerySemanticError, "prev",
           "prev() needs a Kleene variable", "'a' binds a single event")


def test_prev_must_be_compared_with_the_same_variable():
    _fails("PATTERN SEQ(A a, B+ b) WHERE prev(b.x) < a.x", QuerySemanticError, "a.x",
           "prev(b.x) must be compared with a field of 'b' itself")
    _fails("PATTERN SEQ(A a, B+ b) WHERE prev(b.x) < 3", QuerySemanticError, "3", "field of 'b' itself")


def test_not_first():
    _fails("PATTERN SEQ(NOT(B b), A a)", QuerySemanticError, "NOT", "NOT cannot be the first element")
    _fails("PATTERN NOT(B b)", QuerySemanticError, "NOT", "NOT cannot be the first element")


def test_not_last_without_within():
    _fails("PATTERN SEQ(A a, NOT(B b))", QuerySemanticError, "NOT",
           "NOT at the end of a pattern needs WITHIN")


def test_two_nots_in_a_row_must_be_merged():
    _fails("PATTERN SEQ(A a, NOT(B b), NOT(C c), D d)", QuerySemanticError, "NOT(C", "merge them")


def test_kleene_inside_not():
    _fails("PATTERN SEQ(A a, NOT(B+ b), C c)", QuerySemanticError, "B+", "cannot be Kleene")


def test_partition_contiguity_without_partition_by():
    _fails("PATTERN SEQ(A a, B b) STRATEGY partition_contiguity", QuerySemanticError, "partition_contiguity",
           "partition_contiguity needs PARTITION BY")


@pytest.mark.parametrize(("condition", "marker", "fragment"), [
    ("a.type = 3", "3", "a.type is the event type, a string; cannot compare it with 3"),
    ("a.type != null", "null", "cannot compare it with null"),
    ("a.ts > true", "true", "'>' cannot order true"),
    ("a.ts = true", "true", "a.ts is a time; cannot compare it with true"),
    ("a.ts = 1.5", "1.5", "a.ts is a time"),
    ("a.ts < 'yesterday'", "'yesterday'", "'yesterday' is not an ISO-8601 time"),
    ("a.seq = 'x'", "'x'", "a.seq is the stream position, an integer"),
    ("a.seq = 2.0", "2.0", "a.seq is the stream position"),
    ("a.x < null", "null", "'<' cannot order null"),
    ("a.x >= false", "false", "'>=' cannot order false"),
])
def test_literal_type_mismatches(condition, marker, fragment):
    text = f"PATTERN SEQ(A a, B b) WHERE {condition}"
    _fails(text, QuerySemanticError, marker, fragment, occurrence=text.count(marker))


def test_builtin_fields_of_different_kinds_cannot_be_compared():
    _fails("PATTERN SEQ(A a, B b) WHERE a.type = b.ts", QuerySemanticError, "a.type",
           "cannot compare a.type (string) with b.ts (time)")


def test_ts_against_an_iso_string_is_fine():
    assert parse("PATTERN A a WHERE a.ts > '2012-01-01T00:00:00Z'").where[0].right.value == 1325376000000000


def test_a_condition_needs_a_variable():
    _fails("PATTERN SEQ(A a, B b) WHERE 1 = 1", QuerySemanticError, "1 = 1", "at least one variable field")


def test_two_alternatives_of_one_or_cannot_be_related():
    _fails("PATTERN SEQ(X x, OR(A a, B b)) WHERE a.v = b.v", QuerySemanticError, "a.v",
           "alternatives of the same OR")


def test_two_negated_variables_cannot_be_related():
    _fails("PATTERN SEQ(X x, NOT(A a, B b), Y y) WHERE a.v = b.v", QuerySemanticError, "a.v", "both negated")


def test_conditions_between_a_negated_and_a_positive_variable_are_allowed():
    q = parse("PATTERN SEQ(X x, NOT(A a), Y y) WHERE a.v = x.v AND y.v = a.v")
    assert len(q.where) == 2


@pytest.mark.parametrize(("element", "marker"), [("{A a}", "{"), ("AND(A a)", "AND"), ("OR(A a)", "OR")])
def test_set_or_or_with_one_variable(element, marker):
    _fails(f"PATTERN SEQ(X x, {element})", QuerySemanticError, marker, "needs at least two variables")


@pytest.mark.parametrize(("window", "marker", "fragment"), [
    ("0 s", "0", "positive duration"),
    ("-5 min", "-5", "positive duration"),
    ("200 years", "years", "unknown time unit"),
    ("40000 days", "40000", "longer than 100 years"),
    ("0.0000001 s", "0.0000001", "not a whole number of microseconds"),
    ("0 EVENTS", "0", "n ≥ 1"),
    ("2.5 EVENTS", "2.5", "whole number"),
    ("1 EVENTS", "1", "can never match: the pattern binds at least 2 events"),
    ("10000000000000 EVENTS", "1000", "larger than"),
])
def test_window_out_of_range(window, marker, fragment):
    text = f"PATTERN SEQ(A a, B b) WITHIN {window}"
    cls = QuerySyntaxError if fragment == "unknown time unit" else QuerySemanticError
    _fails(text, cls, marker, fragment, occurrence=text.count(marker) if marker != "1000" else 1)


def test_between_start_after_end():
    text = "PATTERN A a BETWEEN '2012-02-01' AND '2012-01-01'"
    _fails(text, QuerySemanticError, "'2012-01-01'", "BETWEEN starts after it ends")


def test_between_bad_time():
    _fails("PATTERN A a BETWEEN 'soon' AND '2012-01-01'", QuerySemanticError, "'soon'",
           "'soon' is not an ISO-8601 time")


def test_reserved_words_as_variable_names():
    _fails("PATTERN SEQ(A true, B b)", QuerySemanticError, "true", "'true' is a keyword")
    _fails("PATTERN SEQ(A prev, B b)", QuerySemanticError, "prev", "'prev' is a keyword")


def test_integer_literal_out_of_range():
    _fails("PATTERN A a WHERE a.x = 9223372036854775808", QuerySemanticError, "9223",
           "outside the signed 64-bit range")


def test_float_literal_out_of_range():
    _fails("PATTERN A a WHERE a.x = 1e999", QuerySemanticError, "1e999", "too large")


def test_empty_quoted_type():
    _fails("PATTERN SEQ(A a, '' b)", QuerySemanticError, "''", "empty event type name")


def test_duplicate_partition_attribute():
    _fails("PATTERN SEQ(A a, B b) PARTITION BY case, x, case", QuerySemanticError, "case", "'case' twice",
           occurrence=2)


# ----------------------------------------------------------------------------------------------- limits


def test_oversized_query_is_refused_before_parsing():
    text = "PATTERN A a WHERE " + " AND ".join(["a.x = 1"] * 7000)
    assert len(text) > MAX_QUERY_BYTES
    with pytest.raises(QueryLimitError) as info:
        parse(text)
    assert f"at most {MAX_QUERY_BYTES}" in info.value.message
    assert info.value.code == "query_limit"


def test_too_many_variables():
    text = "PATTERN SEQ(" + ", ".join("A" for _ in range(MAX_VARIABLES + 1)) + ")"
    with pytest.raises(QueryLimitError) as info:
        parse(text)
    assert f"{MAX_VARIABLES + 1} variables" in info.value.message
    assert (info.value.line, info.value.column) == (1, 12 + 3 * MAX_VARIABLES + 1)
    assert len(list(parse("PATTERN SEQ(" + ", ".join("A" for _ in range(MAX_VARIABLES)) + ")").variables())) \
        == MAX_VARIABLES


def test_too_many_conditions():
    text = "PATTERN A a WHERE " + " AND ".join(["a.x = 1"] * 300)
    with pytest.raises(QueryLimitError, match="300 conditions"):
        parse(text)


def test_deeply_nested_input_is_refused_not_a_recursion_error():
    for text in ["PATTERN SEQ(" + "(" * 20000, "PATTERN " + "{" * 30000, "{" * 30000,
                 '{"version": 1, "pattern": ' + "[" * 30000]:
        with pytest.raises(SeqsketchError):
            load(text)


def test_non_text_input():
    with pytest.raises(QuerySyntaxError, match="must be text"):
        parse(42)  # type: ignore[arg-type]
    with pytest.raises(QuerySyntaxError, match="text or a JSON object"):
        load(["PATTERN A"])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ JSON errors


def _json_fails(obj, cls: type[SeqsketchError], path: str, fragment: str) -> None:
    with pytest.raises(cls) as info:
        from_json(obj)
    assert info.value.where == f"JSON {path}", str(info.value)
    assert fragment in info.value.message


def _one(**extra):
    return {"version": 1, "pattern": [{"kind": "var", "vars": [{"name": "a", "type": "A"}]},
                                      {"kind": "var", "vars": [{"name": "b", "type": "B"}]}], **extra}


def test_json_shape_errors_name_the_path():
    _json_fails({"pattern": []}, QuerySyntaxError, "(top level)", "missing key 'version'")
    _json_fails({"version": 2, "pattern": []}, QuerySyntaxError, "version", "unsupported version 2")
    _json_fails(_one(colour="red"), QuerySyntaxError, "(top level)", "unknown key 'colour'")
    _json_fails({"version": 1, "pattern": [{"kind": "seq", "vars": []}]}, QuerySyntaxError,
                "pattern[0].kind", "unknown kind 'seq'")
    _json_fails({"version": 1, "pattern": [{"kind": "var", "vars": [{"name": 3, "type": "A"}]}]},
                QuerySyntaxError, "pattern[0].vars[0].name", "expected a variable name, got a number")
    _json_fails(_one(where=[{"left": {"var": "a", "attr": "x"}, "op": "=", "right": {"value": [1]}}]),
                QuerySyntaxError, "where[0].right.value", "expected a string, number, boolean or null")
    _json_fails(_one(within={"weeks": 2}), QuerySyntaxError, "within", "expected {\"micros\": n}")
    _json_fails(_one(strategy="fast"), QuerySyntaxError, "strategy", "unknown strategy 'fast'")
    _json_fails(_one(within={"micros": True}), QuerySyntaxError, "within.micros", "expected an integer")


def test_json_semantic_errors_name_the_path():
    unknown = {"left": {"var": "a", "attr": "x"}, "op": "=", "right": {"var": "z", "attr": "x"}}
    _json_fails(_one(where=[unknown]), QuerySemanticError, "where[0].right.var", "unknown variable 'z'")
    _json_fails({"version": 1, "pattern": [{"kind": "var", "vars": [{"name": "a", "type": "A"}]},
                                           {"kind": "set", "vars": [{"name": "a", "type": "B"},
                                                                    {"name": "c", "type": "C"}]}]},
                QuerySemanticError, "pattern[1].vars[0].name", "declared twice")
    _json_fails(_one(where=[{"left": {"var": "a", "attr": "type"}, "op": "=", "right": {"value": 3}}]),
                QuerySemanticError, "where[0].right", "a.type is the event type")
    _json_fails(_one(between={"start": 10, "end": 5}), QuerySemanticError, "between.end", "starts after")
    _json_fails(_one(within={"micros": 0}), QuerySemanticError, "within", "positive duration")
    _json_fails(_one(where=[{"left": {"var": "a", "attr": "x"}, "op": "~", "right": {"value": 1}}]),
                QuerySemanticError, "where[0].op", "unknown operator '~'")


def test_json_text_errors_carry_line_and_column():
    with pytest.raises(QuerySyntaxError) as info:
        load('{"version": 1,\n "pattern": [}')
    assert (info.value.line, info.value.column) == (2, 14)
    assert "invalid JSON" in info.value.message


def test_json_limits():
    many = [{"kind": "var", "vars": [{"type": "A"}]} for _ in range(MAX_VARIABLES + 1)]
    with pytest.raises(QueryLimitError):
        from_json({"version": 1, "pattern": many})
    with pytest.raises(QueryLimitError):
        load(json.dumps({"version": 1, "pattern": many, "pad": "x" * MAX_QUERY_BYTES}))


def test_printing_an_unprintable_time_is_our_error():
    query = Query(pattern=(Single(Var("a", "A")),), between=Between(0, 10**20))
    with pytest.raises(QuerySemanticError, match="outside the years 1 to 9999"):
        to_text(query)
    with pytest.raises(QuerySemanticError, match="outside the years 1 to 9999"):
        from_json(to_json(query))


def test_checks_apply_to_asts_built_by_hand_through_json():
    bad = [
        Query(pattern=(Single(Var("a", "A")),), within=WithinEvents(0)),
        Query(pattern=(Single(Var("a", "A")),), within=WithinTime(-1)),
        Query(pattern=(Single(Var("a", "A")),), between=Between(5, 4)),
    ]
    for query in bad:
        with pytest.raises(QuerySemanticError):
            from_json(to_json(query))


# ------------------------------------------------------------------ run operands and aggregates (SASE+)

_RUN = "PATTERN SEQ(A+ a, NOT(C c), B b) WHERE "


@pytest.mark.parametrize(("condition", "cls", "marker", "fragments"), [
    ("a[2].x > 1", QuerySyntaxError, "2]", ["unknown run index a[2]", "a[i] (the current event)", "a[last]"]),
    ("a[i-2].x > 1", QuerySyntaxError, "i-2", ["unknown run index a[i-2]"]),
    ("a[a.LEN].x > 1", QuerySyntaxError, ".LEN", ["expected one of ']' or '-'", "a[a.LEN] is a[last]"]),
    ("avg(a[..i].x) < a.x", QuerySyntaxError, "].x)", ["expected '-'"]),
    ("avg(a[..j-1].x) < a.x", QuerySyntaxError, "j-1", ["expected a[..i-1]"]),
    ("median(a.x) > 1", QuerySyntaxError, "median", ["unknown function 'median'",
                                                     "count, sum, avg, min, max"]),
    ("b[i].x > 1", QuerySemanticError, "i]", ["b[i] indexes the events of a Kleene run",
                                              "'b' binds a single"]),
    ("b[1].x > 1", QuerySemanticError, "1]", ["b[1] indexes the events of a Kleene run"]),
    ("b[i-1].x < b.x", QuerySemanticError, "i-1]", ["b[i-1] indexes"]),
    ("c[last].x > 1", QuerySemanticError, "last]", ["'c' is negated", "no run"]),
    ("count(c) > 1", QuerySemanticError, "count(c)", ["'c' is negated"]),
    ("count(b) > 1", QuerySemanticError, "count(b)", ["needs a Kleene variable", "'b' binds a single event"]),
    ("avg(a) > 1", QuerySemanticError, "avg(a)", ["avg(a) needs an attribute, e.g. avg(a.price)"]),
    ("count(a.x) > 1", QuerySemanticError, "count(a.x)", ["takes no attribute; write count(a)"]),
    ("count(a[..i-1]) > 1", QuerySemanticError, "count(a[", ["count(a) counts the events of the whole run"]),
    ("sum(a[..i-1].x) > 1", QuerySemanticError, "1 W", ["before the current one",
                                                         "a[i].x > sum(a[..i-1].x)"]),
    ("b.x < sum(a[..i-1].x)", QuerySemanticError, "b.x", ["compare it with a field of 'a' itself"]),
    ("max(a[..i-1].x) < prev(a.x)", QuerySemanticError, "prev(a.x)", ["field of 'a' itself"]),
    ("a.x < a[last].x", QuerySemanticError, "a[last]", ["known only once a's run is complete"]),
    ("a[i].x > avg(a.x)", QuerySemanticError, "avg(a.x)", ["checked as each event joins it"]),
    ("prev(a.x) < a[1].x", QuerySemanticError, "a[1]", ["prev(a.x) must be compared with a field of 'a'"]),
    ("count(a) = 'x'", QuerySemanticError, "'x'", ["count(a) is a number of events"]),
    ("avg(a.x) = null", QuerySemanticError, "null", ["avg(a.x) is a number"]),
    ("sum(a.type) > 1", QuerySemanticError, "sum(a.type)", ["the event type is a string"]),
    ("min(a.type) = 3", QuerySemanticError, "3 W", ["min(a.type) is the event type, a string"]),
    ("a[last].ts > 'nope'", QuerySemanticError, "'nope'", ["a[last].ts is a time"]),
    ("count(a) > b.ts", QuerySemanticError, "count(a)", ["cannot compare count(a) (integer) "
                                                        "with b.ts (time)"]),
    ("max(z.x) > 1", QuerySemanticError, "z.x", ["unknown variable 'z'"]),
])
def test_run_operand_mistakes_are_refused_where_they_are(condition, cls, marker, fragments):
    _fails(_RUN + condition + " WITHIN 1 h", cls, marker, *fragments, occurrence=1)


@pytest.mark.parametrize(("condition", "meant"), [
    ("c.x > max(a.x)", Condition(Field("c", "x"), ">", Aggregate("max", "a", "x"))),
    ("a[last].x > max(a.x)", Condition(RunEvent("a", "x", "last"), ">", Aggregate("max", "a", "x"))),
    ("b.x < a[last].x", Condition(Field("b", "x"), "<", RunEvent("a", "x", "last"))),
    ("a[i].x > a[1].x", Condition(Field("a", "x"), ">", RunEvent("a", "x", "first"))),
    ("count(a) >= b.n", Condition(Aggregate("count", "a"), ">=", Field("b", "n"))),
    ("min(a.ts) > '2012-01-01'", Condition(Aggregate("min", "a", "ts"), ">", Literal(1_325_376_000_000_000))),
    ("a[ i - 1 ].x < a.x", Condition(Field("a", "x", prev=True), "<", Field("a", "x"))),
])
def test_run_operands_that_are_fine(condition, meant):
    """Run operands used as the language allows are accepted and mean what the docs say: ``a[i]`` is the
    event joining the run, ``a[1]`` its first, ``a[i-1]`` the one before, a time literal is µs since the
    epoch (UTC); the query prints back to itself in text and JSON."""
    query = parse(_RUN + condition + " WITHIN 1 h")
    assert query.where == (meant,)
    assert query.within == WithinTime(3_600_000_000)
    assert [type(e).__name__ for e in query.pattern] == ["Single", "Absent", "Single"]
    assert parse(to_text(query)) == query and load(to_json(query)) == query


def test_json_run_operand_errors_name_the_path():
    kleene = {"version": 1, "pattern": [{"kind": "var", "vars": [{"name": "a", "type": "A", "kleene": True}]},
                                        {"kind": "var", "vars": [{"name": "b", "type": "B"}]}]}

    def where(left, right):
        return kleene | {"where": [{"left": left, "op": "<", "right": right}]}

    _json_fails(where({"var": "a", "attr": "x", "run": "middle"}, {"value": 1}), QuerySyntaxError,
                "where[0].left.run", "unknown run end 'middle'")
    _json_fails(where({"var": "a", "attr": "x", "run": "last", "prev": True}, {"value": 1}), QuerySyntaxError,
                "where[0].left", "unknown key 'prev'")
    _json_fails(where({"agg": "median", "var": "a", "attr": "x"}, {"value": 1}), QuerySemanticError,
                "where[0].left", "unknown aggregate 'median'")
    _json_fails(where({"agg": "count", "var": "a", "attr": "x"}, {"value": 1}), QuerySemanticError,
                "where[0].left", "takes no attribute")
    _json_fails(where({"agg": "sum", "var": "b", "attr": "x"}, {"value": 1}), QuerySemanticError,
                "where[0].left", "'b' binds a single event")
    _json_fails(where({"agg": "avg", "var": "a", "attr": "x", "before": True}, {"var": "b", "attr": "x"}),
                QuerySemanticError, "where[0].right", "compare it with a field of 'a' itself")
    _json_fails(where({"agg": "avg", "var": "a", "attr": 3}, {"value": 1}), QuerySyntaxError,
                "where[0].left.attr", "an attribute name or null")
