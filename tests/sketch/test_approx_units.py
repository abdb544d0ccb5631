"""Units, the top-down occurrence walk, and the candidate chains on streams large enough for deep trees."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.engine import evaluate
from exact.query.ast import Between, EventSet, Query, Single, Strategy, Var, WithinEvents, WithinTime
from sketch.answer.event_sources import TableSource
from sketch.answer.verify import _region_ranges, verify
from sketch.evaluate import PerfectIndex, TreeIndex, approximate, units_at
from sketch.tree import BloomTree, TreeConfig
from tests.generators import scaled


def skewed_stream(n: int, vocabulary: int, seed: int) -> tuple[list[str], list[int]]:
    """Zipf-like types (a few frequent, many rare) and non-decreasing timestamps with ties."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    types = [f"t{int(i)}" for i in rng.choice(vocabulary, size=n, p=weights / weights.sum())]
    ts = np.cumsum(rng.integers(0, 3, size=n)).tolist()
    return types, ts


def tree_of(types: list[str], ts: list[int], leaf_size: int, m: int = 256, k: int = 3) -> BloomTree:
    tree = BloomTree(TreeConfig(leaf_size=leaf_size, m=m, k=k, min_bits=8))
    tree.update(types, ts)
    return tree


@given(n=st.integers(1, 3000), leaf=st.integers(1, 9), granularity=st.integers(0, 6))
@scaled(60)
def test_units_cut_the_stream_in_order(n: int, leaf: int, granularity: int) -> None:
    types, ts = skewed_stream(n, 30, seed=n)
    tree = tree_of(types, ts, leaf)
    units = units_at(tree, granularity)
    assert units.lo_seq[0] == 0 and units.hi_seq[-1] == n - 1
    assert np.array_equal(units.lo_seq[1:], units.hi_seq[:-1] + 1)
    assert (units.level <= granularity).all()
    levels = tree.intervals()["level"]
    # a unit below the granularity is a whole top-level node (nothing above it to stop at)
    tops = set(tree.top_nodes())
    assert all(node in tops for node, lev in zip(units.nodes, units.level, strict=True) if lev < granularity)
    assert all(levels[node] == lev for node, lev in zip(units.nodes, units.level, strict=True))


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 6), granularity=st.integers(0, 3),
       tiny=st.booleans(), picks=st.lists(st.integers(0, 39), min_size=1, max_size=4))
@scaled(60)
def test_occurrence_walk_misses_nothing_and_adds_only_filter_answers(seed: int, leaf: int, granularity: int,
                                                                     tiny: bool, picks: list[int]) -> None:
    """Deep trees (thousands of events, small leaves) exercise the descent and its shortcut to the units:
    every unit truly holding a key is found, and every unit found says "maybe" for a key itself."""
    types, ts = skewed_stream(2500, 40, seed)
    tree = tree_of(types, ts, leaf, m=64 if tiny else 512, k=1 if tiny else 4)
    index = TreeIndex(tree, granularity)
    keys = frozenset(f"t{p}" for p in picks)
    found = index.occurrence(keys, None)
    truth = PerfectIndex(index.units, np.arange(len(types)), types).occurrence(keys, None)
    assert set(found.tolist()) >= set(truth.tolist())
    maybe = tree.probe(index.units.nodes, sorted(keys)).any(axis=1)
    assert maybe[found].all()
    assert np.array_equal(found, np.unique(found))  # sorted unit indices
    assert index.probes() <= 2 * tree.rows


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 6), granularity=st.integers(0, 3),
       picks=st.lists(st.frozensets(st.integers(0, 44), min_size=1, max_size=3), min_size=1, max_size=4),
       with_between=st.booleans(), with_runs=st.booleans())
