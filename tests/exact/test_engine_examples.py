"""The seeds' worked examples (Cadonna 2013 ch. 1, 3–6; SASE+; lazy chain NFA) as tests of the exact engine.

Expected outputs are the sources' own, with the errata of docs/semantics.md §A applied (e.g. the Ch. 6
Stocks all-matches list has 11 entries, not the 9 printed).  Every example is also checked against the
brute-force reference and under all evaluation options (two-phase and prefilter on and off).
"""

from __future__ import annotations

import numpy as np
import pytest

from exact.engine import evaluate
from exact.engine.automaton import automaton_for
from exact.engine.ordering import partition_codes, window_ends
from exact.engine.prune import candidate_windows
from exact.frame import EventFrame
from exact.prefilter import variable_bits
from exact.query.ast import (
    Absent,
    EventSet,
    Field,
    Literal,
    Query,
    Single,
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.ast import Condition as C
from exact.query.normalize import normalize
from exact.reference import reference_matches, stream_table

DAY = 86_400_000_000
MS = 1_000
ANY, NEXT, ROBUST = Strategy.SKIP_TILL_ANY_MATCH, Strategy.SKIP_TILL_NEXT_MATCH, \
    Strategy.ROBUST_SKIP_TILL_NEXT_MATCH
STRICT, PART = Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY


def F(var: str, attr: str, prev: bool = False) -> Field:
    return Field(var, attr, prev)


def L(value: object) -> Literal:
    return Literal(value)


def run(query: Query, rows: list[dict]) -> set[tuple]:
    """Matches as a set of ((var, seqs), ...) — under every evaluation option, and equal to the reference."""
    table = stream_table(rows)
    results = {(tp, pf): evaluate(query, table, two_phase=tp, prefilter=pf)
               for tp in (True, False) for pf in (True, False)}
    first = results[(True, True)]
    for key, got in results.items():
        assert got == first, key
    assert first == reference_matches(query, table)
    return {m.bindings for m in first}


def b(**kw: object) -> tuple:
    """A binding tuple in keyword order: b(c=1, p=(3, 10)) → (("c", (1,)), ("p", (3, 10)))."""
    return tuple((k, v if isinstance(v, tuple) else (v,)) for k, v in kw.items())


# ---------------------------------------------------------------------------------- Chemo (Th. Fig. 3.1)

CHEMO = [(1, "C", 1672.5, 3), (1, "B", 7100, 4), (1, "P", 111.5, 5), (2, "B", 10100, 6), (1, "D", 84, 7),
         (2, "P", 88, 8), (2, "D", 84, 9), (2, "C", 1320, 10), (2, "P", 98, 11), (1, "P", 116.5, 12),
         (2, "P", 88, 15), (1, "B", 3400, 17), (2, "B", 4000, 18), (2, "B", 4900, 19), (1, "B", 3000, 22)]


def chemo_rows(data: list[tuple] = CHEMO) -> list[dict]:
    # seq = the thesis' event number, so e7 is seq 7
    return [{"seq": i + 1, "ts": day * DAY, "type": kind, "PID": pid, "L": kind, "V": float(v)}
            for i, (pid, kind, v, day) in enumerate(data)]


def p1(strategy: Strategy, with_d: bool = True) -> Query:
    """P1 = (<{c, p+, d}, {b}>, Θ, 15 d) (Ex. 3.2); without d it is P2 (ch. 5)."""
    c, p, d, bb = Var("c", "C"), Var("p", "P", True), Var("d", "D"), Var("b", "B")
    where = [C(F("c", "PID"), "=", F("p", "PID")), C(F("p", "V", True), "<", F("p", "V"))]
    if with_d:
        where += [C(F("p", "PID"), "=", F("d", "PID")), C(F("d", "PID"), "=", F("b", "PID"))]
        first = EventSet((c, p, d))
    else:
        where += [C(F("p", "PID"), "=", F("b", "PID"))]
        first = EventSet((c, p))
    return Query((first, Single(bb)), tuple(where), within=WithinTime(15 * DAY), strategy=strategy)


P1_ALL = {
    b(c=1, p=3, d=5, b=12), b(c=1, p=10, d=5, b=12), b(c=1, p=(3, 10), d=5, b=12),
    b(c=8, p=6, d=7, b=13), b(c=8, p=6, d=7, b=14), b(c=8, p=9, d=7, b=13), b(c=8, p=9, d=7, b=14),
    b(c=8, p=11, d=7, b=13), b(c=8, p=11, d=7, b=14), b(c=8, p=(6, 9), d=7, b=13),
    b(c=8, p=(6, 9), d=7, b=14)}
P1_NEXT = {b(c=1, p=(3, 10), d=5, b=12), b(c=8, p=9, d=7, b=13), b(c=8, p=(6, 9), d=7, b=13)}


def _drop_d(bs: set[tuple]) -> set[tuple]:
    return {tuple(x for x in m if x[0] != "d") for m in bs}


def test_chemo_p1_all_matches_example_3_4() -> None:
    assert run(p1(ANY), chemo_rows()) == P1_ALL


@pytest.mark.parametrize("strategy", [NEXT, ROBUST], ids=lambda s: s.value)
def test_chemo_p1_next_match_example_3_5(strategy: Strategy) -> None:
    assert run(p1(strategy), chemo_rows()) == P1_NEXT


def test_chemo_p1_contiguity_finds_nothing() -> None:
    assert run(p1(STRICT), chemo_rows()) == set()


def test_chemo_p2_all_and_next_match() -> None:
    assert run(p1(ANY, with_d=False), chemo_rows()) == _drop_d(P1_ALL)
    for strategy in (NEXT, ROBUST):
        assert run(p1(strategy, with_d=False), chemo_rows()) == _drop_d(P1_NEXT)


def test_chemo_p2_single_windows_example_5_3() -> None:
    """SESExec(P2, W1) returns the match starting at e1; SESExec(P2, W2) returns nothing (T6).  W1 =
    <e1..e13> (T7).  Each window is run alone, unpruned, by reporting only the matches starting at it."""
    query = p1(NEXT, with_d=False)
    table = stream_table(chemo_rows())
    frame = EventFrame.build(table)
    plan = normalize(query)
    assert int(window_ends(plan, frame.seq, frame.ts)[0]) == 12
    w1 = evaluate(query, table, two_phase=False, prefilter=False, starts=(1, 1))
    assert [m.bindings for m in w1] == [b(c=1, p=(3, 10), b=12)]
    assert evaluate(query, table, two_phase=False, prefilter=False, starts=(2, 2)) == []


def test_two_phase_candidate_windows_example_5_10() -> None:
    """T13: Algorithm 3 (corrected) calls A exactly 3 times on Chemo/P2 — its candidate windows start at
    e1, e6 and e8 — and finds the 3 matches; the printed flush, which stops at the first window failing
    (5.2), would lose patient 2's (T14)."""
    query = p1(NEXT, with_d=False)
    frame = EventFrame.build(stream_table(chemo_rows()))
    plan = normalize(query)
    assert plan.partition_attrs == ("PID",)
    em, _ = variable_bits(frame, plan.positives, counts=False)
    em = em.astype(np.int64)
    keys = partition_codes(frame, plan.partition_attrs)
    firsts = candidate_windows(automaton_for(query), em, keys, window_ends(plan, frame.seq, frame.ts),
                               np.ones(len(frame), dtype=bool))
    assert frame.seq[firsts].tolist() == [1, 6, 8]
    found = {m.bindings for m in evaluate(query, stream_table(chemo_rows()))}
    assert found == _drop_d(P1_NEXT)


def test_closure_restores_the_partitioned_match_t29() -> None:
    """T29 (docs/semantics.md A8): with Θ closed under PID-transitivity plain STNM finds {c/x1, d/x3, p/x4, b/x5}."""
    rows = [{"seq": 1, "ts": 1 * DAY, "type": "C", "PID": 1, "V": 0.0},
            {"seq": 2, "ts": 2 * DAY, "type": "D", "PID": 2, "V": 0.0},
            {"seq": 3, "ts": 3 * DAY, "type": "D", "PID": 1, "V": 0.0},
            {"seq": 4, "ts": 4 * DAY, "type": "P", "PID": 1, "V": 1.0},
            {"seq": 5, "ts": 5 * DAY, "type": "B", "PID": 1, "V": 0.0}]
    for strategy in (NEXT, ROBUST):
        assert run(p1(strategy), rows) == {b(c=1, p=4, d=3, b=5)}


def test_two_phase_counter_decrement_t30() -> None:
    """T30 (docs/semantics.md A5): a B event before every C event must not decrement the b counter."""
    rows = [{"seq": 1, "ts": 1 * DAY, "type": "B", "PID": 1, "V": 0.0},
            {"seq": 2, "ts": 2 * DAY, "type": "C", "PID": 1, "V": 0.0},
            {"seq": 3, "ts": 3 * DAY, "type": "P", "PID": 1, "V": 5.0},
            {"seq": 4, "ts": 4 * DAY, "type": "B", "PID": 1, "V": 0.0},
            {"seq": 5, "ts": 30 * DAY, "type": "C", "PID": 1, "V": 0.0}]
    assert run(p1(NEXT, with_d=False), rows) == {b(c=2, p=3, b=4)}


# ----------------------------------------------------------------------- Ch. 1 Chemo (Th. Fig. 1.2/1.4)

CHEMO_CH1 = [(1, "C", 1672.5, 3), (1, "B", 7100, 4), (1, "P", 111.5, 5), (2, "B", 10100, 6),
             (2, "P", 88, 8), (2, "C", 1320, 10), (2, "P", 98, 11), (1, "B", 3400, 17), (2, "B", 4000, 18),
             (2, "B", 4900, 19)]


def ch1_query(strategy: Strategy) -> Query:
    """<{c, p+}, {b}>, same patient, within 15 days (Ex. 1.1)."""
    return Query((EventSet((Var("c", "C"), Var("p", "P", True))), Single(Var("b", "B"))),
                 partition_by=("PID",), within=WithinTime(15 * DAY), strategy=strategy)


def test_chapter1_chemo_under_each_strategy_section_2_6() -> None:
    rows = chemo_rows(CHEMO_CH1)
    assert run(ch1_query(ANY), rows) == {
        b(c=1, p=3, b=8), b(c=6, p=5, b=9), b(c=6, p=5, b=10), b(c=6, p=7, b=9), b(c=6, p=7, b=10),
        b(c=6, p=(5, 7), b=9), b(c=6, p=(5, 7), b=10)}
    assert run(ch1_query(STRICT), rows) == set()
    assert run(ch1_query(PART), rows) == {b(c=6, p=(5, 7), b=9), b(c=6, p=7, b=9)}
    for strategy in (NEXT, ROBUST):
        assert run(ch1_query(strategy), rows) == {b(c=1, p=3, b=8), b(c=6, p=(5, 7), b=9),
                                                  b(c=6, p=7, b=9)}


def test_chapter1_stocks_event_sets_find_the_interleaved_trades() -> None:
    """T26: <{g1,i1},{g2,i2},{g3,i3}> finds exactly one match; the sequence pattern finds none."""
    data = [("GOOG", 612, 344), ("IBM", 502, 357), ("IBM", 505, 368), ("GOOG", 615, 380), ("IBM", 511, 396),
            ("GOOG", 621, 401)]
    rows = [{"seq": i + 1, "ts": t * MS, "type": s, "P": p} for i, (s, p, t) in enumerate(data)]
    g = [Var(f"g{i}", "GOOG") for i in (1, 2, 3)]
    i_ = [Var(f"i{i}", "IBM") for i in (1, 2, 3)]
    where = (C(F("g1", "P"), "<", F("g2", "P")), C(F("g2", "P"), "<", F("g3", "P")),
             C(F("i1", "P"), "<", F("i2", "P")), C(F("i2", "P"), "<", F("i3", "P")))
    sets = Query(tuple(EventSet((g[k], i_[k])) for k in range(3)), where, within=WithinTime(100 * MS),
                 strategy=ANY)
    assert run(sets, rows) == {(("g1", (1,)), ("i1", (2,)), ("g2", (4,)), ("i2", (3,)), ("g3", (6,)),
                                ("i3", (5,)))}
    seq = Query(tuple(Single(v) for k in range(3) for v in (g[k], i_[k])), where,
                within=WithinTime(100 * MS), strategy=ANY)
    assert run(seq, rows) == set()


# ------------------------------------------------------------------------- Ch. 6 Stocks (Th. Fig. 6.1)

STOCKS6 = [(1, "GOOG", 615, 100, "9:32:344"), (2, "IBM", 204, 200, "9:32:357"),
           (3, "GOOG", 610, 400, "9:32:368"), (4, "GOOG", 618, 100, "9:32:380"),
           (5, "GOOG", 620, 300, "9:32:396"), (6, "GOOG", 628, 200, "9:32:401"),
           (7, "GOOG", 628, 700, "9:32:421"), (8, "GOOG", 632, 100, "9:32:450"),
           (71, "GOOG", 629, 200, "14:15:555"), (72, "GOOG", 645, 300, "14:15:572"),
           (73, "MSFT", 28, 100, "14:15:581"), (74, "GOOG", 632, 100, "14:15:592"),
           (75, "GOOG", 635, 700, "14:15:605"), (76, "GOOG", 638, 100, "14:15:613"),
           (77, "GOOG", 642, 600, "14:15:628"), (78, "GOOG", 635, 500, "14:15:640")]


def stocks_rows(without: tuple[int, ...] = ()) -> list[dict]:
    rows = []
    for eid, sym, price, vol, clock in STOCKS6:
        if eid in without:
            continue
        h, m, ms = (int(x) for x in clock.split(":"))
        rows.append({"seq": eid, "ts": ((h * 60 + m) * 60_000 + ms) * MS, "type": sym, "P": price, "V": vol})
    return rows


def p3(strategy: Strategy) -> Query:
    """P3 = (<{s1}, {s2}, {s3+}, {s4}>, Θ, 100 ms) with Θ as the SES thesis derives it (§1.6(c);
    docs/semantics.md §3.5)."""
    s1, s2, s3, s4 = Var("s1", "GOOG"), Var("s2", "GOOG"), Var("s3", "GOOG", True), Var("s4", "GOOG")
    where = (C(F("s1", "P"), "<", F("s2", "P")), C(F("s2", "P"), "<", F("s3", "P")),
             C(F("s3", "P", True), "<", F("s3", "P")), C(F("s1", "V"), "<", F("s4", "V")),
             C(F("s2", "V"), "<", F("s4", "V")), C(F("s3", "V"), "<", F("s4", "V")))
    return Query(tuple(Single(v) for v in (s1, s2, s3, s4)), where, within=WithinTime(100 * MS),
                 strategy=strategy)


def s(a: int, b_: int, c: tuple[int, ...], d: int) -> tuple:
    return (("s1", (a,)), ("s2", (b_,)), ("s3", c), ("s4", (d,)))


P3_NEXT = {s(1, 4, (5, 6), 7), s(3, 4, (5, 6), 7), s(4, 5, (6,), 7)}


def test_stocks_p3_all_matches_with_erratum() -> None:
    """T18: 11 matches (the thesis prints 9; {s1/e1,s2/e5,...} and {s1/e3,s2/e5,...} are valid too)."""
    assert run(p3(ANY), stocks_rows()) == {
        s(1, 4, (5,), 7), s(1, 4, (6,), 7), s(1, 4, (5, 6), 7), s(1, 5, (6,), 7), s(3, 4, (5,), 7),
        s(3, 4, (6,), 7), s(3, 4, (5, 6), 7), s(3, 5, (6,), 7), s(4, 5, (6,), 7), s(71, 74, (76,), 77),
        s(71, 74, (76,), 78)}


def test_stocks_p3_next_and_robust_next() -> None:
    """T19/T20: STNM finds 3 matches; robust STNM also finds {s1/e71, s2/e74, s3/<e76>, s4/e77}."""
    assert run(p3(NEXT), stocks_rows()) == P3_NEXT
    assert run(p3(ROBUST), stocks_rows()) == P3_NEXT | {s(71, 74, (76,), 77)}


def test_backtracking_on_the_example_window_t21_t22() -> None:
    """Window <e71, e72, e73, e74, e76, e77, e78>: backtracking finds the match, plain STNM does not."""
    rows = [r for r in stocks_rows((75,)) if r["seq"] >= 71]
    assert run(p3(ROBUST), rows) == {s(71, 74, (76,), 77)}
    assert run(p3(NEXT), rows) == set()


def test_greedy_misses_t23_t24() -> None:
    assert run(p3(NEXT), stocks_rows((72,))) == P3_NEXT
    assert run(p3(NEXT), stocks_rows((72, 75))) == P3_NEXT | {s(71, 74, (76,), 77)}


# ------------------------------------------------------------------------------ small automaton cases


def test_non_exclusive_event_set_gives_all_permutations_t27() -> None:
    rows = [{"seq": i, "ts": i, "type": "X"} for i in (1, 2, 3)]
    v = [Var(f"v{i}", "X") for i in (1, 2, 3)]
    for strategy in (ANY, NEXT, ROBUST):
        got = run(Query((EventSet(tuple(v)),), within=WithinTime(10), strategy=strategy), rows)
        assert len(got) == 6


def test_trailing_kleene_extends_maximally_t28() -> None:
    rows = [{"seq": 1, "ts": 1, "type": "A"}, {"seq": 2, "ts": 2, "type": "B", "V": 1},
            {"seq": 3, "ts": 3, "type": "B", "V": 2}]
    q = Query((Single(Var("a", "A")), Single(Var("b", "B", True))),
              (C(F("b", "V", True), "<", F("b", "V")),), within=WithinTime(10))
    for strategy in (NEXT, ROBUST):
        assert run(Query(q.pattern, q.where, within=q.within, strategy=strategy), rows) == {
            b(a=1, b=(2, 3))}


# --------------------------------------------------------------------------- SASE+ strategy examples


def sase_rows(spec: str) -> list[dict]:
    """'a1@1 b1@1 d1@1' → events of type A/B/D with attribute id (when given)."""
    rows = []
    for i, tok in enumerate(spec.split()):
        name, _, ident = tok.partition("@")
        row = {"seq": i, "ts": i, "type": name[0].upper()}
        if ident:
            row["id"] = int(ident)
        rows.append(row)
    return rows


def abc(strategy: Strategy, partition: bool = False) -> Query:
    return Query((Single(Var("a", "A")), Single(Var("b", "B", True)), Single(Var("c", "C"))),
                 partition_by=("id",) if partition else (), strategy=strategy)


@pytest.mark.parametrize(("spec", "partition", "strict", "part", "any_count"), [
    ("a1 b1 b2 c1", False, {b(a=0, b=(1, 2), c=3)}, {b(a=0, b=(1, 2), c=3)}, 3),
    ("a1 b1 d1 b2 c1", False, set(), set(), 3),
    ("a1@1 b1@1 b2@2 b3@1 c1@1", True, set(), {b(a=0, b=(1, 3), c=4)}, 3),
    ("a1@1 b1@1 d1@1 b3@1 c1@1", True, set(), set(), 3),
    ("a1 a2 b1 c1", False, {b(a=1, b=2, c=3)}, {b(a=1, b=2, c=3)}, 2),
    ("a1 b1 c1 c2", False, {b(a=0, b=1, c=2)}, {b(a=0, b=1, c=2)}, 2),
])
def test_sase_strategy_table(spec: str, partition: bool, strict: set, part: set, any_count: int) -> None:
    """T-S1..T-S6 of docs/semantics.md §3.6 for strict / partition contiguity and skip-till-any-match."""
    rows = sase_rows(spec)
    assert run(abc(STRICT, partition), rows) == strict
    assert run(abc(PART, partition), rows) == part
    assert len(run(abc(ANY, partition), rows)) == any_count


def test_sase_next_match_follows_the_ses_automaton() -> None:
    """T-S2..T-S6 under skip_till_next_match.  The contract's STNM is the SES automaton (Alg. 2): an
    instance in the accepting state fires nothing on c2, so T-S6 gives one match where SASE's
    ignore-proceed nondeterminism gives two — documented in the engine, tested here."""
    assert run(abc(NEXT), sase_rows("a1 b1 d1 b2 c1")) == {b(a=0, b=(1, 3), c=4)}
    assert run(abc(NEXT, True), sase_rows("a1@1 b1@1 b2@2 b3@1 c1@1")) == {b(a=0, b=(1, 3), c=4)}
    assert run(abc(NEXT), sase_rows("a1 a2 b1 c1")) == {b(a=0, b=2, c=3), b(a=1, b=2, c=3)}
    assert run(abc(NEXT), sase_rows("a1 b1 c1 c2")) == {b(a=0, b=1, c=2)}


def test_kleene_closure_all_subsets_and_greedy() -> None:
    """T-L4 / T-CX: a, W b-events, c: 2^W − 1 matches under skip-till-any-match, 1 under STNM."""
    w = 5
    rows = sase_rows("a " + " ".join(["b"] * w) + " c")
    assert len(run(abc(ANY), rows)) == 2 ** w - 1
    assert run(abc(NEXT), rows) == {b(a=0, b=tuple(range(1, w + 1)), c=w + 1)}


# ------------------------------------------------------------------------------------------- negation


def neg_query(strategy: Strategy = ANY) -> Query:
    """SEQ(A a, NOT(B b), C c, D d) WHERE b.x < c.y (lazy chain NFA Pattern 4)."""
    return Query((Single(Var("a", "A")), Absent((Var("b", "B"),)), Single(Var("c", "C")),
                  Single(Var("d", "D"))), (C(F("b", "x"), "<", F("c", "y")),), strategy=strategy)


@pytest.mark.parametrize(("events", "expected"), [
    ([("A", {}), ("B", {"x": 5}), ("C", {"y": 10}), ("D", {})], set()),
    ([("A", {}), ("B", {"x": 15}), ("C", {"y": 10}), ("D", {})], {b(a=0, c=2, d=3)}),
    ([("B", {"x": 5}), ("A", {}), ("C", {"y": 10}), ("D", {})], {b(a=1, c=2, d=3)}),
    ([("A", {}), ("C", {"y": 10}), ("B", {"x": 5}), ("D", {})], {b(a=0, c=1, d=3)}),
    ([("A", {}), ("B", {"x": 5}), ("A", {}), ("C", {"y": 10}), ("D", {})], {b(a=2, c=3, d=4)}),
])
def test_negation_between_elements_t_l7(events: list, expected: set) -> None:
    rows = [{"seq": i, "ts": i, "type": t, **attrs} for i, (t, attrs) in enumerate(events)]
    for strategy in (ANY, NEXT):
        assert run(neg_query(strategy), rows) == expected


def test_trailing_negation_uses_the_window_t_l8() -> None:
    q = Query((Single(Var("a", "A")), Single(Var("b", "B")), Absent((Var("d", "D"),))),
              within=WithinTime(5), strategy=ANY)
    assert run(q, [{"seq": 0, "ts": 1, "type": "A"}, {"seq": 1, "ts": 2, "type": "B"},
                   {"seq": 2, "ts": 4, "type": "D"}]) == set()
    assert run(q, [{"seq": 0, "ts": 1, "type": "A"}, {"seq": 1, "ts": 2, "type": "B"},
                   {"seq": 2, "ts": 7, "type": "D"}]) == {b(a=0, b=1)}
    # the window bound is inclusive: a D exactly at first_ts + 5 forbids
    assert run(q, [{"seq": 0, "ts": 1, "type": "A"}, {"seq": 1, "ts": 2, "type": "B"},
                   {"seq": 2, "ts": 6, "type": "D"}]) == set()


def test_negation_respects_the_partition() -> None:
    """The shoplifting query: SEQ(Shelf a, NOT(Register r), Exit e) PARTITION BY tag."""
    q = Query((Single(Var("a", "Shelf")), Absent((Var("r", "Register"),)), Single(Var("e", "Exit"))),
              partition_by=("tag",), within=WithinTime(12), strategy=NEXT)
    rows = [{"seq": 0, "ts": 0, "type": "Shelf", "tag": 1}, {"seq": 1, "ts": 1, "type": "Shelf", "tag": 2},
            {"seq": 2, "ts": 2, "type": "Register", "tag": 2}, {"seq": 3, "ts": 3, "type": "Exit", "tag": 2},
            {"seq": 4, "ts": 4, "type": "Exit", "tag": 1}]
    assert run(q, rows) == {b(a=0, e=4)}


# ------------------------------------------------------------------------------------ other features


def test_or_reports_the_alternative_that_bound() -> None:
    from exact.query.ast import AnyOf
    q = Query((Single(Var("a", "A")), AnyOf((Var("x", "X"), Var("y", None)))),
              (C(F("y", "v"), ">", L(1)),), within=WithinEvents(3), strategy=ANY)
    rows = [{"seq": 0, "ts": 0, "type": "A"}, {"seq": 1, "ts": 1, "type": "X", "v": 5},
            {"seq": 2, "ts": 2, "type": "Z", "v": 2}, {"seq": 3, "ts": 3, "type": "Z", "v": 0}]
    # seq 1 satisfies both alternatives: reported once, under the first; seq 3 is outside the window
    assert run(q, rows) == {b(a=0, x=1), b(a=0, y=2)}


def test_within_events_and_between() -> None:
    from exact.query.ast import Between
    rows = [{"seq": i * 2, "ts": i * 10, "type": t} for i, t in enumerate("ABAB")]
    q = Query((Single(Var("a", "A")), Single(Var("b", "B"))), within=WithinEvents(3), strategy=ANY)
    # seq gaps: A0 B2 A4 B6; last − first < 3
    assert run(q, rows) == {b(a=0, b=2), b(a=4, b=6)}
    q2 = Query(q.pattern, between=Between(10, 40), strategy=ANY)
    assert run(q2, rows) == {b(a=4, b=6)}


# ---------------------------------------------------------------------------------- the same, as text


@pytest.mark.parametrize(("text", "built"), [
    ("PATTERN SEQ({C c, P+ p, D d}, B b) WHERE c.PID = p.PID AND prev(p.V) < p.V AND p.PID = d.PID "
     "AND d.PID = b.PID WITHIN 15 days STRATEGY skip_till_any_match", p1(ANY)),
    ("PATTERN SEQ({C c, P+ p}, B b) WHERE c.PID = p.PID AND prev(p.V) < p.V AND p.PID = b.PID "
     "WITHIN 15 days", p1(NEXT, with_d=False)),
    ("PATTERN SEQ(GOOG s1, GOOG s2, GOOG+ s3, GOOG s4) WHERE s1.P < s2.P AND s2.P < s3.P "
     "AND prev(s3.P) < s3.P AND s1.V < s4.V AND s2.V < s4.V AND s3.V < s4.V WITHIN 100 ms "
     "STRATEGY robust_skip_till_next_match", p3(ROBUST)),
    ("PATTERN SEQ({C c, P+ p}, B b) PARTITION BY PID WITHIN 15 days STRATEGY partition_contiguity",
     ch1_query(PART)),
    ("PATTERN SEQ(A a, NOT(B b), C c, D d) WHERE b.x < c.y STRATEGY skip_till_any_match", neg_query()),
])
def test_examples_in_the_query_language(text: str, built: Query) -> None:
    """The examples above, written in the query language, are the same ASTs."""
    from exact.query.language import parse

    assert parse(text) == built
