"""A query's windows on several threads (exact.engine.parallel): the same answers as on one thread and as the
brute-force reference, for every strategy and RETURN; pieces that cover the windows in order; a failing part
stops the others; the setting's bad values are refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import exact.engine.chain as chain
import exact.engine.parallel as parallel
from bench.exact import CASE_KLEENE, CHEMO, NEGATION, load_stream
from exact.engine import evaluate_table, merge_intervals
from exact.engine.parallel import Cancelled, query_threads, run_parts, split_windows
from exact.query.ast import Return, Strategy
from exact.query.language import parse
from exact.reference import reference_matches, stream_table
from tests.generators import chain_queries, engine_queries, engine_streams, run_queries, scaled


@pytest.fixture
def every_call_splits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Even a call of one window is split (the threshold a real query needs is far above these streams)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WINDOWS", 1)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WORK", 1)
    yield


def _with_threads(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setenv("SEQSKETCH_QUERY_THREADS", str(n))


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
@scaled(60, HealthCheck.function_scoped_fixture)
@given(data=st.data())
def test_split_windows_answer_as_the_reference(every_call_splits: None, monkeypatch: pytest.MonkeyPatch,
                                               threads: int, strategy: Strategy, data: st.DataObject) -> None:
    _with_threads(monkeypatch, threads)
    query = data.draw(run_queries(strategy) if data.draw(st.booleans()) else engine_queries(strategy))
    table = stream_table(data.draw(engine_streams()))
    expected = reference_matches(query, table)
    got = evaluate_table(query, table, returns=Return.MATCHES, chains=False)
    assert got.matches() == expected, query
    assert got.count == len(expected)
    counted = evaluate_table(query, table, returns=Return.COUNT, chains=False)
    assert counted.count == len(expected), query
    spans = evaluate_table(query, table, returns=Return.INTERVALS, chains=False).spans
    assert [tuple(x) for x in spans.tolist()] == merge_intervals(expected), query
    assert evaluate_table(query, table, returns=Return.EXISTS, chains=False).exists == bool(expected)
    cut = evaluate_table(query, table, returns=Return.MATCHES, limit=1, chains=False)
    assert cut.matches(1) == expected[:1], query


@pytest.mark.parametrize("threads", [2, 4])
@scaled(60, HealthCheck.function_scoped_fixture)
@given(data=st.data())
def test_split_chains_answer_as_the_reference(monkeypatch: pytest.MonkeyPatch, threads: int,
                                              data: st.DataObject) -> None:
    """The vectorised chain (skip-till-next-match SEQs) with its starts in pieces on several threads, in one
    stream and per partition: every RETURN as the reference."""
    monkeypatch.setattr(chain, "MIN_PARALLEL_STARTS", 1)
    _with_threads(monkeypatch, threads)
    query = data.draw(chain_queries())
    table = stream_table(data.draw(engine_streams()))
    expected = reference_matches(query, table)
    assert evaluate_table(query, table, returns=Return.MATCHES).matches() == expected, query
    assert evaluate_table(query, table, returns=Return.COUNT).count == len(expected), query
    spans = evaluate_table(query, table, returns=Return.INTERVALS).spans
    assert [tuple(x) for x in spans.tolist()] == merge_intervals(expected), query
    assert evaluate_table(query, table, returns=Return.MATCHES, limit=1).matches(1) == expected[:1], query


def test_a_real_chain_splits_and_answers_as_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """BPI 2012's frequent W activities per case (tens of thousands of starts), a Kleene chain (bisected):
    two threads, the chain's starts in pieces, give one thread's matches exactly."""
    table, _ = load_stream()
    query = parse("PATTERN SEQ('W_Completeren aanvraag' c, 'W_Nabellen offertes'+ n) PARTITION BY case "
                  "WITHIN 30 days")
    monkeypatch.setattr(chain, "MIN_PARALLEL_STARTS", 1000)
    pieces: list[int] = []
    real = chain.each

    def counting(work, items, threads):  # noqa: ANN001, ANN202 - the real each, its pieces counted
        pieces.append(min(threads, len(items)))
        return real(work, items, threads)

    monkeypatch.setattr(chain, "each", counting)
    _with_threads(monkeypatch, 1)
    one = evaluate_table(query, table)
    assert set(pieces) == {1}
    pieces.clear()
    _with_threads(monkeypatch, 2)
    two = evaluate_table(query, table)
    assert set(pieces) == {2}
    assert one.count == two.count > 1000
    assert one.matches() == two.matches()


def test_the_passes_find_the_chains_the_bisections_find(monkeypatch: pytest.MonkeyPatch) -> None:
    """BPI 2012's frequent W activities per case, chains of plain positions: the linear passes give the
    matches the bisections give, in one stream and per case."""
    table, _ = load_stream()

    def bisected(shape, em, keys, reach, starts):  # noqa: ANN001, ANN202 - the bisections in the passes' place
        ends = np.zeros(len(em), dtype=np.int64)
        ends[starts] = reach.last(starts, len(em), 1)
        return chain._bisected(shape, em, keys, ends, starts)

    for text in ("PATTERN SEQ('W_Completeren aanvraag' c, 'W_Nabellen offertes' n) PARTITION BY case WITHIN 30 days",
                 "PATTERN SEQ('W_Completeren aanvraag' c, 'W_Nabellen offertes' n, 'W_Valideren aanvraag' v) "
                 "PARTITION BY case WITHIN 30 days",
                 "PATTERN SEQ('A_SUBMITTED' a, 'O_SENT' o) WITHIN 50 EVENTS"):
        query = parse(text)
        passes = evaluate_table(query, table)
        with monkeypatch.context() as patch:
            patch.setattr(chain, "_passes", bisected)
            bisections = evaluate_table(query, table)
        assert passes.count == bisections.count > 1000, text
        assert passes.matches() == bisections.matches(), text


@pytest.mark.parametrize("text", [
    CASE_KLEENE + " STRATEGY robust_skip_till_next_match",  # segments by case
    NEGATION,  # matches filtered after the kernels
    CHEMO,  # an event set with a Kleene variable
])
def test_a_real_query_splits_and_answers_as_one_thread(every_call_splits: None, monkeypatch: pytest.MonkeyPatch,
                                                       text: str) -> None:
    """Thousands of windows over BPI 2012's per-case events: two threads give one thread's rows exactly."""
    table, _ = load_stream()
    query = parse(text)
    calls: list[int] = []
    real = parallel.run_parts

    def counting(work, parts):  # noqa: ANN001, ANN202 - the real run_parts, its parts counted
        calls.append(len(parts))
        return real(work, parts)

    monkeypatch.setattr("exact.engine.driver.run_parts", counting)
    _with_threads(monkeypatch, 1)
    one = evaluate_table(query, table, chains=False)
    assert calls == []
    _with_threads(monkeypatch, 2)
    two = evaluate_table(query, table, chains=False)
    assert calls == [2]
    assert one.count == two.count > 0
    assert one.matches() == two.matches()
    assert one.spans.tolist() == two.spans.tolist()


@pytest.mark.parametrize("threads", [1, 2, 3])
@scaled(100, HealthCheck.function_scoped_fixture)
@given(array=st.lists(st.integers(-20, 20), max_size=30), values=st.lists(st.integers(-25, 25), max_size=30),
       side=st.sampled_from(["left", "right"]))
def test_searched_in_pieces_is_searchsorted(monkeypatch: pytest.MonkeyPatch, threads: int, array: list[int],
                                            values: list[int], side: str) -> None:
    monkeypatch.setattr(parallel, "MIN_PARALLEL_SEARCHES", 1)
    a, v = np.sort(np.asarray(array, dtype=np.int64)), np.asarray(values, dtype=np.int64)
    got = parallel.searched(a, v, side, threads)  # type: ignore[arg-type]
    assert got.tolist() == a.searchsorted(v, side).tolist()  # type: ignore[call-overload]


def test_pieces_cover_the_windows_in_order_with_about_equal_work() -> None:
    rng = np.random.default_rng(3)
    starts = np.sort(rng.choice(200_000, 50_000, replace=False)).astype(np.int64)
    ends = np.minimum(np.arange(200_000) + rng.integers(0, 500, 200_000), 199_999)
    for parts in (2, 3, 8):
        pieces = split_windows(starts, ends, parts)
        assert 1 < len(pieces) <= parts
        assert np.array_equal(np.concatenate(pieces), starts)
        work = [int((ends[p] - p + 1).sum()) for p in pieces]
        assert max(work) < 1.2 * sum(work) / len(work)
    few = starts[:parallel.MIN_PARALLEL_WINDOWS - 1]
    assert [len(p) for p in split_windows(few, ends, 4)] == [len(few)]
    short = np.arange(1000, dtype=np.int64)  # many windows of one event each: too little work
    assert [len(p) for p in split_windows(short, short, 4)] == [1000]


def test_a_failing_part_stops_the_others_and_its_error_is_raised() -> None:
    running, stopped = threading.Event(), threading.Event()

    def work(part: np.ndarray, cancel: threading.Event) -> int:
        if part[0] == 0:
            assert running.wait(5.0)
            raise ValueError("part 0 failed")
        running.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a slow part, looking at ``cancel`` between its slices
            if cancel.is_set():
                stopped.set()
                raise Cancelled
            time.sleep(0.01)
        return 1

    started = time.monotonic()
    with pytest.raises(ValueError, match="part 0 failed"):
        run_parts(work, [np.array([0]), np.array([1])])
    assert stopped.wait(2.0)
    assert time.monotonic() - started < 5


def test_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEQSKETCH_QUERY_THREADS", raising=False)
    assert query_threads() >= 1
    monkeypatch.setenv("SEQSKETCH_QUERY_THREADS", "3")
    assert query_threads() == 3
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("SEQSKETCH_QUERY_THREADS", bad)
        with pytest.raises(ValueError, match="SEQSKETCH_QUERY_THREADS"):
            query_threads()


@scaled(200)
@given(array=st.lists(st.integers(-5, 40), max_size=60).map(sorted),
       values=st.lists(st.integers(-8, 45), max_size=60).map(sorted),
       side=st.sampled_from(["left", "right"]), threads=st.sampled_from([1, 2]))
def test_ascending_values_merged_are_found_where_a_bisection_finds_them(array: list[int], values: list[int],
                                                                         side: str, threads: int) -> None:
    """The windows' ends are searched by one merge when the values ascend and are not few: the same places
    as NumPy's bisection, equal values on either side."""
    a, v = np.asarray(array, dtype=np.int64), np.asarray(values, dtype=np.int64)
    assert parallel.searched(a, v, side, threads).tolist() == a.searchsorted(v, side).tolist()  # type: ignore[arg-type]
