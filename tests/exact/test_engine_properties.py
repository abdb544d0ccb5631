"""Property tests: the exact engine equals the brute-force reference (exact.reference) on random small
streams and random patterns, for every strategy, with and without two-phase evaluation and prefilter; and
``starts=`` slicing agrees with filtering the full answer."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.engine import chain, evaluate, evaluate_table, match_ts, merge_intervals, ts_lookup
from exact.events import micros
from exact.frame import EventFrame
from exact.query.ast import (
    Query,
    Return,
    Single,
    Strategy,
    Var,
)
from exact.reference import reference_matches, stream_table
from tests.generators import chain_queries, engine_queries, engine_streams, run_queries, scaled


def dictionary_typed(table: pa.Table) -> pa.Table:
    """``table`` with ``type`` dictionary-encoded as the event store reads it: one dictionary per chunk
    (here two chunks, whose dictionaries differ in content and order)."""
    half = table.num_rows // 2
    chunks = [table.column("type").combine_chunks().slice(a, b - a).dictionary_encode()
              for a, b in ((0, half), (half, table.num_rows))]
    at = table.column_names.index("type")
    return table.set_column(at, "type", pa.chunked_array(chunks, chunks[0].type))


def frame_of(table: pa.Table) -> EventFrame:
    """``table`` as a frame of its columns (as the event store reads seek files), its table made only when a
    condition asks for a column."""
    encoded = table.column("type").combine_chunks().dictionary_encode()
    return EventFrame.of_columns(table.column("seq").to_numpy(), micros(table.column("ts")),
                                 encoded.indices.to_numpy(), encoded.dictionary,
                                 encoded.dictionary.to_pylist(), lambda: table)


def _check(query: Query, rows: list[dict]) -> None:
    table = stream_table(rows)
    expected = reference_matches(query, table)
    for two_phase in (True, False):
        for prefilter in (True, False):
            got = evaluate(query, table, two_phase=two_phase, prefilter=prefilter)
            assert got == expected, (two_phase, prefilter, query)
    assert evaluate(query, dictionary_typed(table)) == expected, query
    assert evaluate(query, frame_of(table)) == expected, query
    # the kernels alone (no vectorised chain), and what each RETURN keeps
    assert evaluate_table(query, table, returns=Return.MATCHES, chains=False).matches() == expected, query
    _check_returns(query, table, expected)


def _check_returns(query: Query, table: pa.Table, expected: list) -> None:
    """count, exists, intervals and a limit give what the full answer implies, for chains and kernels."""
    spans = merge_intervals(expected)
    for chains in (True, False):
        counted = evaluate_table(query, table, returns=Return.COUNT, chains=chains)
        assert counted.count == len(expected) and len(counted) == 0, (chains, query)
        exists = evaluate_table(query, table, returns=Return.EXISTS, chains=chains)
        assert exists.exists == bool(expected), (chains, query)
        intervals = evaluate_table(query, table, returns=Return.INTERVALS, chains=chains)
        assert [tuple(x) for x in intervals.spans.tolist()] == spans, (chains, query)
        for limit in (1, 2):
            cut = evaluate_table(query, table, returns=Return.MATCHES, limit=limit, chains=chains)
            assert cut.matches(limit) == expected[:limit], (chains, limit, query)
            if cut.count is not None:
                assert cut.count == len(expected)
            else:  # stopped early: only once more than ``limit`` matches were found
                assert len(expected) > limit and not cut.complete


SETTINGS = scaled(200)


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@SETTINGS
@given(data=st.data())
def test_engine_equals_reference(strategy: Strategy, data: st.DataObject) -> None:
    query = data.draw(engine_queries(strategy))
    rows = data.draw(engine_streams())
    _check(query, rows)


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@SETTINGS
@given(data=st.data())
def test_engine_equals_reference_on_run_conditions(strategy: Strategy, data: st.DataObject) -> None:
    """SASE+ run operands and aggregates (``v[1]``, ``v[last]``, ``count``, ``sum``/``avg``/``min``/``max``
    over a run or over ``v[..i-1]``), with partitions, event sets, OR, NOT reading runs and BETWEEN."""
    query = data.draw(run_queries(strategy, more=True))
    rows = data.draw(engine_streams())
    _check(query, rows)


@SETTINGS
@given(query=engine_queries(), rows=engine_streams(), lo=st.integers(0, 12), width=st.integers(0, 8))
def test_starts_slicing_matches_filtering(query: Query, rows: list[dict], lo: int, width: int) -> None:
    table = stream_table(rows)
    full = evaluate(query, table)
    for two_phase in (True, False):
        part = evaluate(query, table, starts=(lo, lo + width), two_phase=two_phase)
        assert part == [m for m in full if lo <= m.start_seq <= lo + width]


@SETTINGS
@given(query=chain_queries(), rows=engine_streams(), lo=st.integers(0, 12), width=st.integers(0, 8))
def test_chain_queries_equal_reference(query: Query, rows: list[dict], lo: int, width: int) -> None:
    """The chain (passes or bisections) gives the windows' matches (two_phase=False, prefilter=False run windows)."""
    _check(query, rows)
    table = stream_table(rows)
    full = evaluate(query, table)
    part = evaluate(query, table, starts=(lo, lo + width))
    assert part == [m for m in full if lo <= m.start_seq <= lo + width]


