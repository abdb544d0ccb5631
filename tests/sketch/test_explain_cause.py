"""``explain`` of an empty verified answer names the part of the query that rules the candidates out
(:mod:`sketch.answer.cause`), on small hand-made streams through the stream tree's verified path.

Each stream is built so that the cause is known by construction; the answer itself must stay the exact one.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sketch.answer.cause as explain_cause
import sketch.answer.relaxed as relaxed_search
from exact.engine import Budget, evaluate, evaluate_table
from exact.errors import SeqsketchError
from exact.query.ast import Query, Return
from exact.query.language import parse
from exact.query.normalize import normalize
from exact.reference import stream_table
from sketch.answer.cause import about, why_empty
from sketch.answer.event_sources import TableSource
from sketch.answer.modes import answer_indexed
from sketch.answer.verify import verify
from sketch.build import BuildOptions, build_from_table
from sketch.evaluate import TreeIndex, approximate
from tests.generators import index_queries, index_streams, scaled
from tests.helpers import build_tree

S = 1_000_000  # one second in µs
ENGINE_S = explain_cause._engine_s


@pytest.fixture(autouse=True)
def _time_to_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The searches here are held to what they find, not to how fast: a loaded machine gets time enough
    (the budget's own rules are held below, with whatever floor this sets)."""
    monkeypatch.setattr(relaxed_search, "EXPLAIN_FLOOR_MS", 150)
    # (nor is a first run foreseen to take what a verification that loaded the engine's kernels took)
    monkeypatch.setattr(explain_cause, "_engine_s", lambda read, spent_ms: 0.0)


def stream(*events: tuple) -> pa.Table:
    """Events ``(type, seconds, attrs…)`` in stream order."""
    rows = []
    for i, (kind, sec, *attrs) in enumerate(events):
        rows.append({"seq": i, "ts": int(sec * S), "type": kind, **(attrs[0] if attrs else {})})
    return stream_table(rows)


def verified(table: pa.Table, text: str, leaf_size: int = 4) -> dict:
    tree, _ = build_from_table(table, BuildOptions(leaf_size=leaf_size))
    source = TableSource(table)
    query = parse(text)
    body = answer_indexed(query, tree, source, mode="verified")
    exact = answer_indexed(query, None, source, mode="exact")
    for key in ("exists", "count", "matches", "intervals"):
        assert body.get(key) == exact.get(key), key  # the answer is the exact one, whatever explain says
    assert body["exists"] is False and body["stats"]["candidate_intervals"] >= 1
    return body


def cause(body: dict) -> str:
    head, _, tail = body["explain"].partition(" hold no exact match: ")
    assert head.endswith("events") and tail, body["explain"]
    return tail


def test_a_condition_that_holds_for_no_candidate_is_named() -> None:
    table = stream(("A", 0, {"x": 1, "y": 7}), ("B", 1, {"y": 0}), ("A", 2, {"x": 1}), ("B", 3, {"y": 0}))
    body = verified(table, "PATTERN SEQ(A a, B b) WHERE a.x = 1 AND b.y = 7")
    # dropping a.x = 1 (the first) leaves no match; dropping b.y = 7 leaves the two pairs
    assert cause(body) == ("they hold 2 matches of A then B meeting the other conditions, but `b.y = 7` "
                           "holds for none of them")


def test_the_partition_is_named() -> None:
    table = stream(("A", 0, {"k": "p"}), ("B", 1, {"k": "q"}), ("A", 2, {"k": "q"}), ("B", 3, {"k": "r"}))
    body = verified(table, "PATTERN SEQ(A a, B b) PARTITION BY k WITHIN 10 s")
    assert cause(body) == "they hold 2 matches of A then B within 10 s, but none with the same k"


def test_a_negation_between_elements_is_named() -> None:
    table = stream(("A", 0), ("C", 1), ("B", 2), ("A", 3), ("C", 4), ("B", 5))
    body = verified(table, "PATTERN SEQ(A a, NOT(C c), B b)")
    assert cause(body) == ("they hold 2 matches of A then B, but each has a C between A and B, which "
                           "`NOT(C c)` forbids")


def test_a_trailing_negation_is_named() -> None:
    table = stream(("A", 0), ("C", 4), ("A", 20), ("E", 25), ("C", 26))
    body = verified(table, "PATTERN SEQ(A a, NOT(C c, D d)) WITHIN 10 s")
    assert cause(body) == ("they hold 2 matches of A within 10 s, but each is followed within 10 s by a C or "
                           "a D, which `NOT(C c, D d)` forbids")


