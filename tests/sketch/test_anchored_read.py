"""A verification read around its rarest variable's events (:mod:`sketch.answer.anchors`) keeps every answer
exact: on random streams with attributes, stored in several parts, queries under the automaton strategies
with a window (of time or of events), Kleene variables, event sets, ORs, negations (a trailing one too) and
``PARTITION BY``, anchored wherever they allow it, answer as the brute-force reference does; and the store's
ts look-up of an anchor's window holds every event within it."""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import exact.store.seek_format as seek_format
import sketch.answer.cause as explain_cause
import sketch.answer.relaxed as relaxed_search
from api.service import run_query
from exact.engine import Budget, evaluate, evaluate_table
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
    WithinEvents,
    WithinTime,
)
from exact.query.normalize import normalize
from exact.store import EventStore
from exact.store.rowfilter import row_filter
from sketch.answer import anchors
from sketch.answer.cause import why_empty
from sketch.answer.event_sources import StoreSource
from sketch.answer.verify import verify
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from sketch.evaluate import TreeIndex, candidates
from sketch.evaluate.candidates import whole_stream
from tests.generators import scaled
from tests.helpers import build_tree
from tests.sketch.test_attribute_pushdown import answers, reference, table_of

TYPES = ("A", "B", "C")
_AUTOMATON = (Strategy.SKIP_TILL_ANY_MATCH, Strategy.SKIP_TILL_NEXT_MATCH, Strategy.ROBUST_SKIP_TILL_NEXT_MATCH)
SETTINGS = scaled(150, HealthCheck.function_scoped_fixture, HealthCheck.too_slow)


@st.composite
def streams(draw: st.DrawFn) -> list[dict]:
    """Events with an integer ``n`` (sometimes null) and a case ``k``, ts rising by 0-3 µs, with pauses."""
    out, ts = [], 0
    for _ in range(draw(st.integers(1, 60))):
        event = {"ts": ts, "type": draw(st.sampled_from(TYPES)), "k": draw(st.sampled_from((1, 2)))}
        n = draw(st.one_of(st.none(), st.integers(0, 9)))
        if n is not None:
            event["n"] = n
        out.append(event)
        ts += draw(st.sampled_from((0, 1, 1, 2, 3, 40)))
    return out


@st.composite
def queries(draw: st.DrawFn) -> Query:
    counter = iter(range(100))

    def var(kleene: bool = False) -> Var:
        return Var(f"v{next(counter)}", draw(st.sampled_from(TYPES + (None,))), kleene)

    elements: list = []
    for i in range(draw(st.integers(1, 4))):
        if i and draw(st.integers(0, 4)) == 0:
            elements.append(Absent((var(),)))
        shape = draw(st.integers(0, 7))
        elements.append(AnyOf((var(), var())) if shape == 0 else EventSet((var(), var())) if shape == 1
                        else Single(var(kleene=shape == 2)))
    if draw(st.integers(0, 3)) == 0:
        elements.append(Absent((var(),)))  # a trailing NOT: its gap runs to the window's end
    query = Query(tuple(elements))
    variables = list(query.positive_variables()) + [v for e in elements if isinstance(e, Absent) for v in e.vars]
    conds = [Condition(Field(v.name, "n"), draw(st.sampled_from(("=", "<", "<=", ">", ">=", "!="))),
                       Literal(draw(st.integers(0, 9))))
             for v in draw(st.lists(st.sampled_from(variables), min_size=1, max_size=4))]
    positives = [v for v in query.positive_variables() if not v.kleene]
    if len(positives) > 1 and draw(st.booleans()):
        a, b = draw(st.permutations(positives))[:2]
        conds.append(Condition(Field(a.name, "n"), draw(st.sampled_from(("<", "<=", "="))), Field(b.name, "n")))
    within = (WithinEvents(draw(st.integers(1, 8))) if draw(st.booleans())
              else WithinTime(draw(st.integers(0, 30))))
    partition = ("k",) if draw(st.integers(0, 2)) == 0 else ()
    return Query(tuple(elements), tuple(conds), partition, within, None, draw(st.sampled_from(_AUTOMATON)),
                 Return.MATCHES)