@SETTINGS
@given(query=chain_queries(longest=7), rows=engine_streams(), rows_of_after=st.sampled_from((1, 2, None)))
def test_chain_passes_share_a_pass_between_elements_of_one_class(query: Query, rows: list[dict],
                                                                 rows_of_after: int | None) -> None:
    """Elements that bind the same events (same types, no properties) share one pass over the events; with
    fewer rows of next events than classes (forced here), a class whose row another took is passed again.
    Either way the chain's matches are the reference's."""
    table = stream_table(rows)
    expected = reference_matches(query, table)
    saved = chain._AFTER_ENTRIES
    try:
        if rows_of_after is not None:
            chain._AFTER_ENTRIES = rows_of_after * max(table.num_rows, 1)
        assert evaluate(query, table) == expected, (rows_of_after, query)
    finally:
        chain._AFTER_ENTRIES = saved


def test_elements_of_one_activity_are_one_class_and_properties_make_their_own() -> None:
    """The classes the chain passes by: the same types and properties share one (a partition's own
    condition on each variable included); another property, type set or any type make classes of their own."""
    from exact.engine.automaton import automaton_for
    from exact.query.language import parse
    from exact.query.normalize import normalize

    query = parse("PATTERN SEQ(A a, B b, A c, B d, A e, ANY f, B g, B h) WHERE e.x > 1 AND g.x > 1 AND h.x > 1 "
                  "PARTITION BY k")
    plan = normalize(query)
    shape = chain.chain_shape(plan, automaton_for(query), frozenset({"k"}))
    assert shape is not None
    assert shape.classes == (0, 1, 0, 1, 2, 3, 4, 4)


def test_a_partitioned_chain_cut_by_a_limit_keeps_the_first_matches() -> None:
    """The chain searches per partition in key order (codes by first appearance: here key 2 before key 1)
    and must give its matches back in stream order: the first match starts in key 1."""
    kinds = [("B", 2), ("A", 1), ("A", 2), ("B", 1), ("B", 2)]
    table = stream_table([{"seq": i, "ts": i, "type": t, "x": 0, "y": 0, "k": k} for i, (t, k) in enumerate(kinds)])
    query = Query((Single(Var("a", "A")), Single(Var("b", "B"))), partition_by=("k",))
    expected = reference_matches(query, table)
    assert [m.start_seq for m in expected] == [1, 2]
    cut = evaluate_table(query, table, returns=Return.MATCHES, limit=1)
    assert cut.matches(1) == expected[:1]
    assert evaluate_table(query, table, returns=Return.COUNT).count == 2


@SETTINGS
@given(query=engine_queries(), rows=engine_streams(), cuts=st.lists(st.integers(0, 10), max_size=4))
def test_match_times_are_the_events_times(query: Query, rows: list[dict], cuts: list[int]) -> None:
    """match_ts finds the ts of every match's first and last event, however the table is chunked."""
    table = stream_table(rows)
    bounds = sorted({0, table.num_rows, *(c for c in cuts if c < table.num_rows)})
    chunked = pa.Table.from_batches([b for lo, hi in zip(bounds, bounds[1:], strict=False)
                                     for b in table.slice(lo, hi - lo).to_batches()], schema=table.schema)
    matches = evaluate(query, chunked)
    times = ts_lookup(table)
    assert match_ts(chunked, matches) == {s: times[s] for m in matches for s in (m.start_seq, m.end_seq)}
    assert match_ts(frame_of(table), matches) == match_ts(chunked, matches)


