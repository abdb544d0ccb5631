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

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.engine import evaluate
from exact.query.ast import (
    Query,
    Strategy,
    WithinEvents,
)
from exact.reference import stream_table
from sketch.answer.event_sources import TableSource
from sketch.answer.verify import verify
from sketch.evaluate import PerfectIndex, TreeIndex, approximate, whole_stream
from tests.generators import index_queries, index_streams, scaled
from tests.helpers import build_tree, inside_candidate


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
    # the tree passed over (the planner's choice where it would rule out next to nothing): the stream read
    # whole within BETWEEN
    assert verify(whole_stream(query, TreeIndex(tree, granularity)), TableSource(table)).matches == exact

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


SETTINGS = scaled(120)


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@SETTINGS
@given(data=st.data())
def test_verified_equals_exact_and_no_false_negatives(strategy: Strategy, data: st.DataObject) -> None:
    query = data.draw(index_queries(strategy))
    rows = data.draw(index_streams())
    check(query, rows, data.draw(st.integers(2, 4)), data.draw(st.booleans()), data.draw(st.integers(0, 2)),
          data.draw(st.booleans()))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@scaled(1500)
@given(data=st.data())
def test_verified_equals_exact_many(strategy: Strategy, data: st.DataObject) -> None:
    query = data.draw(index_queries(strategy))
    rows = data.draw(index_streams(max_events=longest_stream(query, 24)))
    check(query, rows, data.draw(st.integers(1, 5)), data.draw(st.booleans()), data.draw(st.integers(0, 3)),
          data.draw(st.booleans()))
