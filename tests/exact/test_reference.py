"""The brute-force reference on its own: the definitions' consequences the digests state, independent of the
engine (exact.reference is what the engine and the index are held to, so it gets its own checks)."""

from __future__ import annotations

from exact.query.ast import AnyOf, Condition, EventSet, Field, Query, Single, Strategy, Var, WithinTime
from exact.reference import (
    _prefix,
    _prefix_vars_ok,
    _structure,
    all_matches,
    negation_filter,
    next_matches,
    read_events,
    reference_matches,
    robust_next_matches,
    stream_table,
)


def _events(rows: list[dict]):  # type: ignore[no-untyped-def]
    return read_events(stream_table(rows))


def test_trailing_kleene_rule_excludes_the_unextended_match_t28() -> None:
    """Def. 6.1 read literally accepts {a/a1, b/<b1>}; the automaton's rule (docs/semantics.md A3) does not."""
    rows = [{"ts": 1, "type": "A"}, {"ts": 2, "type": "B", "V": 1}, {"ts": 3, "type": "B", "V": 2}]
    q = Query((Single(Var("a", "A")), Single(Var("b", "B", True))),
              (Condition(Field("b", "V", True), "<", Field("b", "V")),), within=WithinTime(10))
    ev = _events(rows)
    gamma = all_matches(q, ev)
    assert sorted(tuple(sorted(g.items())) for g in gamma) == [
        (("a", (0,)), ("b", (1,))), (("a", (0,)), ("b", (1, 2))), (("a", (0,)), ("b", (2,)))]
    assert next_matches(q, ev, gamma) == [{"a": (0,), "b": (1, 2)}]
    assert robust_next_matches(q, ev, gamma) == [{"a": (0,), "b": (1, 2)}]


def test_prefix_of_a_match_cuts_kleene_bindings() -> None:
    g = {"c": (7,), "p": (5, 8), "b": (12,)}
    assert _prefix(g, 1) == {"p": (5,)}
    assert _prefix(g, 3) == {"p": (5, 8), "c": (7,)}


def test_prefix_variable_sets() -> None:
    q = Query((EventSet((Var("c", "C"), Var("p", "P", True))), AnyOf((Var("x", "X"), Var("y", "Y"))),
               Single(Var("b", "B"))))
    pattern = _structure(q)
    assert _prefix_vars_ok(pattern, {"p"})
    assert _prefix_vars_ok(pattern, {"c", "p", "y"})
    assert not _prefix_vars_ok(pattern, {"c", "x"})  # B1 incomplete before the OR
    assert not _prefix_vars_ok(pattern, {"c", "p", "x", "y"})  # two alternatives of one position
    assert not _prefix_vars_ok(pattern, {"c", "p", "b"})  # the OR position skipped
    assert not _prefix_vars_ok(pattern, set())


def test_robust_keeps_what_only_a_non_match_event_blocks() -> None:
    """Thm. 6.2: only events of other complete matches disqualify under robust STNM.  In A B1 B2 C with
    SEQ(A a, B b, C c) WHERE b.v = c.v, B1 (v=1) is in no match, so {a, B2, C} is robust but not STNM."""
    rows = [{"ts": 0, "type": "A"}, {"ts": 1, "type": "B", "v": 1}, {"ts": 2, "type": "B", "v": 2},
            {"ts": 3, "type": "C", "v": 2}]
    q = Query((Single(Var("a", "A")), Single(Var("b", "B")), Single(Var("c", "C"))),
              (Condition(Field("b", "v"), "=", Field("c", "v")),))
    ev = _events(rows)
    gamma = all_matches(q, ev)
    assert gamma == [{"a": (0,), "b": (2,), "c": (3,)}]
    assert next_matches(q, ev, gamma) == []
    assert robust_next_matches(q, ev, gamma) == gamma


def test_negation_filter_gap_is_strict() -> None:
    from exact.query.ast import Absent

    q = Query((Single(Var("a", "A")), Absent((Var("n", "N"),)), Single(Var("b", "B"))),
              strategy=Strategy.SKIP_TILL_ANY_MATCH)
    ev = _events([{"ts": 0, "type": "A"}, {"ts": 1, "type": "B"}, {"ts": 2, "type": "N"},
                  {"ts": 3, "type": "B"}])
    assert negation_filter(q, ev, all_matches(q, ev)) == [{"a": (0,), "b": (1,)}]


def test_reference_on_the_contract_example_shapes() -> None:
    """An OR position reported under the first alternative that makes it a match."""
    rows = [{"ts": 0, "type": "A"}, {"ts": 1, "type": "X", "v": 1}]
    q = Query((Single(Var("a", "A")), AnyOf((Var("x", "X"), Var("y", None)))),
              strategy=Strategy.SKIP_TILL_ANY_MATCH)
    assert [m.bindings for m in reference_matches(q, stream_table(rows))] == [(("a", (0,)), ("x", (1,)))]