@scaled(60)
def test_occurrences_from_sliced_filters_are_the_top_level_and_unit_answers(
        seed: int, leaf: int, granularity: int, picks: list[frozenset[int]], with_between: bool,
        with_runs: bool) -> None:
    """With its filters sliced, the index answers, per set, the units inside BETWEEN and the allowed runs
    where the unit's own filter and its top-level node's each say "maybe" for one of the set's keys — the
    walk's answer when it jumps from the top level to the units — checked unit by unit with the tree's
    probes.  Without sliced filters the walk descends level by level: every true occurrence is still
    found, and every unit found says "maybe" itself."""
    types, ts = skewed_stream(2500, 40, seed)  # types t40… never occur
    tree = tree_of(types, ts, leaf, m=128, k=2)
    index = TreeIndex(tree, granularity)
    units = index.units
    rng = np.random.default_rng(seed)
    between = None
    if with_between:
        lo = int(rng.integers(0, ts[-1]))
        between = Between(lo, lo + int(rng.integers(0, ts[-1] // 2)))
    runs = None
    ok = units.lo_ts >= -1  # every unit
    if with_runs:
        cuts = np.unique(rng.integers(0, len(units) + 1, size=8))
        runs = (cuts[:-1:2].astype(np.int64), cuts[1::2].astype(np.int64))
        ok = np.zeros(len(units), dtype=bool)
        for a, b in zip(*runs, strict=True):
            ok[a:b] = True
    if between is not None:
        ok &= (units.hi_ts >= between.start) & (units.lo_ts <= between.end)
    sets = [frozenset(f"t{p}" for p in pick) for pick in picks]
    intervals = tree.intervals()
    tops = np.asarray(tree.top_nodes())
    top_of = tops[np.searchsorted(intervals["lo_seq"][tops], units.lo_seq, "right") - 1]
    assert index._sliced is not None
    found = index.occurrences(sets, between, allowed=runs)
    expected = [np.flatnonzero(tree.probe(units.nodes, sorted(t)).any(axis=1)
                               & tree.probe(top_of, sorted(t)).any(axis=1) & ok).tolist() for t in sets]
    if index.cut_short:  # a set found nowhere; the others' answers may be partial
        assert index.absent and all(found[p].tolist() == expected[p] == [] for p in index.absent)
    else:
        assert [got.tolist() for got in found] == expected

    tree.sliced = lambda nodes: None  # the same tree without sliced filters: the level-by-level walk
    walk = TreeIndex(tree, granularity)
    perfect = PerfectIndex(units, np.arange(len(types)), types)
    walked = walk.occurrences(sets, between, allowed=runs)
    truth = perfect.occurrences(sets, between, allowed=runs)
    if walk.cut_short:  # a set found nowhere (truly nowhere: no false negatives); the others are partial
        assert walk.absent and all(not len(truth[p]) for p in walk.absent)
        return
    for types_, got, true in zip(sets, walked, truth, strict=True):
        assert set(got.tolist()) >= set(true.tolist())
        assert ok[got].all() and tree.probe(units.nodes[got], sorted(types_)).any(axis=1).all()


def test_top_level_absence_answers_at_once() -> None:
    types, ts = skewed_stream(4000, 30, seed=3)
    tree = tree_of(types, ts, 8, m=4096, k=8)
    index = TreeIndex(tree)
    q = Query((Single(Var("a", "t1")), Single(Var("z", "never-seen"))))
    approx = approximate(q, index)
    assert not approx.exists
    assert approx.explain == "never-seen never occurs in the history"
    assert approx.nodes_probed <= 2 * len(tree.top_nodes())


def test_matches_sharing_one_leaf_are_kept() -> None:
    """The thesis' relaxed policies lose matches inside one leaf; here a whole match in one leaf is found."""
    types = ["x", "a", "b", "c", "x", "x", "x", "x"]
    tree = tree_of(types, list(range(8)), leaf_size=8)
    table = pa.table({"seq": list(range(8)), "ts": list(range(8)), "type": types})
    q = Query((Single(Var("a", "a")), EventSet((Var("b", "b"), Var("c", "c")))))
    approx = approximate(q, TreeIndex(tree))
    assert approx.exists and approx.candidate_spans() == [(0, 7)]
    assert [m.start_seq for m in verify(approx, TableSource(table)).matches] == [1]


@pytest.mark.parametrize("strategy", [Strategy.STRICT_CONTIGUITY, Strategy.SKIP_TILL_NEXT_MATCH])
def test_contiguity_reach_is_tighter(strategy: Strategy) -> None:
    """Strict contiguity: a match spans only leaves holding pattern types, one event per position."""
    types = ["a", "b"] + ["x"] * 30 + ["b"] * 4
    tree = tree_of(types, list(range(len(types))), leaf_size=2)
    table = pa.table({"seq": list(range(len(types))), "ts": list(range(len(types))), "type": types})
    q = Query((Single(Var("a", "a")), Single(Var("b", "b"))), strategy=strategy)
    approx = approximate(q, TreeIndex(tree))
    ((start, end),) = approx.candidate_spans()
    assert start == 0
    assert end == (1 if strategy == Strategy.STRICT_CONTIGUITY else len(types) - 1)
    assert verify(approx, TableSource(table)).matches == evaluate(q, table)


def test_windows_and_between_bound_the_reach() -> None:
    types = ["a"] + ["x"] * 9 + ["b"] * 10 + ["a"] + ["b"] * 3
    n = len(types)
    tree = tree_of(types, list(range(n)), leaf_size=2)
    table = pa.table({"seq": list(range(n)), "ts": list(range(n)), "type": types})
    q = Query((Single(Var("a", "a")), Single(Var("b", "b"))), within=WithinEvents(12))
    approx = approximate(q, TreeIndex(tree))
    assert approx.candidate_spans() == [(0, 12), (20, 23)]
    assert verify(approx, TableSource(table)).matches == evaluate(q, table)
    late = Query(q.pattern, within=WithinEvents(12), between=Between(15, 30))
    approx = approximate(late, TreeIndex(tree))
    assert [s for s, _ in approx.candidate_spans()] == [20]
    assert verify(approx, TableSource(table)).matches == evaluate(late, table)


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 6), picks=st.lists(st.integers(0, 39), min_size=2,
                                                                          max_size=4),
       window=st.integers(1, 60), by_events=st.booleans(), strict=st.booleans())
@scaled(60)
def test_rarest_first_walk_gives_the_same_candidates(seed: int, leaf: int, picks: list[int], window: int,
                                                     by_events: bool, strict: bool) -> None:
    types, ts = skewed_stream(2500, 40, seed)
    tree = tree_of(types, ts, leaf)
    within = WithinEvents(window) if by_events else WithinTime(window)
    q = Query(tuple(Single(Var(f"v{i}", f"t{p}")) for i, p in enumerate(picks)), within=within,
              strategy=Strategy.STRICT_CONTIGUITY if strict else Strategy.SKIP_TILL_NEXT_MATCH)
    index = TreeIndex(tree)
    lazy = approximate(q, TreeIndex(tree), type_counts=Counter(types))
    perfect = approximate(q, PerfectIndex(index.units, np.arange(len(types)), types))
    # Both walks miss nothing the perfect index finds (they may differ in which false hits survive: the
    # shortcut to the units skips different levels), and verification is exact either way.
    for walk in (lazy, approximate(q, index)):
        assert set(perfect.starts.tolist()) <= set(walk.starts.tolist())
        ends = dict(zip(walk.starts.tolist(), walk.ends.tolist(), strict=True))
        pairs = zip(perfect.starts.tolist(), perfect.ends.tolist(), strict=True)
        assert all(end <= ends[s] for s, end in pairs)
    table = pa.table({"seq": list(range(len(types))), "ts": ts, "type": types})
    exact = evaluate(q, table)
    assert verify(lazy, TableSource(table)).matches == exact
    assert verify(lazy, TableSource(table), merge_gap=-1).matches == exact


def _answers(approx) -> tuple:
    return (approx.starts.tolist(), approx.ends.tolist(), approx.read_ends.tolist(),
            approx.relevant.tolist(), approx.explain)


def _random_queries(rng: np.random.Generator, count: int, types: int = 48) -> list[Query]:
    out = []
    for _ in range(count):
        length = int(rng.integers(1, 5))
        # types t40… never occur
        elements = tuple(Single(Var(f"v{i}", f"t{int(rng.integers(0, types))}")) for i in range(length))
        window = WithinEvents(int(rng.integers(2, 400))) if rng.random() < 0.5 else WithinTime(
            int(rng.integers(1, 300)))
        out.append(Query(pattern=elements, within=window))
    return out


def test_a_shared_index_answers_as_a_fresh_one_under_concurrent_queries() -> None:
    """One TreeIndex serves every query on an index version (its probe answers are remembered): its
    answers under concurrent use, and with its memory of answers evicting keys, equal a fresh index's."""
    from concurrent.futures import ThreadPoolExecutor

    import sketch.evaluate as ev

    types, ts = skewed_stream(6000, 40, seed=5)
    tree = tree_of(types, ts, 16, m=512, k=4)
    counts = dict(Counter(types))
    queries = _random_queries(np.random.default_rng(8), 60)
    expected = [_answers(approximate(q, TreeIndex(tree), type_counts=counts)) for q in queries]
    assert sum(bool(e[0]) for e in expected) >= 20 and any(e[4] for e in expected)  # both kinds of answer
    shared = TreeIndex.shared(tree)
    assert TreeIndex.shared(tree) is shared
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda q: _answers(approximate(q, shared, type_counts=counts)), queries * 3))
    assert got == expected * 3
    small = TreeIndex(tree)
    small._memo_keys = 2  # remember answers for two keys only: eviction on almost every probe
    assert [_answers(approximate(q, small, type_counts=counts)) for q in queries] == expected
    assert len(small._memo) <= 2
    tree.update(["t1"] * 20, [ts[-1] + 1] * 20)  # a changed tree drops its shared index
    assert TreeIndex.shared(tree) is not shared and ev.TreeIndex.shared(tree).units.hi_seq[-1] == 6019


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 7), with_between=st.booleans())
@scaled(25)
def test_exists_from_prefixes_says_what_the_whole_walk_says(seed: int, leaf: int, with_between: bool) -> None:
    """RETURN exists stops at the first prefix of the stream with a candidate.  On a perfect index its
    yes/no, explanation and candidates are the whole evaluation's (the prefix's candidates among them); on
    the tree, whatever the whole walk finds the early answer finds too (it never says a false no), and a
    yes may differ from the whole walk's only by the Bloom filters' false hits along another path."""
    from dataclasses import replace

    import sketch.evaluate.candidates as ev

    types, ts = skewed_stream(4000, 60, seed)
    tree = tree_of(types, ts, leaf, m=512, k=4)
    index = TreeIndex(tree)
    perfect = PerfectIndex(index.units, np.arange(len(types)), types)
    assert len(index.units) >= 64 * 8  # every prefix is tried (below)
    counts = dict(Counter(types))
    rng = np.random.default_rng(seed)
    for q in _random_queries(rng, 12):
        if with_between:
            lo = int(rng.integers(0, ts[-1]))
            q = replace(q, between=Between(lo, lo + int(rng.integers(0, ts[-1] // 3))))
        shortest, ev._EXISTS_MIN_UNITS = ev._EXISTS_MIN_UNITS, 8
        try:
            early = ev.approximate_exists(q, index, type_counts=counts)
            early_perfect = ev.approximate_exists(q, perfect, type_counts=counts)
        finally:
            ev._EXISTS_MIN_UNITS = shortest
        whole = approximate(q, index, type_counts=counts)
        whole_perfect = approximate(q, perfect, type_counts=counts)
        assert early.query == q
        if early.nodes_probed == 0:  # answered before any probe: only when no event lies in BETWEEN
            at = np.asarray(ts)
            in_range = (at >= q.between.start) & (at <= q.between.end) if q.between else np.ones(1, bool)
            assert not in_range.any() and not early.exists and not whole.exists, early.explain
        assert early.exists or not whole.exists
        if not early.exists:
            assert early.explain == whole.explain
        assert early_perfect.exists == whole_perfect.exists and early_perfect.explain == whole_perfect.explain
        assert set(early_perfect.starts.tolist()) <= set(whole_perfect.starts.tolist())


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 5), granularity=st.integers(0, 3))
@scaled(30)
def test_intervals_merge_the_candidate_spans(seed: int, leaf: int, granularity: int) -> None:
    """Candidate intervals are the per-start spans merged where they overlap, each with the highest level
    among its start units (checked against merging the spans one by one)."""
    types, ts = skewed_stream(1500, 12, seed)
    tree = tree_of(types, ts, leaf)
    index = TreeIndex(tree, granularity)
    for q in _random_queries(np.random.default_rng(seed), 6, types=14):
        approx = approximate(q, index)
        expected: list[dict[str, int]] = []
        levels = index.units.level[approx.starts].tolist()
        for (lo, end), level in zip(approx.candidate_spans(), levels, strict=True):
            if expected and lo <= expected[-1]["end_seq"]:
                expected[-1]["end_seq"] = max(expected[-1]["end_seq"], end)
                expected[-1]["level"] = max(expected[-1]["level"], level)
            else:
                expected.append({"start_seq": lo, "end_seq": end, "level": level})
        assert approx.intervals() == expected


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 5), gap=st.sampled_from([0, 1, 7, 64, 10_000]))
@scaled(30)
def test_regions_group_starts_whose_reads_meet(seed: int, leaf: int, gap: int) -> None:
    """Verification regions: start units grouped one by one while a start lies within ``gap`` events of
    the group's reach, each with its start seq range, end, read end and the relevant units it reads."""
    types, ts = skewed_stream(1500, 12, seed)
    tree = tree_of(types, ts, leaf)
    index = TreeIndex(tree)
    units = index.units
    for q in _random_queries(np.random.default_rng(seed), 6, types=14):
        approx = approximate(q, index)
        groups: list[list[int]] = []
        reach = -1
        for i, s in enumerate(approx.starts.tolist()):
            if groups and int(units.lo_seq[s]) <= reach + gap:
                groups[-1].append(i)
                reach = max(reach, int(approx.read_ends[i]))
            else:
                groups.append([i])
                reach = int(approx.read_ends[i])
        got = approx.regions(gap)
        assert len(got) == len(groups)
        for region, g in zip(got, groups, strict=True):
            first, last = int(approx.starts[g[0]]), int(approx.starts[g[-1]])
            read_end = int(approx.read_ends[g].max())
            assert (region.start_lo, region.start_hi) == (int(units.lo_seq[first]), int(units.hi_seq[last]))
            assert (region.end, region.read_end) == (int(approx.ends[g].max()), read_end)
            span = np.arange(first, int(units.index_of_seq(np.asarray([read_end]))[0]) + 1)
            assert region.units.tolist() == span[approx.relevant[span]].tolist()


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 5), gap=st.sampled_from([0, 1, 7, 64]))
@scaled(30)
def test_region_reads_join_consecutive_units_up_to_the_read_end(seed: int, leaf: int, gap: int) -> None:
    """The seq ranges verification reads per region: runs of consecutive units of the region, each from
    its first unit's first seq to its last unit's last seq cut at the region's read end (checked run by
    run)."""
    types, ts = skewed_stream(1500, 12, seed)
    index = TreeIndex(tree_of(types, ts, leaf))
    units = index.units
    for q in _random_queries(np.random.default_rng(seed), 6, types=14):
        approx = approximate(q, index)
        regions = approx.regions(gap)
        expected = []
        for region in regions:
            runs: list[list[int]] = []
            for u in region.units.tolist():
                if runs and u == runs[-1][-1] + 1:
                    runs[-1].append(u)
                else:
                    runs.append([u])
            spans = [(int(units.lo_seq[r[0]]), min(int(units.hi_seq[r[-1]]), region.read_end)) for r in runs]
            expected.append([(a, b) for a, b in spans if a <= b])
        assert _region_ranges(approx, regions) == expected


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 5), gap=st.sampled_from([-40, -1, 0, 1, 7, 64]))
@scaled(40)
def test_the_read_plan_is_every_region_s_reads_joined(seed: int, leaf: int, gap: int) -> None:
    """The vectorised read plan: the regions' read ranges (checked above) joined where they touch, with the
    region count and one region from the first start to the last."""
    types, ts = skewed_stream(1500, 12, seed)
    index = TreeIndex(tree_of(types, ts, leaf))
    for q in _random_queries(np.random.default_rng(seed), 6, types=14):
        approx = approximate(q, index)
        regions = approx.regions(gap)
        joined: list[list[int]] = []
        for a, b in (r for ranges in _region_ranges(approx, regions) for r in ranges):
            if joined and a <= joined[-1][1] + 1:
                joined[-1][1] = max(joined[-1][1], b)
            else:
                joined.append([a, b])
        ranges, count, whole = approx.read_plan(gap)
        assert ranges.tolist() == joined and count == len(regions)
        if regions:
            assert whole is not None and (whole.start_lo, whole.start_hi, whole.end, whole.read_end) == (
                regions[0].start_lo, regions[-1].start_hi, regions[-1].end, regions[-1].read_end)
        else:
            assert whole is None


