"""Standing queries against the brute-force reference: random streams appended in random batches (one event
at a time among them) and watermarks, the certain matches drained after each step.

After every step the matches delivered so far are exactly the whole stream's matches whose certainty
moment has come, in delivery order, each once; resuming from every delivered match's cursor gives exactly
the rest.  The moment is computed here from the definitions (docs/semantics.md §5.5), apart from the
engine's own rule: a match is certain at its last event unless a later event can still change or remove
it — a trailing NOT (its gap runs to the window's end), a trailing Kleene run under the next-match
strategies (it may still grow, A3), a robust match no greedy run chooses (Def. 6.2 lets a complete match
that may end later disqualify it) or a robust match under OR (a later event may rename it).  Those wait for
the window's close: after the last event whose ts is within the window, when event time passes its end.
Delivering a trailing-NOT match at its last positive event, or a trailing run before its window closes,
fails the comparison.  Every match delivered is also checked to survive continuations of the stream that
would change it if it were delivered early: a forbidden or extending event right after it."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from exact.engine.certainty import AT_EVENT, Moment
from exact.errors import QuerySemanticError
from exact.query.ast import (
    Absent,
    AnyOf,
    Query,
    Return,
    Strategy,
    WithinEvents,
    WithinTime,
)
from exact.query.language import parse
from exact.reference import reference_matches, stream_table
from exact.store import EventStore, dataset_dir, store_dir
from sketch.answer.standing import Cursor, Standing, check_standing
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from tests.generators import engine_queries, keyed_streams, run_queries, scaled

TINY = BuildOptions(leaf_size=2, fpq=0.9)


def table_of(rows: list[dict], first_seq: int = 0) -> pa.Table:
    return stream_table([{"seq": first_seq + i, **r} for i, r in enumerate(rows)])


def windowed(query: Query, within: WithinEvents | WithinTime) -> Query:
    return dataclasses.replace(query, within=query.within or within, returns=Return.MATCHES)


def key(match: Any) -> tuple:
    """A match (a reference Match or an answer's dict) as (first seq, last seq, bindings by name)."""
    if isinstance(match, dict):
        return match["start_seq"], match["end_seq"], tuple(sorted((k, tuple(v)) for k, v in
                                                                  match["bindings"].items()))
    return match.start_seq, match.end_seq, tuple(sorted((n, tuple(s)) for n, s in match.bindings))


def waits_for_window(query: Query, match: Any, greedy: set[tuple]) -> bool:
    """Can an event still to come change or remove ``match`` after its last event (the definitions)?"""
    if isinstance(query.pattern[-1], Absent):
        return True  # SASE+ negation: the trailing gap runs to the window's end
    if query.strategy in (Strategy.SKIP_TILL_ANY_MATCH, Strategy.STRICT_CONTIGUITY,
                          Strategy.PARTITION_CONTIGUITY):
        return False  # Γ membership and contiguity read only the events up to the last one
    if any(v.kleene for v in query.positive_elements()[-1].vars):
        return True  # A3: a trailing run grows as long as the window lasts
    if query.strategy is Strategy.SKIP_TILL_NEXT_MATCH:
        return False  # Def. 6.1 reads only the events before the match's next one
    if any(isinstance(e, AnyOf) for e in query.pattern):
        return True
    return key(match) not in greedy  # Def. 6.2: a later complete match may disqualify a backtracked one


def moment_of(query: Query, match: Any, rows: list[dict], greedy: set[tuple]) -> tuple[int, int]:
    """The certainty moment of ``match`` in the whole stream ``rows`` as (seq, event time or AT_EVENT)."""
    if not waits_for_window(query, match, greedy):
        return match.end_seq, AT_EVENT
    within = query.within
    if isinstance(within, WithinEvents):
        return match.start_seq + within.count - 1, AT_EVENT
    assert isinstance(within, WithinTime)
    deadline = rows[match.start_seq]["ts"] + within.micros
    last = max(i for i, r in enumerate(rows) if r["ts"] <= deadline)
    return last, deadline


def now_of(rows: list[dict], watermark: int | None) -> tuple[int, int]:
    event_time = watermark if watermark is not None and watermark >= rows[-1]["ts"] else None
    return len(rows) - 1, AT_EVENT if event_time is None else event_time


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Appends of 1–6 events (often one) and watermarks, in a random order."""
    out: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):  # (the reference is brute force: at most 8 + 4 × 3 events)
        if draw(st.integers(0, 3)) == 0:
            out.append(("watermark", draw(st.integers(0, 4))))
        else:
            out.append(("events", draw(keyed_streams(draw(st.sampled_from((1, 1, 2, 3)))))))
    return out


def continuations(rows: list[dict], last_ts: int) -> list[dict]:
    """Events that could come next and change an early delivery: each type, with the last event's case and
    attributes (a forbidden or extending event in the same partition)."""
    base = rows[-1]
    return [{**base, "ts": last_ts + 1, "type": t} for t in ("A", "B", "C")]


@scaled(60, HealthCheck.function_scoped_fixture, HealthCheck.too_slow)
@given(rows=keyed_streams(8), plan=steps(), data=st.data())
def test_standing_delivers_each_match_once_when_it_is_certain(rows: list[dict], plan: list[tuple[str, Any]],
                                                              data: st.DataObject) -> None:
    within = data.draw(st.one_of(st.builds(WithinEvents, st.integers(2, 6)),
                                 st.builds(WithinTime, st.integers(0, 4))))
    drawn = data.draw(st.one_of(engine_queries(), st.sampled_from(list(Strategy)).flatmap(
        lambda s: run_queries(s, more=True))))
    query = windowed(drawn, within)
    home = Path(tempfile.mkdtemp(prefix="seqsketch-standing-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        dataset = Dataset.open(home, "d")
        standing = Standing(EventStore.open(store_dir(dataset_dir("d", home))), query)
        every = list(rows)
        watermark: int | None = None
        delivered: list[tuple[Cursor, dict]] = []
        nows: list[tuple[int, tuple[int, int]]] = []  # (delivered so far, moment) after each step
        cursor = Cursor.start()
        try:
            got, cursor = standing.drain(standing.store.snapshot(), cursor)
        except QuerySemanticError as refused:  # a comparison of kinds the dataset cannot hold: refused alike
            assert "in this dataset" in str(refused)
            return
        delivered += got
        nows.append((len(delivered), now_of(every, watermark)))
        for kind, value in plan:
            floor = max(every[-1]["ts"], watermark if watermark is not None else every[-1]["ts"])
            if kind == "watermark":
                watermark = floor + value
                dataset.append(table_of([]).drop_columns(["seq"]), watermark=watermark)
            else:
                gap = 1 if watermark is not None and watermark >= every[-1]["ts"] else 0
                base = (watermark + 1) if watermark is not None and gap else every[-1]["ts"]
                shifted = [{**r, "ts": r["ts"] + base} for r in value]
                dataset.append(table_of(shifted).drop_columns(["seq"]))
                every += shifted
            got, cursor = standing.drain(standing.store.snapshot(), cursor)
            delivered += got
            nows.append((len(delivered), now_of(every, watermark)))
        whole = table_of(every)
        matches = sorted(reference_matches(query, whole))
        greedy = ({key(m) for m in reference_matches(dataclasses.replace(
            query, strategy=Strategy.SKIP_TILL_NEXT_MATCH), whole)}
                  if query.strategy is Strategy.ROBUST_SKIP_TILL_NEXT_MATCH else set())
        # by moment, then in answer order (a reference Match orders by its bindings in pattern order)
        timed = [(t, key(m)) for t, m in sorted((moment_of(query, m, every, greedy), m) for m in matches)]
        for count, now in nows:  # after each step: exactly the matches certain by then, in moment order
            expected = [k for t, k in timed if t <= now]
            assert [key(m) for _, m in delivered[:count]] == expected, (query, now)
        # each delivery's cursor names its moment
        assert [c.moment.key() for c, _ in delivered] == [t for t, _ in timed if t <= nows[-1][1]]
        # nothing delivered early: each survives an event that could still have changed it
        last_ts = max(every[-1]["ts"], watermark if watermark is not None else every[-1]["ts"])
        for extra in continuations(every, last_ts):
            longer = {key(m) for m in reference_matches(query, table_of(every + [extra]))}
            assert {key(m) for _, m in delivered} <= longer, (query, extra)
        if delivered:  # resuming after any delivered match gives exactly the rest
            j = data.draw(st.integers(0, len(delivered) - 1))
            rest, _ = standing.drain(standing.store.snapshot(), delivered[j][0])
            assert [key(m) for _, m in rest] == [key(m) for _, m in delivered[j + 1:]]
            again, _ = standing.drain(standing.store.snapshot(), Cursor.parse(delivered[j][0].text()))
            assert [key(m) for _, m in again] == [key(m) for _, m in delivered[j + 1:]]
    finally:
        shutil.rmtree(home, ignore_errors=True)


@scaled(25, HealthCheck.function_scoped_fixture, HealthCheck.too_slow)
@given(rows=keyed_streams(), data=st.data())
def test_a_first_event_cursor_resumes_exactly_where_it_was(rows: list[dict], data: st.DataObject) -> None:
    """A cursor of the form watches had before moments, FIRST_SEQ:DELIVERED (every match whose first event
    is before FIRST_SEQ, and the first DELIVERED of those at it, were delivered), resumes with exactly the
    other certain matches, by moment."""
    query = windowed(data.draw(engine_queries()), WithinEvents(3))
    home = Path(tempfile.mkdtemp(prefix="seqsketch-standing-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        standing = Standing(EventStore.open(store_dir(dataset_dir("d", home))), query)
        snap = standing.store.snapshot()
        try:
            every, _ = standing.drain(snap, Cursor.start())
        except QuerySemanticError:
            return
        first = data.draw(st.integers(0, len(rows)))
        at_first = sorted(key(m) for _, m in every if m["start_seq"] == first)
        skip = data.draw(st.integers(0, len(at_first)))
        said = {k for _, m in every if (k := key(m))[0] < first} | set(at_first[:skip])
        rest, after = standing.drain(snap, Cursor.parse(f"{first}:{skip}"))
        assert [key(m) for _, m in rest] == [key(m) for _, m in every if key(m) not in said]
        assert all(c.floor == (first, skip) for c, _ in rest)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_standing_query_needs_within() -> None:
    with pytest.raises(QuerySemanticError, match="needs WITHIN"):
        check_standing(parse("PATTERN SEQ(A a, B b)"))
    for bad in ("12", "@12", "@١٢:0", "@12:3x", "@12~:0", "-1:0"):
        with pytest.raises(QuerySemanticError, match="not a cursor"):
            Cursor.parse(bad)
    assert Cursor.parse("@12:3") == Cursor(Moment(12), 3) and Cursor(Moment(12), 3).text() == "@12:3"
    assert Cursor.parse("@12~-5:0").moment == Moment(12, -5)
    assert Cursor.parse("12:3") == Cursor(Moment(12), 0, (12, 3)) and Cursor.parse("12:3").text() == "@12:0/12:3"


def test_a_robust_match_found_only_by_backtracking_waits_for_its_window(tmp_path: Path) -> None:
    """Over a1 b1(x=5) b2(x=1) c1(x=3), robust skip-till-next-match chooses (a1, b2, c1): no complete match
    starts (a1, b1) yet.  A later c2(x=9) completes (a1, b1, c2), and Def. 6.2 then disqualifies (a1, b2, c1):
    it is delivered only when its window has closed, and by then it is gone.  A greedy match is certain at its
    last event."""
    query = parse("PATTERN SEQ(A a, B b, C c) WHERE c.x > b.x WITHIN 6 events "
                  "STRATEGY robust_skip_till_next_match")
    rows = [{"ts": i, "type": t, "x": x} for i, (t, x) in enumerate([("A", 0), ("B", 5), ("B", 1), ("C", 3)])]
    Dataset.build(tmp_path, "d", table_of(rows[:1]), TINY)
    dataset = Dataset.open(tmp_path, "d")
    standing = Standing(EventStore.open(store_dir(dataset_dir("d", tmp_path))), query)
    cursor, delivered = Cursor.start(), []
    for ts, (typ, x) in enumerate([("B", 5), ("B", 1), ("C", 3), ("C", 9), ("A", 0), ("B", 0), ("C", 1)], 1):
        dataset.append(table_of([{"ts": ts, "type": typ, "x": x}]).drop_columns(["seq"]))
        got, cursor = standing.drain(standing.store.snapshot(), cursor)
        delivered += [(ts, key(m)) for _, m in got]
    # (a1, b1, c2) when c2 comes; (a5, b6, c7), greedy, when c7 comes; (a1, b2, c1) never
    assert delivered == [(4, (0, 4, (("a", (0,)), ("b", (1,)), ("c", (4,))))),
                         (7, (5, 7, (("a", (5,)), ("b", (6,)), ("c", (7,)))))]