@SETTINGS
@given(query=st.one_of(chain_queries(), engine_queries()), rows=engine_streams(),
       sort_from=st.sampled_from((1, 2, 4096)), whole_from=st.sampled_from((0, 1, 4)))
def test_a_columnar_answer_times_every_bound_event(query: Query, rows: list[dict], sort_from: int,
                                                  whole_from: int) -> None:
    """The matches table of a frame read without its ts (decoded where asked): every ``<var>.ts``,
    ``start_ts`` and ``end_ts`` is its event's ts — looked up through the positions the evaluation kept, or
    by seq, sorted first or not, one by one or the frame's all decoded at once; inside ``without_times``,
    the same table without its ts columns."""
    from exact.engine import answer_columns
    from exact.engine.matchtable import answer, match_times

    table = stream_table(rows)
    eager = frame_of(table)
    lazy = EventFrame.of_columns(eager.seq, lambda at: micros(table.column("ts"))[at], *eager._codes,
                                 eager._codes[1].to_pylist(), lambda: table)
    ts = dict(zip(table.column("seq").to_pylist(), micros(table.column("ts")).tolist(), strict=True))
    query = dataclasses.replace(query, returns=Return.MATCHES)
    found = evaluate_table(query, lazy, spans=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(answer_columns, "_SORT_FROM", sort_from)
        patch.setattr(answer_columns, "_WHOLE_FROM", whole_from)
        rows_out = answer(query, found, match_times(lazy, found), columnar=True)["rows"]
        with answer_columns.without_times():  # (a summary that reads seqs only: the same table, no ts)
            bare = answer(query, found, match_times(lazy, found), columnar=True)["rows"]
    assert bare.column_names == [c for c in rows_out.column_names if not c.endswith("ts")]
    assert bare.equals(rows_out.select(bare.column_names))
    micros_of = {c: rows_out.column(c).cast(pa.int64()).to_pylist() if not pa.types.is_list(rows_out.column(c).type)
                 else [None if v is None else [int(x.timestamp() * 1_000_000) for x in v]
                       for v in rows_out.column(c).to_pylist()]
                 for c in rows_out.column_names if c.endswith("ts")}
    seqs = {c: rows_out.column(c).to_pylist() for c in rows_out.column_names if c.endswith("seq")}
    for name, stamps in micros_of.items():
        for seq, stamp in zip(seqs[name[:-2] + "seq"], stamps, strict=True):
            if isinstance(seq, list):
                assert stamp == [ts[s] for s in seq], (name, query)
            else:
                assert stamp == (None if seq is None else ts[seq]), (name, query)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@scaled(1500)
@given(data=st.data())
def test_engine_equals_reference_many(strategy: Strategy, data: st.DataObject) -> None:
    query = data.draw(engine_queries(strategy))
    rows = data.draw(engine_streams(12))
    _check(query, rows)


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@SETTINGS
@given(data=st.data())
def test_a_limit_stops_once_its_matches_are_certain(strategy: Strategy, data: st.DataObject) -> None:
    """With slices of a few steps the kernels stop between windows often, so ``RETURN matches`` under a
    limit stops early whenever more matches than the limit were found: the matches it keeps are still the
    reference's first ``limit``, its count is unknown only then, and otherwise whole."""
    import exact.engine.slices as slices

    query = data.draw(engine_queries(strategy))
    rows = data.draw(engine_streams())
    table = stream_table(rows)
    expected = sorted(reference_matches(query, table))
    saved = slices.SLICE_STEPS
    slices.SLICE_STEPS = data.draw(st.sampled_from([1, 2, 5]))
    try:
        for limit in (1, 2, 3):
            cut = evaluate_table(query, table, returns=Return.MATCHES, limit=limit, chains=False)
            assert cut.matches(limit) == expected[:limit], (limit, query)
            if cut.count is None:
                assert len(expected) > limit and not cut.complete, (limit, query)
            else:
                assert cut.count == len(expected) and cut.complete, (limit, query)
    finally:
        slices.SLICE_STEPS = saved


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@SETTINGS
@given(data=st.data())
def test_windows_abandoned_and_run_again_count_once(strategy: Strategy, data: st.DataObject) -> None:
    """A window whose work outgrows the bound is abandoned and run again with more; the windows finished
    before it in the same call are not run again (their matches would count twice)."""
    from exact.engine import Budget

    query = data.draw(engine_queries(strategy))
    table = stream_table(data.draw(engine_streams()))
    expected = sorted(reference_matches(query, table))
    budget = Budget(window_steps=data.draw(st.sampled_from([1, 2, 3])))
    found = evaluate_table(query, table, returns=Return.MATCHES, budget=budget, chains=False)
    assert found.matches() == expected and found.count == len(expected), query
    budget = Budget(window_steps=data.draw(st.sampled_from([1, 2, 3])))
    assert evaluate_table(query, table, returns=Return.COUNT, budget=budget, chains=False).count == len(expected)


@pytest.mark.parametrize("strategy", [Strategy.SKIP_TILL_ANY_MATCH, Strategy.SKIP_TILL_NEXT_MATCH,
                                      Strategy.ROBUST_SKIP_TILL_NEXT_MATCH], ids=lambda s: s.value)
@pytest.mark.parametrize("steps", [1, 2, 4, 8])
def test_a_window_run_again_after_one_that_finished(strategy: Strategy, steps: int) -> None:
    """The first A's window is short, the second's (four B's to combine) outgrows a small bound: it is run
    again alone, and the first window's matches are counted once."""
    from exact.engine import Budget
    from exact.query.language import parse

    table = stream_table([{"seq": i, "ts": i, "type": t} for i, t in enumerate("ABCABBBBBB")])
    query = parse(f"PATTERN SEQ(A a, B+ b) WITHIN 4 EVENTS STRATEGY {strategy.value}")
    expected = sorted(reference_matches(query, table))
    for returns in (Return.COUNT, Return.MATCHES):
        found = evaluate_table(query, table, returns=returns, budget=Budget(window_steps=steps), chains=False)
        assert found.count == len(expected)
        if returns == Return.MATCHES:
            assert found.matches() == expected


@SETTINGS
@given(data=st.data())
def test_candidate_windows_are_those_the_conditions_of_thm_5_2_admit(data: st.DataObject) -> None:
    """The two-phase candidate windows (Cadonna 2013, Thm. 5.2) are exactly the windows whose first event
    binds a first-element variable and which — looked at event by event — hold at least as many events as
    the pattern has positions (5.1), an event of every position (5.3), and for consecutive elements an event
    of each earlier one before an event of each later one (5.4); in one stream and per partition."""
    import numpy as np

    from exact.engine.automaton import automaton_for
    from exact.engine.ordering import partition_codes, window_ends
    from exact.engine.prune import candidate_windows
    from exact.prefilter import variable_bits
    from exact.query.normalize import normalize

    query = data.draw(engine_queries(data.draw(st.sampled_from([Strategy.SKIP_TILL_ANY_MATCH,
                                                                Strategy.SKIP_TILL_NEXT_MATCH]))))
    table = stream_table(data.draw(engine_streams(max_events=14)))
    frame = EventFrame.build(table)
    plan = normalize(query)
    aut = automaton_for(query)
    em, _ = variable_bits(frame, plan.positives, counts=False)
    em = em.astype(np.int64)
    keys = partition_codes(frame, plan.partition_attrs) if plan.partition_attrs else None
    ends = window_ends(plan, frame.seq, frame.ts)
    start_ok = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(frame), max_size=len(frame))), dtype=bool)
    got = candidate_windows(aut, em, keys, ends, start_ok).tolist()
    groups = [g for gs in aut.element_groups for g in gs]
    expected = []
    for s in range(len(frame)):
        if not (em[s] & aut.first_element_mask) or not start_ok[s] or (keys is not None and keys[s] < 0):
            continue
        window = [p for p in range(s, int(ends[s]) + 1)
                  if em[p] != 0 and (keys is None or keys[p] == keys[s])]
        held = {g: [p for p in window if em[p] & g] for g in groups}
        if len(window) < len(groups) or not all(held.values()):
            continue
        pairs = zip(aut.element_groups, aut.element_groups[1:], strict=False)
        if all(held[g][0] < held[h][-1] for left, right in pairs for g in left for h in right):
            expected.append(s)
    assert got == expected, query