# Small leaves and parts: several seek files, reads across their edges.
OPTIONS = BuildOptions(leaf_size=2, fpq=0.5)


@SETTINGS
@given(events=streams(), more=st.lists(streams(), max_size=2), data=st.data())
def test_an_anchored_read_answers_as_the_reference(events: list[dict], more: list[list[dict]],
                                                   data: st.DataObject) -> None:
    home = Path(tempfile.mkdtemp(prefix="seqsketch-anchor-"))
    try:
        # seek files' ts blocks of a row or two, too: a window's look-up then rounds out by next to nothing
        with patch.object(seek_format, "BLOCK", data.draw(st.sampled_from([1, 2, 32]))):
            Dataset.build(home, "d", table_of(events), OPTIONS)
            dataset = Dataset.open(home, "d")
            for batch in more:  # appended parts, later in time
                last = events[-1]["ts"] + 5
                shifted = [{**e, "ts": e["ts"] + last} for e in batch]
                dataset.append(table_of(shifted).drop_columns(["seq"]))
                events = events + shifted
        query = data.draw(queries())
        want = reference(query, table_of(events))
        anchored = []
        real = anchors.anchored_ranges

        def spy(*args: object, **kwargs: object) -> anchors.Anchored | None:
            found = real(*args, **kwargs)  # type: ignore[arg-type]
            anchored.append(found)
            return found

        def any_of(variables: list[int], estimates: list[int]) -> int:
            return data.draw(st.sampled_from(variables))  # (each mandatory variable is a sound anchor)

        # the store read whole (as where the types occur throughout), around the anchors however many
        with patch.multiple(candidates, PASS_OVER_MIN_UNITS=1, PASS_OVER_SHARE=0.0), \
                patch.multiple(anchors, ANCHOR_SHARE=math.inf, rarest=any_of), \
                patch("sketch.answer.verify.anchored_ranges", spy):
            got = run_query(home, "d", query, mode="verified", limit=10_000)
        assert answers(got) == want, query
        plan = normalize(query)
        keep = row_filter(plan, positional=True)
        allowed = keep is not None and any(len(plan.group_members[v.group]) == 1 and keep.clauses[v.index].conditions
                                           for v in plan.positives)
        if anchored:  # (verification ran: the query is satisfiable)
            assert (anchored[-1] is not None) == allowed, query
    finally:
        shutil.rmtree(home, ignore_errors=True)