@given(seed=st.integers(0, 10_000), leaf=st.integers(1, 6), window=st.integers(1, 60),
       in_events=st.booleans(), density=st.sampled_from([0.02, 0.3, 0.9]))
@scaled(60)
def test_window_neighbourhood_is_every_unit_meeting_a_hit_s_window(seed: int, leaf: int, window: int,
                                                                   in_events: bool, density: float) -> None:
    """The units the rarest-first walk probes: each unit meeting the window around some hit unit (time
    [lo_ts - d, hi_ts + d] or seqs [lo_seq - (n-1), hi_seq + (n-1)]), checked hit by hit, on streams with
    idle gaps longer than the window."""
    from sketch.evaluate.chains import window_neighbourhood

    rng = np.random.default_rng(seed)
    n = 600
    ts = np.cumsum(np.where(rng.random(n) < 0.03, rng.integers(100, 400, n), rng.integers(0, 3, n))).tolist()
    units = TreeIndex(tree_of([f"t{i % 5}" for i in range(n)], ts, leaf)).units
    hits = rng.random(len(units)) < density
    w = WithinEvents(window) if in_events else WithinTime(window)
    query = Query(pattern=(Single(Var("a", "t0")), Single(Var("b", "t1"))), within=w)
    expected = np.zeros(len(units), dtype=bool)
    for h in np.flatnonzero(hits).tolist():
        if in_events:
            lo, hi = int(units.lo_seq[h]) - (window - 1), int(units.hi_seq[h]) + (window - 1)
            expected |= (units.hi_seq >= lo) & (units.lo_seq <= hi)
        else:
            lo, hi = int(units.lo_ts[h]) - window, int(units.hi_ts[h]) + window
            expected |= (units.hi_ts >= lo) & (units.lo_ts <= hi)
    first, last = window_neighbourhood(query, units, np.flatnonzero(hits))
    assert (first < last).all() and (first[1:] > last[:-1]).all()  # sorted, disjoint, apart, none empty
    got = np.zeros(len(units), dtype=bool)
    for a, b in zip(first.tolist(), last.tolist(), strict=True):
        got[a:b] = True
    assert got.tolist() == expected.tolist()