def test_the_window_is_named_with_the_shortest_match() -> None:
    table = stream(("A", 0), ("X", 1), ("B", 5), ("A", 100), ("B", 107))
    body = verified(table, "PATTERN SEQ(A a, B b) WITHIN 2 s", leaf_size=8)
    assert cause(body) == "they hold 2 matches of A then B, but none within 2 s (the shortest takes 5 s)"
    table = stream(("A", 0), ("X", 1), ("X", 2), ("B", 5), ("A", 100), ("X", 101), ("B", 107))
    body = verified(table, "PATTERN SEQ(A a, B b) WITHIN 2 EVENTS", leaf_size=8)
    assert cause(body) == ("they hold 2 matches of A then B, but none within 2 events (the shortest spans 3 "
                           "events)")


def test_the_strategy_is_named() -> None:
    table = stream(("A", 0), ("X", 1), ("B", 2), ("Y", 3))
    body = verified(table, "PATTERN SEQ(A a, B b) STRATEGY strict_contiguity")
    # relaxed to skip_till_next_match first (the plain skip), which finds the match
    assert cause(body) == ("they hold 1 match of A then B, but none under strict_contiguity, which binds "
                           "every event between a match's first and last")


def test_conditions_come_before_the_strategy() -> None:
    # both the condition and the strategy rule the match out alone; the condition is named (it comes first)
    table = stream(("A", 0, {"x": 1}), ("X", 1), ("B", 2), ("Y", 3))
    body = verified(table, "PATTERN SEQ(A a, B b) WHERE a.x = 2 STRATEGY skip_till_any_match")
    assert cause(body) == ("they hold 1 match of A then B under skip_till_any_match, but `a.x = 2` holds for "
                           "none of them")


def test_when_no_single_part_rules_them_out_it_says_so() -> None:
    # the pair fails both relations: dropping one leaves the other, dropping both leaves the pair
    table = stream(("A", 0, {"k": 1, "m": 1}), ("B", 0.5, {"k": 2, "m": 2}), ("A", 100, {"k": 3, "m": 3}))
    body = verified(table, "PATTERN SEQ(A a, B b) WHERE a.k = b.k AND a.m = b.m WITHIN 1 s", leaf_size=2)
    assert cause(body) == ("no single part of the query rules them all out: without any one of `a.k = b.k`, "
                           "`a.m = b.m` or WITHIN 1 s, or under skip_till_any_match, they hold no match, but "
                           "without all of them they do")


def test_a_position_no_event_fits_is_named_with_its_conditions() -> None:
    # no A has x = 1 and no B has y = 1: each position's own condition holds for none of its type's events
    table = stream(("A", 0, {"x": 0}), ("B", 0.5, {"y": 0}), ("A", 100, {"x": 0}), ("B", 100.5, {"y": 0}))
    body = verified(table, "PATTERN SEQ(A a, B b) WHERE a.x = 1 AND b.y = 1 WITHIN 1 s", leaf_size=2)
    assert cause(body) == ("no event in them can bind a: `a.x = 1` holds for none of the 2 A events they hold; "
                           "nor b: `b.y = 1` holds for none of the 2 B events they hold")
    # two conditions on one variable, each holding for none (dropping either leaves the other)
    body = verified(table, "PATTERN SEQ(A a, B b) WHERE a.x = 1 AND a.z = 5 WITHIN 1 s", leaf_size=2)
    assert cause(body) == ("no event in them can bind a: `a.x = 1` and `a.z = 5` each hold for none of the 2 A "
                           "events they hold")



def test_a_position_no_event_fits_is_named_where_the_search_does_not_run(monkeypatch: pytest.MonkeyPatch
                                                                         ) -> None:
    # two conditions that hold apart, never together; the read is too large for the relaxations
    monkeypatch.setattr(explain_cause, "MAX_EVENTS", 1)
    table = stream(("A", 0, {"x": 1, "z": 0}), ("B", 0.5), ("A", 100, {"x": 0, "z": 5}), ("B", 100.5))
    body = verified(table, "PATTERN SEQ(A a, B b) WHERE a.x = 1 AND a.z = 5 WITHIN 1 s", leaf_size=2)
    assert cause(body) == ("no event in them can bind a: `a.x = 1 AND a.z = 5` together hold for none of the "
                           "A events in them")


def test_when_the_order_rules_them_out_it_says_so() -> None:
    table = stream(("B", 0), ("A", 1), ("X", 2), ("X", 3))
    body = verified(table, "PATTERN SEQ(A a, B b)")
    assert cause(body) == "none of them holds A then B, even under skip_till_any_match"