@scaled(60)
@given(events=streams(), data=st.data())
def test_the_seqs_within_times_hold_every_event_in_them(events: list[dict], data: st.DataObject) -> None:
    """``seqs_within`` gives, per pair of times, a seq range holding every event whose ts lies between them
    (parts of a few rows to a hundred, blocks of 32 rows in the seek files; runs of one ts across a block's
    edge, and times equal to an event's)."""
    home = Path(tempfile.mkdtemp(prefix="seqsketch-within-"))
    try:
        if data.draw(st.booleans()):  # long runs of one ts, over blocks' edges
            per_ts = data.draw(st.sampled_from([1, 7, 40]))
            events = [{**e, "ts": i // per_ts} for i, e in enumerate(events * 3)]
        table = table_of(events)
        store = EventStore.create(home / "s", part_rows=data.draw(st.integers(1, 100)))
        store.append(table)
        ts = np.asarray([e["ts"] for e in events], dtype=np.int64)
        times = st.one_of(st.integers(-5, int(ts[-1]) + 5), st.sampled_from(ts.tolist()))
        lo = np.asarray(data.draw(st.lists(times, min_size=1, max_size=20)), np.int64)
        hi = lo + np.asarray(data.draw(st.lists(st.integers(0, 50), min_size=len(lo), max_size=len(lo))), np.int64)
        got = store.seqs_within(lo, hi)
        for (a, b), t0, t1 in zip(got.tolist(), lo.tolist(), hi.tolist(), strict=True):
            inside = np.flatnonzero((ts >= t0) & (ts <= t1))
            if len(inside):
                assert a <= inside[0] and inside[-1] <= b, (t0, t1, a, b, inside)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_anchors_narrow_a_read_of_frequent_types_to_their_windows() -> None:
    """On 20,000 events of three frequent types, a query whose last variable's condition holds for a few
    events reads the others only near those: far fewer events than the read without anchors, with the same
    matches."""
    rng = np.random.default_rng(5)
    n = 20_000
    types = rng.choice(list(TYPES), n).tolist()
    values = rng.integers(0, 1_000, n).tolist()
    events = [{"ts": 1000 * i, "type": t, "k": 1, "n": v} for i, (t, v) in enumerate(zip(types, values, strict=True))]
    home = Path(tempfile.mkdtemp(prefix="seqsketch-anchor-"))
    try:
        # (a budget that keeps the value index: these 20,000 events take 2 bytes each in Parquet, and the default
        # budget of 4 times that would leave it out)
        Dataset.build(home, "d", table_of(events), BuildOptions(leaf_size=64, footprint=100))
        text = ("PATTERN SEQ(A a, B b, C c) WHERE a.n < 500 AND c.n = 7 WITHIN 20 ms "
                "STRATEGY skip_till_next_match RETURN count")
        with patch.multiple(candidates, PASS_OVER_MIN_UNITS=1, PASS_OVER_SHARE=0.0):
            got = run_query(home, "d", text, mode="verified")
            with patch.object(anchors, "ANCHOR_SHARE", 0.0):
                whole = run_query(home, "d", text, mode="verified")
        exact = run_query(home, "d", text, mode="exact")
        assert got["count"] == whole["count"] == exact["count"] > 0
        sevens = sum(1 for e in events if e["type"] == "C" and e["n"] == 7)
        # the anchors, and per anchor a window either side (20 events each way, and a seek block's 32 rows at
        # either end): a few dozen events per anchor, not the 20,000
        assert got["stats"]["events_scanned"] <= sevens * (1 + 41 + 2 * 32)
        assert got["stats"]["events_scanned"] * 5 < whole["stats"]["events_scanned"]
    finally:
        shutil.rmtree(home, ignore_errors=True)


@scaled(150)
@given(query=queries(), events=streams(), data=st.data())
def test_an_anchored_reads_relaxations_count_what_the_whole_stream_holds(query: Query, events: list[dict],
                                                                        data: st.DataObject) -> None:
    """An empty answer's explain, on an anchored read: where a relaxation leaves the candidates as they are,
    the matches it finds in what it reads (the anchored read, or the candidates read again — without the
    anchoring when it drops a condition of the anchor) are all the relaxed query's matches in the whole
    stream; where it would widen them, each match it counts — one inside an anchored range — is one of
    them."""
    table = table_of(events)
    rows = [{"seq": i, **e} for i, e in enumerate(events)]
    home = Path(tempfile.mkdtemp(prefix="seqsketch-anchor-explain-"))
    try:
        with patch.object(seek_format, "BLOCK", data.draw(st.sampled_from([1, 32]))):
            store = EventStore.create(home / "s", table, part_rows=data.draw(st.integers(4, 40)))
        source = StoreSource(store)

        def any_of(variables: list[int], estimates: list[int]) -> int:
            return data.draw(st.sampled_from(variables))

        approx = whole_stream(query, TreeIndex(build_tree(rows, 2, tiny=False)))
        with patch.multiple(anchors, ANCHOR_SHARE=math.inf, rarest=any_of):
            result = verify(approx, source)
        if result.found.exists or result.spans is None or result.read is None:
            return
        spans = result.spans
        assert why_empty(query, result.read, spans=spans)
        search = relaxed_search.Search(query, result.read, spans, None, Budget(), explain_cause.MAX_EVENTS)
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
            for events, starts in search.read_for(relaxed).pieces:
                matches = evaluate_table(relaxed, events, returns=Return.MATCHES, starts=starts)
                counted += matches.take(relaxed_search._inside(matches, spans)).matches()
            assert found is not None and found.count == len(counted), relaxation.part
            assert set(counted) <= set(whole), relaxation.part
    finally:
        shutil.rmtree(home, ignore_errors=True)
