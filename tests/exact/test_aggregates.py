"""SASE+ operands over Kleene runs — ``v[i]``, ``v[1]``, ``v[i-1]``, ``v[last]``, ``count``, and ``sum``,
``avg``, ``min``, ``max`` over a run or over ``v[..i-1]`` — held to the definition in
docs/query-language.md ("Kleene runs and aggregates").

The expected answers were worked out by hand from the definition; :func:`ref` checks them against the
brute-force reference (:mod:`exact.reference`) and holds the exact engine, under every option, to the
reference.  The worked examples are the SASE+ paper's (Agrawal et al. 2008): Query 2 (transitive closure
over shipments), Query 3 on the stream of its Fig. 3 (reconstructed in docs/semantics.md, T-Q3-a), the
``max`` variant of Fig. 6, the running sums of Fig. 5, and the iterator predicates of Table 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.engine import evaluate, evaluate_table
from exact.query.ast import (
    Aggregate,
    Condition,
    Field,
    Literal,
    Query,
    RunEvent,
    Strategy,
)
from exact.query.language import parse
from exact.query.operands import aggregate
from exact.reference import reference_matches, stream_table
from sketch.answer.event_sources import TableSource
from sketch.answer.verify import verify
from sketch.evaluate import TreeIndex, approximate
from tests.generators import index_streams, run_queries, scaled
from tests.helpers import build_tree, inside_candidate

STRICT, PART, NEXT = Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY, Strategy.SKIP_TILL_NEXT_MATCH
ROBUST, ANY = Strategy.ROBUST_SKIP_TILL_NEXT_MATCH, Strategy.SKIP_TILL_ANY_MATCH
MIN = 60_000_000  # one minute in microseconds


def ref(query: Query | str, rows: list[dict], strategy: Strategy | None = None) -> set[tuple]:
    """The reference's matches as a set of binding tuples ((var, seqs), ...) — and the engine's under every
    option (two-phase or not, prefilter or not, the vectorised chain or the kernels alone), which must be
    the same."""
    q = parse(query) if isinstance(query, str) else query
    if strategy is not None:
        q = replace(q, strategy=strategy)
    table = stream_table(rows)
    expected = reference_matches(q, table)
    for two_phase in (True, False):
        for prefilter in (True, False):
            assert evaluate(q, table, two_phase=two_phase, prefilter=prefilter) == expected, (two_phase,
                                                                                             prefilter)
    assert evaluate_table(q, table, chains=False).matches() == expected
    return {m.bindings for m in expected}


def b(**kw: object) -> tuple:
    """b(a=(1, 2), b=6) → (("a", (1, 2)), ("b", (6,))), in keyword order (= pattern order)."""
    return tuple((k, v if isinstance(v, tuple) else (v,)) for k, v in kw.items())


def ab(pairs: Iterable[tuple[tuple[int, ...], int]]) -> set[tuple]:
    return {b(a=a, b=bb) for a, bb in pairs}


# -------------------------------------------------------------------------------- SASE+ Query 3 (Fig. 3)

# Fig. 3 of the paper as docs/semantics.md reconstructs it (T-Q3-a): one symbol, a minute apart.  The language
# has no arithmetic, so the "80 %" of b.volume < 80%*a[a.LEN].volume is applied at ingest: volume_80pct.
FIG3 = [(100, 1010), (120, 990), (120, 1005), (121, 999), (120, 999), (125, 750), (120, 950), (120, 700)]
FIG3_ROWS = [{"seq": i + 1, "ts": (i + 1) * MIN, "type": "Stock", "symbol": "Goog", "price": p, "volume": v,
              "volume_80pct": 0.8 * v} for i, (p, v) in enumerate(FIG3)]

Q3 = """PATTERN SEQ(Stock+ a, Stock b)
WHERE a[1].volume > 1000 AND a[i].price > avg(a[..i-1].price) AND b.volume < a[last].volume_80pct
PARTITION BY symbol
WITHIN 1 hour"""

R1, R2, R3 = b(a=(1, 2, 3, 4, 5), b=6), b(a=(3, 4), b=6), b(a=(1, 2, 3, 4, 5, 6, 7), b=8)


@pytest.mark.parametrize("strategy", [NEXT, ROBUST], ids=lambda s: s.value)
def test_query_3_finds_r1_r2_r3_of_fig_3(strategy: Strategy) -> None:
    """R1 and R2 end at e6, R3 at e8.  R2 skips e5 (120 is not above avg(e3, e4) = 120.5, and 999 is not
    below 80 % of e4's 999); a[e1..e4] b=e6 — the paper's "wrong result" — is no match, since e5 extends
    a[e1..e4] (120 > 461/4)."""
    assert ref(Q3, FIG3_ROWS, strategy) == {R1, R2, R3}


@pytest.mark.parametrize("strategy", [STRICT, PART], ids=lambda s: s.value)
def test_query_3_under_contiguity_loses_r2_t_q3_b(strategy: Strategy) -> None:
    assert ref(Q3, FIG3_ROWS, strategy) == {R1, R3}


def test_query_3_all_matches_hold_the_wrong_result_but_next_match_does_not() -> None:
    every = ref(Q3, FIG3_ROWS, ANY)
    assert {R1, R2, R3} < every
    assert b(a=(1, 2, 3, 4), b=6) in every  # a match of Def. 3.2, ruled out only by the strategy


def test_fig_5_running_sums_decide_e5() -> None:
    """Fig. 5: after e4, R1 holds sum 461 over 4 events and R2 sum 241 over 2; e5 (price 120) is above
    R1's average 115.25 and below R2's 120.5."""
    r1, r2 = [100, 120, 120, 121], [120, 121]
    assert (aggregate("sum", r1), len(r1), aggregate("avg", r1)) == (461, 4, 115.25)
    assert (aggregate("sum", r2), len(r2), aggregate("avg", r2)) == (241, 2, 120.5)
    grown = parse(Q3.replace("b.volume < a[last].volume_80pct", "b.volume < 800"))
    # a run from e1 takes e5, one from e3 skips it: a[e3, e4] b = e6 (750 < 800) and a[e1..e5] b = e6
    assert {R1, R2} <= ref(grown, FIG3_ROWS, NEXT)


def test_fig_6_max_variant() -> None:
    """Fig. 6 replaces avg by max: after e4 both runs hold max 121 (e3 does not extend e1's run: 120 is not
    above 120) and both end with b = e6."""
    q = Q3.replace("avg(a[..i-1].price)", "max(a[..i-1].price)")
    assert ref(q, FIG3_ROWS, NEXT) == {b(a=(1, 2, 4), b=6), b(a=(3, 4), b=6)}
    assert ref(q, FIG3_ROWS, ROBUST) == {b(a=(1, 2, 4), b=6), b(a=(3, 4), b=6)}
    assert ref(q, FIG3_ROWS, PART) == set()  # e3 ends e1's contiguous run, e5 ends e3's
    assert aggregate("max", [100, 120, 121]) == aggregate("max", [120, 121]) == 121


# ------------------------------------------------------------------------------------ SASE+ Query 2

Q2 = """PATTERN SEQ(Alert a, Shipment+ b)
WHERE a.kind = 'contaminated' AND b[1].from = a.site AND b[i].from = b[i-1].to
WITHIN 3 hours
STRATEGY skip_till_any_match"""

# T-S7 of the digest: an alert at site S, then shipments S→P, P→Q, P→R, T→U, R→V ten minutes apart
Q2_ROWS = [{"seq": 0, "ts": 0, "type": "Alert", "kind": "contaminated", "site": "S"}] + [
    {"seq": i + 1, "ts": (i + 1) * 10 * MIN, "type": "Shipment", "from": f, "to": t}
    for i, (f, t) in enumerate([("S", "P"), ("P", "Q"), ("P", "R"), ("T", "U"), ("R", "V")])]


def test_query_2_every_series_of_infected_shipments() -> None:
    """Skip-till-any-match: every chain that starts at the contaminated site, each shipment leaving where
    the previous one arrived: S→P; S→P, P→Q; S→P, P→R; S→P, P→R, R→V."""
    alert = {"a": (0,)}
    got = ref(Q2, Q2_ROWS)
    assert got == {tuple((alert | {"b": bs}).items()) for bs in [(1,), (1, 2), (1, 3), (1, 3, 5)]}


def test_query_2_under_the_other_strategies() -> None:
    # skip-till-next-match grows the trailing run greedily (S→P, P→Q) and R→V cannot follow Q
    assert ref(Q2, Q2_ROWS, NEXT) == ref(Q2, Q2_ROWS, ROBUST) == {b(a=0, b=(1, 2))}
    assert ref(Q2, Q2_ROWS, STRICT) == {b(a=0, b=1), b(a=0, b=(1, 2))}


def test_query_2_b1_is_the_first_shipment_only() -> None:
    """b[1].from = a.site constrains the first shipment, not each (∀ would need every shipment to leave S)."""
    rows = [r | {"site": "X"} if r["type"] == "Alert" else r for r in Q2_ROWS]
    assert ref(Q2, rows) == set()
    every = Q2.replace("b[1].from = a.site", "b.from = a.site")
    assert ref(every, Q2_ROWS) == {b(a=0, b=1)}


# --------------------------------------------------------------------- SASE+ Table 1 iterator predicates

# Two symbols interleaved; a run starts at price 500 (the paper's a[1].price % 500 == 0) and ends at a trade
# with volume below 150.  G: 1, 3, 5, 6, 8; M: 2, 4, 7, 9.
TABLE1 = [(1, "G", 500, 300), (2, "M", 500, 300), (3, "G", 510, 300), (4, "M", 510, 300), (5, "G", 506, 300),
          (6, "G", 520, 100), (7, "M", 505, 100), (8, "G", 530, 120), (9, "M", 515, 130)]
TABLE1_ROWS = [{"seq": s, "ts": s, "type": "Stock", "symbol": y, "price": p, "volume": v}
               for s, y, p, v in TABLE1]
PREDICATES = {
    "p2": "a[i].price > a[i-1].price",
    "p3 max": "a[i].price > max(a[..i-1].price)",
    "p3 min": "a[i].price > min(a[..i-1].price)",
    "p3 avg": "a[i].price > avg(a[..i-1].price)",
}


@pytest.mark.parametrize(("predicate", "strategy", "expected"), [
    # partition contiguity: a run dies at the first trade of its symbol that neither extends nor ends it
    ("p2", PART, [((2, 4), 7)]),
    ("p3 max", PART, [((2, 4), 7)]),
    ("p3 min", PART, [((1, 3, 5), 6), ((1, 3, 5, 6), 8), ((2, 4), 7), ((2, 4, 7), 9)]),
    ("p3 avg", PART, [((1, 3, 5), 6), ((1, 3, 5, 6), 8), ((2, 4), 7)]),
    # skip till next match: a trade that cannot extend the run is skipped (G's 506 under p2 and max)
    ("p2", NEXT, [((1, 3), 6), ((1, 3, 6), 8), ((2, 4), 7)]),
    ("p3 max", NEXT, [((1, 3), 6), ((1, 3, 6), 8), ((2, 4), 7)]),
    ("p3 min", NEXT, [((1, 3, 5), 6), ((1, 3, 5, 6), 8), ((2, 4), 7), ((2, 4, 7), 9)]),
    ("p3 avg", NEXT, [((1, 3, 5), 6), ((1, 3, 5, 6), 8), ((2, 4), 7)]),
])
def test_table_1_iterator_predicates(predicate: str, strategy: Strategy, expected: list) -> None:
    """The Table 1 template PATTERN(STOCK+ a[], STOCK b) WHERE [symbol] ∧ a[1].price ... ∧ P_a[i] ∧
    b.volume < 150.  The trade b that ends a run may also extend it (take-proceed), so a run can end at
    two trades (G at 6 and 8)."""
    q = (f"PATTERN SEQ(Stock+ a, Stock b) WHERE a[1].price = 500 AND {PREDICATES[predicate]} "
         "AND b.volume < 150 PARTITION BY symbol WITHIN 20 EVENTS")
    assert ref(q, TABLE1_ROWS, strategy) == ab(expected)


# ------------------------------------------------------------------ every operand under every strategy

# seq: type x k — partition 1 holds A 0, 1, 3 and B 4; partition 2 holds A 2 and B 5
S = [("A", 2, 1), ("A", 1, 1), ("A", 3, 2), ("A", 4, 1), ("B", 3, 1), ("B", 5, 2)]
S_ROWS = [{"seq": i, "ts": i, "type": t, "x": x, "k": k} for i, (t, x, k) in enumerate(S)]


def _s_query(condition: str) -> str:
    return f"PATTERN SEQ(A+ a, B b) WHERE {condition} PARTITION BY k"


# expected per strategy: (strict, partition contiguity, skip till next, robust skip till next, all)
OPERAND_CASES = {
    # per event, every event of the run (∀): A 1 (x = 1) can be in no run
    "a[i].x >= 2": ([((3,), 4)], [((3,), 4), ((2,), 5)], [((0, 3), 4), ((3,), 4), ((2,), 5)],
                    [((0, 3), 4), ((3,), 4), ((2,), 5)],
                    [((0,), 4), ((3,), 4), ((0, 3), 4), ((2,), 5)]),
    # per event from the second on, against the first
    "a[i].x > a[1].x": ([((3,), 4)], [((3,), 4), ((1, 3), 4), ((2,), 5)],
                        [((0, 3), 4), ((1, 3), 4), ((3,), 4), ((2,), 5)],
                        [((0, 3), 4), ((1, 3), 4), ((3,), 4), ((2,), 5)],
                        [((0,), 4), ((1,), 4), ((3,), 4), ((0, 3), 4), ((1, 3), 4), ((2,), 5)]),
    # the first event alone: a run must start below 2
    "a[1].x < 2": ([], [((1, 3), 4)], [((1, 3), 4)], [((1, 3), 4)], [((1,), 4), ((1, 3), 4)]),
    # consecutive pairs, falling
    "a[i].x < a[i-1].x": ([((3,), 4)], [((3,), 4), ((2,), 5)],
                          [((0, 1), 4), ((1,), 4), ((3,), 4), ((2,), 5)],
                          [((0, 1), 4), ((1,), 4), ((3,), 4), ((2,), 5)],
                          [((0,), 4), ((1,), 4), ((3,), 4), ((0, 1), 4), ((2,), 5)]),
    # the finished run against the next element: the greedy run takes A 3 (x = 4) and then fails at B 4;
    # robust skip-till-next backtracks to the runs that end below 3
    "b.x > a[last].x": ([], [((2,), 5)], [((2,), 5)], [((0, 1), 4), ((1,), 4), ((2,), 5)],
                        [((0,), 4), ((1,), 4), ((0, 1), 4), ((2,), 5)]),
    "count(a) = 2": ([], [((1, 3), 4)], [((1, 3), 4)], [((0, 1), 4), ((1, 3), 4)],
                     [((0, 1), 4), ((0, 3), 4), ((1, 3), 4)]),
    "sum(a.x) >= 5": ([], [((1, 3), 4), ((0, 1, 3), 4)], [((0, 1, 3), 4), ((1, 3), 4)],
                      [((0, 1, 3), 4), ((1, 3), 4)], [((0, 3), 4), ((1, 3), 4), ((0, 1, 3), 4)]),
    # 7 / 3 < 3 for a = (0, 1, 3)
    "avg(a.x) < b.x": ([], [((1, 3), 4), ((0, 1, 3), 4), ((2,), 5)], [((0, 1, 3), 4), ((1, 3), 4), ((2,), 5)],
                       [((0, 1, 3), 4), ((1, 3), 4), ((2,), 5)],
                       [((0,), 4), ((1,), 4), ((0, 1), 4), ((1, 3), 4), ((0, 1, 3), 4), ((2,), 5)]),
    "min(a.x) >= 2": ([((3,), 4)], [((3,), 4), ((2,), 5)], [((3,), 4), ((2,), 5)],
                      [((0, 3), 4), ((3,), 4), ((2,), 5)], [((0,), 4), ((3,), 4), ((0, 3), 4), ((2,), 5)]),
    "max(a.x) > 3": ([((3,), 4)], [((3,), 4), ((1, 3), 4), ((0, 1, 3), 4)],
                     [((0, 1, 3), 4), ((1, 3), 4), ((3,), 4)], [((0, 1, 3), 4), ((1, 3), 4), ((3,), 4)],
                     [((3,), 4), ((0, 3), 4), ((1, 3), 4), ((0, 1, 3), 4)]),
}


@pytest.mark.parametrize("condition", list(OPERAND_CASES))
@pytest.mark.parametrize("k", range(5), ids=[s.value for s in (STRICT, PART, NEXT, ROBUST, ANY)])
def test_every_operand_under_every_strategy(condition: str, k: int) -> None:
    strategy = (STRICT, PART, NEXT, ROBUST, ANY)[k]
    assert ref(_s_query(condition), S_ROWS, strategy) == ab(OPERAND_CASES[condition][k])


# x = 2, 5, 3, 4 then B: the four aggregates over a[..i-1] keep different runs (the triple 0, 1, 3 passes
# avg(2, 5) = 3.5 < 4 but not max = 5; 0, 1, 2, 3 passes only min)
BEFORE_ROWS = [{"seq": i, "ts": i, "type": "A", "x": x, "k": 1} for i, x in enumerate([2, 5, 3, 4])] + [
    {"seq": 4, "ts": 4, "type": "B", "k": 1}]
BEFORE_ALL = {
    "sum": [(0, 1), (0, 2), (0, 3), (2, 3)],
    "avg": [(0, 1), (0, 2), (0, 3), (2, 3), (0, 1, 3), (0, 2, 3)],
    "max": [(0, 1), (0, 2), (0, 3), (2, 3), (0, 2, 3)],
    "min": [(0, 1), (0, 2), (0, 3), (2, 3), (0, 1, 2), (0, 1, 3), (0, 2, 3), (0, 1, 2, 3)],
}
BEFORE_NEXT = {
    "sum": [(0, 1), (1,), (2, 3), (3,)],
    "avg": [(0, 1, 3), (1,), (2, 3), (3,)],
    "max": [(0, 1), (1,), (2, 3), (3,)],
    "min": [(0, 1, 2, 3), (1,), (2, 3), (3,)],
}


@pytest.mark.parametrize("func", ["sum", "avg", "max", "min"])
def test_aggregates_over_the_events_before_the_current_one(func: str) -> None:
    q = f"PATTERN SEQ(A+ a, B b) WHERE a[i].x > {func}(a[..i-1].x) PARTITION BY k"
    singles = [(i,) for i in range(4)]
    assert ref(q, BEFORE_ROWS, ANY) == ab((a, 4) for a in singles + BEFORE_ALL[func])
    # one partition: partition contiguity is strict contiguity; runs ending right before B
    contiguous = [(3,), (2, 3)] + ([(0, 1, 2, 3)] if func == "min" else [])
    assert ref(q, BEFORE_ROWS, STRICT) == ref(q, BEFORE_ROWS, PART) == ab((a, 4) for a in contiguous)
    # every condition is per event, so a skipped event could never complete a match: robust = next
    assert ref(q, BEFORE_ROWS, NEXT) == ref(q, BEFORE_ROWS, ROBUST) == ab((a, 4) for a in BEFORE_NEXT[func])


# ------------------------------------------------------------------------------ when a condition is decided


def _letters(spec: str) -> list[dict]:
    """'a=1 b c=null' → events of types A, B, C with attribute x (when given), seq = ts = position."""
    rows = []
    for i, token in enumerate(spec.split()):
        name, _, x = token.partition("=")
        row: dict = {"seq": i, "ts": i, "type": name[0].upper()}
        if x:
            row["x"] = None if x == "null" else float(x) if "." in x else int(x)
        rows.append(row)
    return rows


def test_a_trailing_run_grows_first_and_is_judged_whole() -> None:
    """count(a) <= 2 on a trailing run of three: skip-till-next-match takes all three and reports nothing
    (the aggregate never shortens the run); robust skip-till-next-match backtracks to the first two."""
    q, rows = "PATTERN SEQ(B b, A+ a) WHERE count(a) <= 2 WITHIN 10 EVENTS", _letters("b a a a")
    assert ref(q, rows, NEXT) == set()
    assert ref(q, rows, ROBUST) == {b(b=0, a=(1, 2))}
    assert ref(q, rows, STRICT) == {b(b=0, a=1), b(b=0, a=(1, 2))}
    assert len(ref(q, rows, ANY)) == 6


def test_a_finished_run_is_judged_when_the_next_element_begins() -> None:
    """count(a) >= 3 is checked as b binds: the B after two A's cannot end the run, so it is skipped."""
    q, rows = "PATTERN SEQ(A+ a, B b) WHERE count(a) >= 3", _letters("a a b a b")
    for strategy in (NEXT, ROBUST, ANY):
        assert ref(q, rows, strategy) == {b(a=(0, 1, 3), b=4)}
    assert ref(q, rows, STRICT) == set()


def test_an_aggregate_does_not_guide_the_take() -> None:
    """count(a) <= 1: the run from the first A takes the second (no per-event condition stops it) and then
    fails; only the run that starts at the second A ends well.  Robust keeps both."""
    q, rows = "PATTERN SEQ(A+ a, B b) WHERE count(a) <= 1", _letters("a a b")
    assert ref(q, rows, NEXT) == {b(a=1, b=2)}
    assert ref(q, rows, ROBUST) == ref(q, rows, ANY) == {b(a=0, b=2), b(a=1, b=2)}


def test_event_set_run_closes_when_the_next_element_begins() -> None:
    """A Kleene variable in {…}: B 3 (x = 4) is not below a[last] = 3, so it is skipped and a grows to 9."""
    q = "PATTERN SEQ({A+ a, C c}, B b) WHERE count(a) >= 2 AND b.x < a[last].x"
    rows = _letters("a=5 c a=3 b=4 a=9 b=4")
    expected = {b(a=(0, 2, 4), c=1, b=5), b(a=(2, 4), c=1, b=5)}
    assert ref(q, rows, NEXT) == ref(q, rows, ROBUST) == expected
    assert ref(q, rows, ANY) == expected | {b(a=(0, 4), c=1, b=5)}


def test_negation_reads_the_finished_run() -> None:
    """NOT(C c) with c.x > max(a.x): C 2 (x = 3) is below max(1, 5) and forbids nothing; C 5 (x = 2) is above
    max(1) and drops the match a = A 4, b = B 6."""
    q = "PATTERN SEQ(A+ a, NOT(C c), B b) WHERE c.x > max(a.x)"
    rows = _letters("a=1 a=5 c=3 b a=1 c=2 b")
    assert ref(q, rows, NEXT) == {b(a=(0, 1), b=3), b(a=1, b=3)}


def test_run_ends_against_a_later_element_expt_4_p3_star() -> None:
    """Expt 4's p3*: c.price > a[1].price ∧ c.price < a[a.LEN].price."""
    q = "PATTERN SEQ(A+ a, B b, C c) WHERE c.x > a[1].x AND c.x < a[last].x"
    rows = _letters("a=1 a=9 b c=5 a=3 b c=2")
    for strategy in (STRICT, NEXT, ROBUST):
        assert ref(q, rows, strategy) == {b(a=(0, 1), b=2, c=3)}


def test_or_alternative_aggregates_apply_when_it_is_bound() -> None:
    q, rows = "PATTERN SEQ(OR(A+ a, C c), B b) WHERE count(a) >= 2", _letters("a a b c b")
    assert ref(q, rows, NEXT) == {b(a=(0, 1), b=2), b(c=3, b=4)}
    assert ref(q, rows, ANY) == {b(a=(0, 1), b=2), b(a=(0, 1), b=4), b(c=3, b=4)}


# ------------------------------------------------------------------------------------- values and nulls


def test_nulls_are_skipped_and_an_aggregate_of_nothing_is_null() -> None:
    q, rows = "PATTERN SEQ(B b, A+ a) WHERE avg(a.x) = 2 WITHIN 10 EVENTS", _letters("b a=1 a=null a=3")
    assert ref(q, rows, NEXT) == {b(b=0, a=(1, 2, 3))}
    assert ref(q, rows, ANY) == {b(b=0, a=(1, 2, 3)), b(b=0, a=(1, 3))}
    nothing = "PATTERN SEQ(B b, A+ a) WHERE min(a.x) = null WITHIN 10 EVENTS"
    assert ref(nothing, _letters("b a=null"), ANY) == set()  # null equals nothing, not even null
    assert ref("PATTERN SEQ(B b, A+ a) WHERE count(a) = 2 WITHIN 10 EVENTS", _letters("b a=null a"),
               NEXT) == {b(b=0, a=(1, 2))}  # count counts events, with or without the attribute


def test_integer_and_float_arithmetic() -> None:
    """Integers sum exactly and average to the nearest float; floats sum left to right in float64."""
    assert ref("PATTERN SEQ(B b, A+ a) WHERE avg(a.x) = 1.5 WITHIN 10 EVENTS", _letters("b a=1 a=2"), NEXT)
    assert not ref("PATTERN SEQ(B b, A+ a) WHERE sum(a.x) = 0.3 WITHIN 10 EVENTS", _letters("b a=0.1 a=0.2"),
                   NEXT)  # 0.1 + 0.2 = 0.30000000000000004
    assert aggregate("sum", [2**62, 2**62, 2**62]) == 3 * 2**62  # no 64-bit wrap-around
    assert aggregate("avg", [1, 2, 2]) == 5 / 3
    assert isinstance(aggregate("max", [1, 3, 2]), int)


def test_aggregate_values() -> None:
    assert aggregate("sum", [None, 1, None, 2]) == 3
    assert aggregate("avg", [None]) is None
    assert aggregate("sum", [1, "x"]) is None  # sum and avg need numbers
    assert aggregate("sum", [True, 1]) is None  # a boolean is not a number
    assert aggregate("max", ["b", "c", "a"]) == "c" and aggregate("min", [False, True]) is False
    assert aggregate("min", [1, "a"]) is None  # values of one kind only
    assert math.isnan(aggregate("max", [1.0, math.nan, 2.0]))
    assert math.isnan(aggregate("avg", [1.0, math.nan]))


# ------------------------------------------------------------------------------------- normalisation


def test_run_conditions_are_kept_apart_by_normalisation() -> None:
    from exact.query.normalize import normalize

    q = parse("PATTERN SEQ(A+ a, NOT(C c), B b) WHERE a[1].x = 1 AND count(a) > 1 AND c.x > max(a.x) "
              "AND a.x = b.x")
    plan = normalize(q)
    assert plan.run_conditions == (Condition(RunEvent("a", "x", "first"), "=", Literal(1)),
                                   Condition(Aggregate("count", "a"), ">", Literal(1)))
    assert plan.negative_relations == ((Condition(Field("c", "x"), ">", Aggregate("max", "a", "x")),),)
    assert all(not c.has_run_operand() for c in plan.relations + plan.prevs)
    assert all(not c.has_run_operand() for v in plan.positives for c in v.properties)


def test_exact_integer_sums_past_int64_fall_back_to_python_integers() -> None:
    """Three values of 2**62 sum to 3·2**62, past int64: the kernels notice the overflow and the query is
    evaluated again by the same kernels in plain Python, with Python's integers."""
    big = 2**62
    rows = [{"seq": 0, "ts": 0, "type": "B"}] + [{"seq": i, "ts": i, "type": "A", "x": big}
                                                  for i in (1, 2, 3)]
    q = "PATTERN SEQ(B b, A+ a) WHERE sum(a.x) {} WITHIN 10 EVENTS"
    three, two = repr(float(3 * big)), repr(float(2 * big))  # both exact as floats
    assert ref(q.format(f"= {three}"), rows, NEXT) == {b(b=0, a=(1, 2, 3))}
    assert ref(q.format(f">= {three}"), rows, ANY) == {b(b=0, a=(1, 2, 3))}
    assert ref(q.format(f"< {three}"), rows, ANY) == {b(b=0, a=a) for a in [(1,), (2,), (3,), (1, 2), (1, 3),
                                                                             (2, 3)]}
    assert ref(q.format(f"= {two}"), rows, ROBUST) == {b(b=0, a=(1, 2))}
    # the average of the three is 2**62 again, exactly
    assert ref(q.replace("sum", "avg").format(f"= {big}"), rows, NEXT) == {b(b=0, a=(1, 2, 3))}
    # a literal past int64 (the language has none, an AST may) is compared exactly, in Python
    exact = replace(parse(q.format("= 0")),
                    where=(Condition(Aggregate("sum", "a", "x"), "=", Literal(3 * big)),))
    assert ref(exact, rows, NEXT) == {b(b=0, a=(1, 2, 3))}


def test_integer_averages_are_the_nearest_float() -> None:
    """Averages of integers whose sum passes 2**53 (timestamps in microseconds do) are ``int / int``: the
    float nearest the exact quotient, and integers compare exactly with floats."""
    base = 1_700_000_000_000_000  # microseconds in 2023: six of them sum past 2**53
    xs = [base + d for d in (1, 2, 2, 3, 5, 7, 11)]
    rows = [{"seq": 0, "ts": 0, "type": "B"}] + [{"seq": i + 1, "ts": i + 1, "type": "A", "x": x}
                                                  for i, x in enumerate(xs)]
    for n in range(1, len(xs) + 1):
        avg = sum(xs[:n]) / n
        assert avg == aggregate("avg", xs[:n])
        run = tuple(range(1, n + 1))
        for lit, expected in ((avg, True), (math.nextafter(avg, math.inf), False),
                              (math.nextafter(avg, -math.inf), False)):
            q = f"PATTERN SEQ(B b, A+ a) WHERE avg(a.x) = {lit!r} AND count(a) = {n} WITHIN 10 EVENTS"
            assert (b(b=0, a=run) in ref(q, rows, ANY)) is expected, (n, lit)
    # an integer against a float: 2**53 + 1 is above the float 2**53
    q = f"PATTERN SEQ(B b, A+ a) WHERE max(a.x) > {float(2**53)!r} WITHIN 10 EVENTS"
    assert ref(q, [rows[0], {"seq": 1, "ts": 1, "type": "A", "x": 2**53 + 1}], NEXT) == {b(b=0, a=1)}


def test_values_of_each_kind() -> None:
    """min/max of strings by code point, of booleans; NaN propagates; mixed kinds give null."""
    def rows_of(values: list) -> list[dict]:
        return [{"seq": 0, "ts": 0, "type": "B"}] + [{"seq": i + 1, "ts": i + 1, "type": "A", "x": v}
                                                      for i, v in enumerate(values)]

    def whole(cond: str, values: list, strategy: Strategy = NEXT) -> bool:
        q = f"PATTERN SEQ(B b, A+ a) WHERE {cond} WITHIN 10 EVENTS"
        return b(b=0, a=tuple(range(1, len(values) + 1))) in ref(q, rows_of(values), strategy)

    words = ["pear", "Zebra", "apple", "élan"]
    assert whole("max(a.x) = 'élan'", words) and whole("min(a.x) = 'Zebra'", words)
    assert whole("min(a.x) < 'a'", words) and not whole("min(a.x) > 'a'", words)
    assert whole("max(a.x) > 'pear'", words) and whole("a[last].x = 'élan'", words)
    assert whole("a[i].x > min(a[..i-1].x)", ["b", "c", "d"])
    assert whole("max(a.x) = true", [False, True, False]) and whole("min(a.x) = false", [True, False])
    assert not whole("sum(a.x) >= 0", [True, False])  # a boolean is no number
    nan = [1.0, math.nan, 2.0]
    for cond in ("max(a.x) > 0", "max(a.x) <= 0", "avg(a.x) = avg(a.x)", "sum(a.x) < 10"):
        assert not whole(cond, nan)
    assert whole("min(a.x) != 0", nan)  # NaN is unequal to everything
    assert whole("sum(a.x) = 3.5", [1, 2.5]) and whole("avg(a.x) = 1.75", [1.0, 2.5])


# ------------------------------------------------------------------------------------ the approximate index


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@scaled(60)
@given(data=st.data())
def test_the_index_ignores_run_conditions_and_loses_no_match(strategy: Strategy, data: st.DataObject) -> None:
    """Run conditions only narrow exact matches; the tree cannot see them, so it answers as for the query
    without them — and every reference match lies inside a candidate interval."""
    query = data.draw(run_queries(strategy))
    rows = data.draw(index_streams(max_events=9))
    leaf = data.draw(st.integers(1, 4))
    tree = build_tree(rows, leaf, tiny=data.draw(st.booleans()))
    approx = approximate(query, TreeIndex(tree, 0))
    plain = replace(query, where=tuple(c for c in query.where if not c.has_run_operand()))
    without = approximate(plain, TreeIndex(tree, 0))
    assert approx.starts.tolist() == without.starts.tolist()
    assert approx.ends.tolist() == without.ends.tolist()
    if not rows:
        return
    for m in reference_matches(query, stream_table(rows)):
        assert inside_candidate(approx, m), (m, approx.candidate_spans())


def test_verification_evaluates_run_operands() -> None:
    """Verification runs the engine on the candidate regions: the run conditions narrow its answer as they
    narrow the engine's on the whole stream."""
    rows = [{"seq": i, "ts": i, "type": t, "x": i} for i, t in enumerate("AABAAAB")]
    query = parse("PATTERN SEQ(A+ a, B b) WHERE count(a) >= 3 AND sum(a.x) > 9")
    approx = approximate(query, TreeIndex(build_tree(rows, 2, tiny=False), 0))
    found = verify(approx, TableSource(stream_table(rows)))
    assert found.matches == evaluate(query, stream_table(rows))
    # B 2 ends no run (two A before it); B 6 ends the runs from A 0, 1 and 3, not the one from A 4
    assert {m.bindings for m in found.matches} == ref(query, rows) == {
        b(a=(0, 1, 3, 4, 5), b=6), b(a=(1, 3, 4, 5), b=6), b(a=(3, 4, 5), b=6)}