def test_a_part_the_events_read_cannot_judge_is_left_out_and_said_so() -> None:
    # dropping w.type = 'C' would let w bind any type, of which only C and B were read
    table = stream(("B", 0), ("C", 1), ("X", 2), ("X", 3))
    body = verified(table, "PATTERN SEQ(ANY w, B b) WHERE w.type = 'C'")
    assert cause(body) == ("none of them holds C then B meeting the conditions, even under "
                           "skip_till_any_match (dropping `w.type = 'C'` cannot be judged on the events "
                           "read)")


def test_kleene_and_event_set_labels() -> None:
    table = stream(("A", 0, {"x": 1}), ("C", 1), ("B", 2), ("D", 3))
    body = verified(table, "PATTERN SEQ(A+ a, {B b, C c}, D d) WHERE a.x > 1")
    assert cause(body) == "they hold 1 match of A+ then {B, C} then D, but `a.x > 1` holds for none of them"
    body = verified(table, "PATTERN SEQ(A+ a, OR(B b, E e), D d) WHERE a.x > 1")
    assert cause(body) == "they hold 1 match of A+ then B | E then D, but `a.x > 1` holds for none of them"


def _approx_and_read(table: pa.Table, text: str):
    tree, _ = build_from_table(table, BuildOptions(leaf_size=4))
    approx = approximate(parse(text), TreeIndex(tree))
    return approx, verify(approx, TableSource(table))


def test_the_search_stops_in_time_and_says_so() -> None:
    table = stream(*[("A" if i % 2 == 0 else "B", i, {"x": 1}) for i in range(40)])
    text = "PATTERN SEQ(A a, B b) WHERE a.x = 2 STRATEGY skip_till_any_match"
    approx, result = _approx_and_read(table, text)
    assert not result.found.exists
    spent = Budget(time.monotonic() - 1.0, 5)  # the query's own budget, already spent
    said = why_empty(approx.query, result.read, spans=approx.interval_bounds(), budget=spent)
    # out of time, what the read's counts tell is said: no A meets a's condition
    assert said == "no event in them can bind a: `a.x = 2` holds for none of the A events in them"
    assert why_empty(approx.query, result.read, spans=approx.interval_bounds()) == (
        "they hold 210 matches of A then B under skip_till_any_match, but `a.x = 2` holds for none of them")
    # every position has events that fit it: out of time, nothing is named
    approx, result = _approx_and_read(table, "PATTERN SEQ(A a, B b) WHERE a.x != b.x STRATEGY skip_till_any_match")
    said = why_empty(approx.query, result.read, spans=approx.interval_bounds(), budget=spent)
    assert said == ("conditions, negation, the window or the strategy rule them out; the search for which "
                    "one ran out of time")


