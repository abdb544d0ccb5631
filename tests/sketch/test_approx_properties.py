"""Property tests of approximate evaluation and verification on random streams and random queries.

Tiny leaves (C = 2..4) make chains cross and share leaves; tiny Bloom filters (folded down to 8 bits, one
hash) force false positives.  For every construct and strategy:

* verified == exact (same matches, same bindings);
* no false negatives: every exact match lies inside the candidate span of the unit it starts in (start and
  end), so inside a candidate interval; approximate ``exists: false`` implies no exact match;
* the perfect (false-positive-free) index gives a subset of the tree's candidates and is just as complete.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exact.engine import Match, evaluate
from exact.query.ast import (
    Absent,
    AnyOf,
    Between,
    Condition,
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
from exact.reference import stream_table
from sketch.answer.verify import TableSource, verify
from sketch.evaluate import Approximation, PerfectIndex, TreeIndex, approximate
from sketch.tree import BloomTree, TreeConfig

TYPES = ("A", "B", "C", "D")  # D is never named by a query: it is noise the tree must see past
QUERY_TYPES = ("A", "B", "C")
OPS = ("=", "!=", "<", "<=", ">", ">=")


@st.composite
def streams(draw: st.DrawFn, max_events: int = 16) -> list[dict]:
    n = draw(st.integers(0, max_events))
    rows = []
    ts = draw(st.integers(0, 5))
    for seq in range(n):
        rows.append({"seq": seq, "ts": ts, "type": draw(st.sampled_from(TYPES)),
                     "x": draw(st.one_of(st.none(), st.integers(0, 3))),
                     "k": draw(st.sampled_from((1, 2)))})
        ts += draw(st.sampled_from((0, 1, 1, 2, 3)))
    return rows


@st.composite
def queries(draw: st.DrawFn, strategy: Strategy | None = None) -> Query:
    counter = iter(range(100))

    def var(kleene_ok: bool = True) -> Var:
        typ = draw(st.sampled_from(QUERY_TYPES + (None,)))
        kleene = kleene_ok and draw(st.integers(0, 3)) == 0
        return Var(f"v{next(counter)}", typ, kleene)

    elements: list = []
    for i in range(draw(st.integers(1, 3))):
        if i > 0 and draw(st.integers(0, 4)) == 0:
            elements.append(Absent((Var(f"n{next(counter)}", draw(st.sampled_from(QUERY_TYPES + (None,)))),)))
        kind = draw(st.sampled_from(("single", "single", "set", "or")))
        if kind == "single":
            elements.append(Single(var()))
        elif kind == "set":
            elements.append(EventSet((var(), var())))
        else:
            elements.append(AnyOf((var(False), var(False))))
    within = draw(st.sampled_from((None, "time", "events")))
    if within == "time":
        within = WithinTime(draw(st.integers(0, 10)))
    elif within == "events":
        within = WithinEvents(draw(st.integers(1, 8)))
    if within is not None and draw(st.integers(0, 4)) == 0:
        elements.append(Absent((Var(f"n{next(counter)}", draw(st.sampled_from(QUERY_TYPES))),)))
    q = Query(tuple(elements))
    positives = list(q.positive_variables())
    negated = [v for e in elements if isinstance(e, Absent) for v in e.vars]
    conds = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(("prop", "rel", "prev", "neg", "type")))
        v = draw(st.sampled_from(positives))
        op = draw(st.sampled_from(OPS))
        if kind == "prop":
            conds.append(Condition(Field(v.name, "x"), op, Literal(draw(st.integers(0, 3)))))
        elif kind == "rel" and len(positives) > 1:
            w = draw(st.sampled_from([p for p in positives if p != v]))
            conds.append(Condition(Field(v.name, "x"), op, Field(w.name, "x")))
        elif kind == "prev" and any(p.kleene for p in positives):
            k = draw(st.sampled_from([p for p in positives if p.kleene]))
            conds.append(Condition(Field(k.name, "x", prev=True), op, Field(k.name, "x")))
        elif kind == "neg" and negated:
            conds.append(Condition(Field(draw(st.sampled_from(negated)).name, "x"), op, Field(v.name, "x")))
        elif kind == "type":  # narrows ANY (or contradicts a declared type) through v.type
            conds.append(Condition(Field(v.name, "type"), draw(st.sampled_from(("=", "!="))),
                                   Literal(draw(st.sampled_from(QUERY_TYPES)))))
    partition = ("k",) if draw(st.integers(0, 2)) == 0 else ()
    between = None
    if draw(st.integers(0, 4)) == 0:
        lo = draw(st.integers(0, 15))
        between = Between(lo, lo + draw(st.integers(0, 20)))
    strat = strategy if strategy is not None else draw(st.sampled_from(list(Strategy)))
    return Query(tuple(elements), tuple(conds), partition, within, between, strat)


def build_tree(rows: list[dict], leaf_size: int, tiny: bool) -> BloomTree:
    config = (TreeConfig(leaf_size=leaf_size, m=64, k=1, min_bits=8) if tiny
              else TreeConfig(leaf_size=leaf_size, m=256, k=3))
    tree = BloomTree(config)
    if rows:
        tree.update([r["type"] for r in rows], [r["ts"] for r in rows])
    return tree


def inside_candidate(approx: Approximation, match: Match) -> bool:
    """The match lies in the candidate span of the unit holding its first event."""
    spans = dict(zip(approx.starts.tolist(), approx.ends.tolist(), strict=True))
    unit = int(approx.units.index_of_seq(np.asarray([match.start_seq]))[0])
    return unit in spans and match.end_seq <= spans[unit]


def check(query: Query, rows: list[dict], leaf_size: int, tiny: bool, granularity: int,
          rarest_first: bool = False) -> None:
    table = stream_table(rows) if rows else pa.table({"seq": pa.array([], pa.int64()),
                                                       "ts": pa.array([], pa.int64()),
                                                       "type": pa.array([], pa.string())})
    exact = evaluate(query, table)
    tree = build_tree(rows, leaf_size, tiny)
    approx = approximate(query, TreeIndex(tree, granularity))
    if rarest_first:  # the rarest-first walk (probing near the rarest position only) is checked instead
        counts = Counter(r["type"] for r in rows)
        approx = approximate(query, TreeIndex(tree, granularity), type_counts=counts)
    if not approx.exists:
        assert exact == [], approx.explain
        assert approx.explain
    for m in exact:
        assert inside_candidate(approx, m), (m, approx.candidate_spans())
        assert any(iv["start_seq"] <= m.start_seq and m.end_seq <= iv["end_seq"] for iv in approx.intervals())
    assert verify(approx, TableSource(table)).matches == exact
    # regions verified apart, unread gaps between them (as on a large stream with sparse candidates)
    assert verify(approx, TableSource(table), merge_gap=-1).matches == exact

    perfect = approximate(query, PerfectIndex(approx.units, table.column("seq").to_numpy(),
                                              table.column("type").to_pylist()))
    assert set(perfect.starts.tolist()) <= set(approx.starts.tolist())
    bloom_ends = dict(zip(approx.starts.tolist(), approx.ends.tolist(), strict=True))
    assert all(end <= bloom_ends[s] for s, end in zip(perfect.starts.tolist(), perfect.ends.tolist(),
                                                      strict=True))
    for m in exact:
        assert inside_candidate(perfect, m)
    assert verify(perfect, TableSource(table)).matches == exact


def longest_stream(query: Query, wanted: int) -> int:
    """How many events a drawn stream may hold for ``query`` so that its exact answer stays small enough
    to compute many times over: under skip-till-any-match a Kleene variable binds any subset of the
    events of its type in a window, so the matches grow as 2^n with the events n a window can hold: a
    window of at most 12 events (2^12 per start) or a stream of at most 16 (2^16 in all) keeps it small."""
    kleene = any(v.kleene for v in query.positive_variables())
    if query.strategy != Strategy.SKIP_TILL_ANY_MATCH or not kleene:
        return wanted
    if isinstance(query.within, WithinEvents) and query.within.count <= 12:
        return wanted
    return min(wanted, 16)


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@SETTINGS
@given(data=st.data())
def test_verified_equals_exact_and_no_false_negatives(strategy: Strategy, data: st.DataObject) -> None:
    query = data.draw(queries(strategy))
    rows = data.draw(streams())
    check(query, rows, data.draw(st.integers(2, 4)), data.draw(st.booleans()), data.draw(st.integers(0, 2)),
          data.draw(st.booleans()))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_verified_equals_exact_many(strategy: Strategy, data: st.DataObject) -> None:
    query = data.draw(queries(strategy))
    rows = data.draw(streams(max_events=longest_stream(query, 24)))
    check(query, rows, data.draw(st.integers(1, 5)), data.draw(st.booleans()), data.draw(st.integers(0, 3)),
          data.draw(st.booleans()))
