"""The engine's public surface: normalisation, answers, input and query errors, and ``seqsketch query
--mode exact`` end to end on a stored real dataset (the running example of the process-mining book)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.engine import Match, answer, evaluate, iso_ts, iso_ts_many, merge_intervals
from exact.errors import InputError, QuerySemanticError
from exact.events import MAX_MICROS, MIN_MICROS
from exact.query.ast import (
    Absent,
    AnyOf,
    Condition,
    EventSet,
    Field,
    Literal,
    Query,
    Return,
    Single,
    Strategy,
    Var,
    WithinTime,
)
from exact.query.language import parse
from exact.query.normalize import compare, normalize
from exact.reference import reference_matches, stream_table
from tests.generators import scaled

# ------------------------------------------------------------------------------------------ normalisation


def test_closure_adds_transitive_equalities_and_constants() -> None:
    q = parse("PATTERN SEQ(C c, P+ p, D d) WHERE c.pid = p.pid AND p.pid = d.pid AND d.pid = 7")
    plan = normalize(q)
    rel = {(c.left.var, c.left.attr, c.op, c.right.var, c.right.attr) for c in plan.relations}
    assert ("c", "pid", "=", "d", "pid") in rel
    props = {v.name: v.properties for v in plan.positives}
    assert Condition(Field("c", "pid"), "=", Literal(7)) in props["c"]
    # the Kleene variable's events all share the class value
    assert Condition(Field("p", "pid", prev=True), "=", Field("p", "pid")) in plan.prevs
    assert plan.partition_attrs == ("pid",)


def test_closure_keeps_per_event_equalities_per_event() -> None:
    """``v.x = v.y`` holds for each event of a Kleene v; it must not make v's events share x (found by the
    property test: the closure once added prev(v.x) = v.x for it)."""
    plan = normalize(parse("PATTERN A+ v WHERE v.x = v.y"))
    assert plan.prevs == ()
    rows = [{"ts": 0, "type": "A", "x": 0, "y": 0}, {"ts": 1, "type": "A", "x": 1, "y": 1}]
    q = parse("PATTERN A+ v WHERE v.x = v.y STRATEGY skip_till_any_match")
    assert [m.bindings_dict() for m in evaluate(q, stream_table(rows))] == [{"v": [0]}, {"v": [0, 1]},
                                                                          {"v": [1]}]


def test_closure_does_not_pass_through_negated_variables_or_alternatives() -> None:
    q = parse("PATTERN SEQ(A a, NOT(B b), C c) WHERE a.x = b.x AND b.x = c.x")
    rel = normalize(q).relations
    assert not any({c.left.var, c.right.var} == {"a", "c"} for c in rel)
    q2 = parse("PATTERN SEQ(A a, OR(B b, D d), C c) WHERE a.x = b.x AND b.x = c.x")
    rel2 = normalize(q2).relations
    assert not any({c.left.var, c.right.var} == {"a", "c"} for c in rel2)


def test_partition_by_expands_to_equalities_and_presence() -> None:
    plan = normalize(parse("PATTERN SEQ(A a, B+ b, NOT(X x), C c) PARTITION BY case"))
    assert plan.partition_attrs == ("case",)
    for v in plan.positives + plan.negatives:
        assert Condition(Field(v.name, "case"), "=", Field(v.name, "case")) in v.properties
    assert Condition(Field("b", "case", prev=True), "=", Field("b", "case")) in plan.prevs
    tied = {o.var for c in plan.negative_relations[0] for o in (c.left, c.right)}
    assert tied == {"x", "a", "b", "c"}


def test_types_from_declarations_and_type_conditions() -> None:
    q = Query((Single(Var("a", None)), Single(Var("b", "B")), AnyOf((Var("c", "C"), Var("d", None)))),
              (Condition(Field("a", "type"), "=", Literal("A")),
               Condition(Field("b", "type"), "!=", Literal("B")),
               Condition(Field("d", "type"), "!=", Literal("Z"))))
    assert normalize(q).types == {"a": frozenset({"A"}), "b": frozenset(), "c": frozenset({"C"}), "d": None}


@pytest.mark.parametrize(("query", "message"), [
    (Query((Absent((Var("n", "N"),)), Single(Var("a", "A")))), "cannot start with NOT"),
    (Query((Single(Var("a", "A")), Absent((Var("n", "N"),)))), "needs WITHIN"),
    (Query((Single(Var("a", "A")),), (Condition(Field("a", "x", prev=True), "<", Field("a", "x")),)),
     "Kleene"),
    (Query((Single(Var("a", "A")),), (Condition(Field("z", "x"), "<", Literal(1)),)), "unknown variable"),
    (Query((Single(Var("a", "A")), Single(Var("a", "B")))), "declared twice"),
])
def test_invalid_queries_are_refused(query: Query, message: str) -> None:
    with pytest.raises(QuerySemanticError, match=message):
        evaluate(query, stream_table([{"ts": 0, "type": "A"}]))


def test_comparison_semantics() -> None:
    assert compare(1, "=", 1.0) and not compare(None, "=", None) and not compare(None, "!=", 1)
    assert compare("a", "!=", 1) and not compare("a", "<", 1) and not compare(True, "=", 1)


def test_literal_kinds_are_part_of_the_cache_key() -> None:
    """``true == 1`` in Python, so equal-comparing queries must not share a cached plan."""
    rows = [{"ts": 0, "type": "A", "b": True, "i": 1, "s": "x"}, {"ts": 1, "type": "A", "b": False, "i": 2}]
    table = stream_table(rows)
    for text, starts in (("a.b = true", [0]), ("a.b = 1", []), ("a.i = 1", [0]), ("a.i = true", []),
                         ("a.s != 1", [0]), ("a.i < 1.5", [0])):
        q = parse(f"PATTERN A a WHERE {text}")
        got = evaluate(q, table)
        assert [m.start_seq for m in got] == starts, text
        assert got == reference_matches(q, table)


def test_conditions_on_missing_attributes_are_false() -> None:
    rows = [{"ts": 0, "type": "A", "x": 1}, {"ts": 1, "type": "A"}, {"ts": 2, "type": "B"}]
    q = parse("PATTERN SEQ(A a, B b) WHERE a.x != 5 STRATEGY skip_till_any_match")
    assert [m.bindings_dict() for m in evaluate(q, stream_table(rows))] == [{"a": [0], "b": [2]}]
    q2 = parse("PATTERN SEQ(A a, B b) WHERE a.nothere != 5")
    assert evaluate(q2, stream_table(rows)) == []


# -------------------------------------------------------------------------------------------- inputs


def test_unordered_seq_is_sorted_and_bad_streams_are_refused() -> None:
    rows = [{"seq": 1, "ts": 5, "type": "B"}, {"seq": 0, "ts": 1, "type": "A"}]
    q = parse("PATTERN SEQ(A a, B b)")
    assert [m.bindings_dict() for m in evaluate(q, stream_table(rows))] == [{"a": [0], "b": [1]}]
    with pytest.raises(InputError, match="seq 0 occurs twice"):
        evaluate(q, stream_table([{"seq": 0, "ts": 1, "type": "A"}, {"seq": 0, "ts": 2, "type": "B"}]))
    with pytest.raises(InputError, match="seq 1.*|ts goes back"):
        evaluate(q, stream_table([{"seq": 0, "ts": 5, "type": "A"}, {"seq": 1, "ts": 2, "type": "B"}]))


def test_null_seq_and_missing_columns_are_refused() -> None:
    q = parse("PATTERN SEQ(A a, B b)")
    t = pa.table({"seq": pa.array([0, None], pa.int64()),
                  "ts": pa.array([0, 1], pa.int64()).cast(pa.timestamp("us", tz="UTC")), "type": ["A", "B"]})
    with pytest.raises(InputError, match="record 1: seq is null"):
        evaluate(q, t)
    with pytest.raises(InputError, match="no 'type' column"):
        evaluate(q, t.drop_columns(["type"]))


def test_record_batches_are_accepted() -> None:
    table = stream_table([{"ts": i, "type": t} for i, t in enumerate("ABAB")])
    q = parse("PATTERN SEQ(A a, B b) STRATEGY skip_till_any_match")
    assert evaluate(q, table.to_batches(max_chunksize=1)) == evaluate(q, table) == reference_matches(q, table)
    assert evaluate(q, iter([])) == []


# ------------------------------------------------------------------------------------------- answers


def test_answer_parts_per_return_and_limit() -> None:
    ms = [Match(0, 3, (("a", (0,)), ("b", (3,)))), Match(2, 5, (("a", (2,)), ("b", (5,)))),
          Match(7, 8, (("a", (7,)), ("b", (8,))))]
    ts = {i: 1_317_429_524_546_000 + i for i in range(10)}
    base = parse("PATTERN SEQ(A a, B b)")
    full = answer(base, ms, ts, limit=2)
    assert full["count"] == 3 and full["exists"] and full["truncated"]
    assert [m["bindings"] for m in full["matches"]] == [{"a": [0], "b": [3]}, {"a": [2], "b": [5]}]
    assert full["matches"][0]["start_ts"] == "2011-10-01T00:38:44.546000+00:00"
    assert [(i["start_seq"], i["end_seq"]) for i in full["intervals"]] == [(0, 5), (7, 8)]
    for ret, keys in ((Return.INTERVALS, {"intervals"}), (Return.EXISTS, set()), (Return.COUNT, set())):
        q = Query(base.pattern, returns=ret)
        got = answer(q, ms, ts)
        assert {"matches", "intervals"} & got.keys() == keys
        # RETURN exists stops at the first match: its count is not known
        assert got["count"] == (None if ret == Return.EXISTS else 3) and got["exists"]
        assert not got["truncated"]
    assert answer(base, [], ts)["exists"] is False
    assert answer(Query(base.pattern, returns=Return.EXISTS), [], ts)["count"] == 0


def test_merge_intervals_and_iso() -> None:
    ms = [Match(5, 9, ()), Match(0, 2, ()), Match(2, 3, ()), Match(4, 4, ())]
    assert merge_intervals(ms) == [(0, 3), (4, 4), (5, 9)]
    assert iso_ts(0) == "1970-01-01T00:00:00.000000+00:00"


@scaled(300)
@given(micros=st.lists(st.one_of(st.integers(MIN_MICROS, MAX_MICROS), st.integers(-10**7, 10**7)),
                       max_size=20))
def test_times_formatted_together_read_as_one_at_a_time(micros: list[int]) -> None:
    """Answers format their times with iso_ts_many: the same text as iso_ts, over the whole valid range."""
    assert iso_ts_many(micros) == [iso_ts(m) for m in micros]


def test_text_queries_match_the_reference_on_a_small_stream() -> None:
    rows = [{"ts": i, "type": t, "v": v} for i, (t, v) in enumerate(
        [("A", 1), ("B", 2), ("B", 3), ("C", 1), ("A", 2), ("B", 1), ("C", 5)])]
    table = stream_table(rows)
    for text in ("PATTERN SEQ(A a, B+ b, C c) WHERE prev(b.v) < b.v AND b.v > a.v WITHIN 4 EVENTS",
                 "PATTERN SEQ({A a, B b}, C c) STRATEGY skip_till_any_match",
                 "PATTERN SEQ(A a, NOT(C x), B b) WHERE x.v < b.v STRATEGY robust_skip_till_next_match",
                 "PATTERN SEQ(A a, OR(B b, C c)) WITHIN 2 ms STRATEGY skip_till_any_match"):
        q = parse(text)
        assert evaluate(q, table) == reference_matches(q, table), text


# --------------------------------------------------------------------------------------------- service


@pytest.fixture
def running_example(home: Path, shared_data: Path) -> Path:
    from api.service import build_from_inputs as build_dataset

    build_dataset(home, "running", [str(shared_data / "running-example.xes")])
    return home


def _stored(home: Path) -> pa.Table:
    from exact.store import EventStore, dataset_dir, store_dir

    return EventStore.open(store_dir(dataset_dir("running", home))).read_table()


QUERY = "PATTERN SEQ('register request' r, decide d, 'pay compensation' p) PARTITION BY case"


def test_cli_query_exact_json(running_example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from api.cli import main

    assert main(["query", "running", QUERY, "--mode", "exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    table = _stored(running_example)
    expected = reference_matches(parse(QUERY), table)
    assert out["mode"] == "exact" and out["dataset"] == "running"
    assert out["count"] == len(expected) == 3  # cases 1, 2 (after reinitiation) and 3 are compensated
    assert [m["bindings"] for m in out["matches"]] == [m.bindings_dict() for m in expected]
    assert out["stats"]["events_total"] == 42
    for m in out["matches"]:
        assert m["start_ts"] < m["end_ts"]


def test_cli_query_limit_and_text(running_example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from api.cli import main

    assert main(["query", "running", QUERY, "--mode", "exact", "--limit", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 match(es), exists: true") and "truncated" in text


def test_cli_query_errors_are_one_line(running_example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from api.cli import main

    assert main(["query", "running", "PATTERN SEQ(A a, NOT(B b))", "--mode", "exact"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("seqsketch: error:") and "WITHIN" in err and err.count("\n") == 1
    assert main(["query", "nosuch", QUERY, "--mode", "exact"]) == 1
    assert "nosuch" in capsys.readouterr().err


def test_service_runs_every_strategy_like_the_engine(running_example: Path) -> None:
    from api.service import run_query

    table = _stored(running_example)
    for strategy in Strategy:
        text = ("PATTERN SEQ({'examine casually' e, 'check ticket' c}, decide d) PARTITION BY case "
                f"WITHIN 30 days STRATEGY {strategy.value}")
        got = run_query(running_example, "running", text, mode="exact")
        expected = evaluate(parse(text), table)
        assert got["count"] == len(expected)
        assert [m["bindings"] for m in got["matches"]] == [m.bindings_dict() for m in expected]


def test_event_set_pattern_on_the_running_example_equals_reference(running_example: Path) -> None:
    table = _stored(running_example)
    q = Query((EventSet((Var("e", "examine thoroughly"), Var("c", "check ticket"))),
               Single(Var("d", "decide"))), partition_by=("case",), within=WithinTime(30 * 86_400_000_000),
              strategy=Strategy.SKIP_TILL_ANY_MATCH)
    assert evaluate(q, table) == reference_matches(q, table)