def test_a_search_that_would_cost_more_than_the_answer_is_not_begun(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first relaxed run is expected to cost what the query's own run did: a verification whose engine
    took far longer than the search's budget (a quarter of it) begins none, and says so."""
    monkeypatch.setattr(explain_cause, "_engine_s", ENGINE_S)
    table = stream(*[("A" if i % 2 == 0 else "B", i, {"x": 1}) for i in range(40)])
    approx, result = _approx_and_read(table, "PATTERN SEQ(A a, B b) WHERE a.x != b.x STRATEGY skip_till_any_match")
    assert not result.found.exists
    began = time.monotonic()
    said = why_empty(approx.query, result.read, spans=approx.interval_bounds(), spent_ms=100_000.0)
    assert said == ("conditions, negation, the window or the strategy rule them out; the search for which "
                    "one ran out of time")
    assert time.monotonic() - began < 5.0  # (not the 100 s an unbounded search would be allowed at that pace)
    # the same read, with a verification as fast as the run really is: the search runs and names the cause
    assert why_empty(approx.query, result.read, spans=approx.interval_bounds(), spent_ms=0.0).startswith(
        "they hold")


def test_the_search_is_skipped_over_too_many_events(monkeypatch: pytest.MonkeyPatch) -> None:
    table = stream(*[("A" if i % 2 == 0 else "B", i, {"x": 1}) for i in range(40)])
    approx, result = _approx_and_read(table, "PATTERN SEQ(A a, B b) WHERE a.x != b.x")
    monkeypatch.setattr(explain_cause, "MAX_EVENTS", 10)
    said = why_empty(approx.query, result.read, spans=approx.interval_bounds())
    assert said.endswith("(the 40 events read are more than the 10 the search for which one looks through)")


@pytest.mark.parametrize(("micros", "text"), [(41 * S, "41 s"), (int(2.5 * 3600 * S), "2.5 h"),
                                               (86_400 * S, "1 day"), (int(31.24 * 86_400 * S), "31.2 days"),
                                               (700 * 1000, "700 ms"), (90 * 60 * S, "1.5 h")])
def test_durations_read_well(micros: int, text: str) -> None:
    assert about(micros) == text


@scaled(200)
@given(index_queries(), index_streams(), st.sampled_from((1, 2, 4)))
def test_what_the_relaxations_count_is_true_of_the_whole_stream(query: Query, rows: list[dict],
                                                                leaf_size: int) -> None:
    """Where a relaxation leaves the candidates as they are, the matches it finds in what verification read
    are all the relaxed query's matches in the whole stream; where it would widen them (the window, strict
    contiguity), each match it counts — one inside a candidate interval — is one of them (the docs' claims).
    And the search never fails."""
    table = stream_table(rows)
    tree = build_tree(rows, leaf_size, tiny=False)
    approx = approximate(query, TreeIndex(tree))  # every drawn query is one the engine takes
    result = verify(approx, TableSource(table))
    if result.found.exists or not approx.exists:
        return
    spans = approx.interval_bounds()
    assert why_empty(query, result.read, spans=spans)
    # the search runs on the events read without the row filter (why_empty reads them again)
    read = result.read if result.read.unfiltered is None else result.read.unfiltered()
    search = relaxed_search.Search(query, read, spans, None, Budget(), explain_cause.MAX_EVENTS)
    for relaxation in explain_cause._relaxations(query, normalize(query), None):
        relaxed = relaxation.query
        if not (explain_cause._valid(relaxed) and explain_cause.judgeable(relaxed, search)):
            continue
        whole = evaluate(relaxed, table)
        found = search.run(relaxed)
        if search.same_candidates(relaxed):
            assert found is not None and found.count == len(whole), relaxation.part
            continue
        counted = []
        for events, starts in read.pieces:
            matches = evaluate_table(relaxed, events, returns=Return.MATCHES, starts=starts)
            counted += matches.take(relaxed_search._inside(matches, spans)).matches()
        assert found is not None and found.count == len(counted)
        assert set(counted) <= set(whole), relaxation.part


def test_the_search_is_budgeted_by_what_verification_took() -> None:
    """A multiple of verification's time, within a floor and a ceiling, and never past the query's own
    deadline; windows that outgrow it are given up early (the search only serves a hint)."""
    ec = relaxed_search
    floor, factor, most = ec.EXPLAIN_FLOOR_MS, ec.EXPLAIN_FACTOR, ec.EXPLAIN_MS
    assert relaxed_search.search_budget(None, 0.1).timeout_ms == floor
    assert relaxed_search.search_budget(None, 2 * floor / factor).timeout_ms == 2 * floor
    assert relaxed_search.search_budget(None, 10 * most).timeout_ms == most
    assert relaxed_search.search_budget(None, None).timeout_ms == most
    own = Budget(time.monotonic() + 0.001, 1)
    assert relaxed_search.search_budget(own, 10 * most).deadline == own.deadline
    assert relaxed_search.search_budget(None, 1.0).stop_early


def test_a_search_that_stops_early_gives_up_before_its_deadline_passes() -> None:
    """Skip-till-any-match with no window over a growing run of candidates: with ``stop_early`` the engine
    gives up when its next, four times larger bound would end past the deadline."""
    table = stream(*[("A" if i % 3 == 0 else "B", i, {"x": 1}) for i in range(600)])
    query = parse("PATTERN SEQ(A a, B b, A c, B d, A e, B f) WHERE f.x > a.x STRATEGY skip_till_any_match")
    budget = Budget(time.monotonic() + 2.0, 2_000, window_steps=100, stop_early=True)
    with pytest.raises(SeqsketchError, match="took longer than the limit"):
        evaluate_table(query, table, budget=budget, returns=Return.EXISTS)
    assert time.monotonic() < budget.deadline


def test_a_trailing_kleene_is_not_judged_on_widened_candidates() -> None:
    """Without the window, ``b+`` under skip-till-next-match takes every later B: the match ``A B`` inside
    the candidate interval is only the start of ``A B … B`` in the stream, so dropping the window cannot be
    judged on the events read (a count of the truncated match would be false)."""
    table = stream(("A", 0), ("B", 1), *[("C", 2 + i) for i in range(20)], ("B", 30))
    text = "PATTERN SEQ(A+ a, B+ b) WITHIN 500 ms"
    whole = evaluate(parse(text.replace(" WITHIN 500 ms", "")), table)
    assert [(m.start_seq, m.end_seq) for m in whole] == [(0, 22)]  # (the B at 30 s is the last event)
    said = cause(verified(table, text, leaf_size=2))
    assert "1 match" not in said and "dropping WITHIN 500 ms cannot be judged on the events read" in said, said
