"""Sizing (Baltus §4.4, eq. 4.1–4.18): the equations, the measured profile, the choice of h, budgets."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.errors import SeqsketchError
from sketch.build import BuildOptions, build_tree, plan
from sketch.sizing import (
    LN2,
    DistinctProfile,
    bits_for,
    filter_false_positive_rate,
    filter_rate_for_query,
    hashes_for,
    heaps_distinct,
    leaf_count,
    measure_distinct,
    nodes_per_subtree,
    query_false_positive_rate,
    size_index,
    top_level_nodes,
    total_nodes,
)
from sketch.tree import BloomTree, TreeConfig
from tests.generators import scaled, zipf_types


@given(st.floats(1e-9, 0.5), st.integers(1, 10**6))
def test_eq_4_5_inverts_eq_4_3(fpq: float, q: int) -> None:
    fp = filter_rate_for_query(fpq, q)
    assert 0 < fp <= fpq
    assert query_false_positive_rate(fp, q) == pytest.approx(fpq, rel=1e-9)


def test_eq_4_1_and_4_13_4_18_agree() -> None:
    # At m from eq. 4.13 and k from eq. 4.18 a filter of n keys has (about) the target rate.
    n, fp = 1000, 1e-3
    m = math.ceil(bits_for(n, fp))
    k = round(LN2 * m / n)
    assert filter_false_positive_rate(m, k, n) == pytest.approx(fp, rel=0.1)
    assert heaps_distinct(10_000) == pytest.approx(6000)  # eq. 4.16 with K = 60, β = 0.5


@given(st.floats(1e-12, 0.5))
def test_k_is_the_smallest_with_two_to_the_minus_k_below_fp(fp: float) -> None:
    k = hashes_for(fp)
    assert 2.0 ** -k <= fp * (1 + 1e-9)
    assert k == 1 or 2.0 ** -(k - 1) > fp


@given(st.integers(1, 10**6), st.integers(1, 12), st.integers(2, 5))
def test_node_counts_eq_4_7_to_4_12(leaves: int, h: int, fanout: int) -> None:
    per = fanout ** (h - 1)
    if leaves % per == 0:  # whole sub-trees: T = t · d (eq. 4.7) and t = L / l (eq. 4.8)
        assert total_nodes(leaves, h, fanout) == (leaves // per) * nodes_per_subtree(h, fanout)
        assert top_level_nodes(leaves, h, fanout) == leaves // per
    assert nodes_per_subtree(h, fanout) == sum(fanout**i for i in range(h))


@scaled(25)
@given(st.integers(1, 300), st.integers(2, 4))
def test_top_level_nodes_is_what_a_never_full_tree_builds(leaves: int, fanout: int) -> None:
    """One type only, so every merge passes: the forest has one root per base-F digit (Fig. 4.3)."""
    tree = BloomTree(TreeConfig(leaf_size=1, m=1024, k=2, fanout=fanout))
    tree.update(["a"] * leaves, np.zeros(leaves, dtype=np.int64))
    tallest = 1
    while fanout ** (tallest - 1) < leaves:
        tallest += 1
    assert len(tree.top_nodes()) == top_level_nodes(leaves, tallest, fanout)


@scaled(60)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=300), st.integers(1, 20), st.integers(2, 4))
def test_measured_profile_is_the_distinct_count_of_aligned_windows(codes: list[int], leaf_size: int,
                                                                    fanout: int) -> None:
    array = np.array(codes, dtype=np.int64)
    leaf = np.arange(len(codes)) // leaf_size
    pairs = np.unique(leaf * 31 + array)
    profile = measure_distinct(pairs // 31, pairs % 31, leaf_size, fanout)
    assert profile.vocabulary == len(set(codes))
    for level, (most, mean) in enumerate(zip(profile.maximum, profile.mean, strict=True)):
        width = leaf_size * fanout**level
        counts = [len(set(codes[i:i + width])) for i in range(0, len(codes), width)]
        assert most == max(counts) and mean == pytest.approx(sum(counts) / len(counts))
    assert profile.maximum[-1] == len(set(codes))  # the last level is one window: the whole stream


@scaled(60)
@given(st.floats(1e-6, 0.2), st.integers(1, 1000), st.integers(1, 10**7), st.integers(1, 10**5),
       st.integers(1, 5), st.integers(2, 4))
def test_chosen_configuration_meets_the_target(fpq: float, leaf_size: int, events: int, vocabulary: int,
                                               query_length: int, fanout: int) -> None:
    levels = 1
    while fanout ** (levels - 1) < leaf_count(events, leaf_size):
        levels += 1
    profile = DistinctProfile.heaps(leaf_size, fanout, levels, vocabulary)
    sizing = size_index(fpq=fpq, leaf_size=leaf_size, events=events, profile=profile,
                        query_length=query_length, fanout=fanout)
    c = sizing.chosen
    assert c.m & (c.m - 1) == 0 and c.m >= c.n_top * c.k / LN2
    # Nodes at density ≤ 1/2 answer false positives with probability ≤ 2^-k ≤ fp (eq. 4.5), so the query
    # over the sized number of top-level probes stays within the target (eq. 4.3).
    assert 2.0 ** -c.k <= c.fp * (1 + 1e-9)
    assert c.expected_fpq <= fpq * (1 + 1e-9)
    # The default policy: the deepest tree within twice the cheapest estimated size.
    cheapest = min(x.bytes_estimate for x in sizing.candidates)
    assert c.bytes_estimate <= 2 * cheapest
    assert all(x.h <= c.h or x.bytes_estimate > 2 * cheapest for x in sizing.candidates)


def test_a_budget_picks_the_largest_q_that_fits_as_the_thesis_does() -> None:
    profile = DistinctProfile.heaps(100, 2, 15, 5000)
    free = size_index(fpq=1e-3, leaf_size=100, events=1_000_000, profile=profile)
    budget = sorted(c.bytes_estimate for c in free.candidates)[len(free.candidates) // 2]
    sized = size_index(fpq=1e-3, leaf_size=100, events=1_000_000, profile=profile, memory_bytes=budget)
    fitting = [c for c in sized.candidates if c.bytes_estimate <= budget]
    assert sized.chosen.bytes_estimate <= budget
    assert sized.chosen.h == min(c.h for c in fitting)
    assert sized.chosen.top_nodes == max(c.top_nodes for c in fitting)


def test_an_impossible_budget_is_refused_saying_what_would_fit() -> None:
    # A measured profile (distinct types per level) of a 60-type stream.
    profile = DistinctProfile(100, 2, (20, 30, 40, 50, 60), (15.0, 25.0, 35.0, 45.0, 55.0), 60)
    common = {"leaf_size": 100, "events": 1_000_000, "profile": profile}

    def smallest(fpq: float) -> int:
        return min(c.bytes_estimate for c in size_index(fpq=fpq, **common).candidates)

    budget = (smallest(1e-4) + smallest(0.5)) // 2
    with pytest.raises(SeqsketchError) as err:
        size_index(fpq=1e-4, memory_bytes=budget, **common)
    message = str(err.value)
    assert message.startswith(f"--memory: memory budget of {budget} bytes is too small for fpq=0.0001")
    needed = int(re.search(r"needs about (\d+) bytes", message).group(1))
    assert needed == smallest(1e-4) > budget
    reachable = float(re.search(r"best reachable fpq is about ([0-9.e-]+)", message).group(1))
    assert 1e-4 < reachable < 0.5
    # The advice is true: that fpq fits the budget, a tighter one does not, and the named size fits.
    size_index(fpq=reachable * 1.001, memory_bytes=budget, **common)
    with pytest.raises(SeqsketchError):
        size_index(fpq=reachable * 0.9, memory_bytes=budget, **common)
    size_index(fpq=1e-4, memory_bytes=needed, **common)
    with pytest.raises(SeqsketchError, match="no false-positive target fits"):
        size_index(fpq=1e-4, memory_bytes=10, **common)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"fpq": 0.0}, "fpq"), ({"fpq": 1.5}, "fpq"), ({"leaf_size": 0}, "leaf size"),
    ({"fanout": 1}, "fanout"), ({"query_length": 0}, "query length"), ({"memory_bytes": -5}, "memory"),
])
def test_bad_sizing_inputs_are_named(kwargs: dict, fragment: str) -> None:
    with pytest.raises(SeqsketchError, match=fragment):
        size_index(**{"events": 1000, **kwargs})


def test_a_built_index_over_budget_is_refused() -> None:
    rng = np.random.default_rng(5)
    types = zipf_types(rng, 20_000, 3000, 1.4, "w")
    ts = np.arange(len(types), dtype=np.int64)
    estimate = plan(types, BuildOptions(leaf_size=64)).chosen.bytes_estimate
    tree, sizing = build_tree(types, ts, BuildOptions(leaf_size=64, memory_bytes=10 * estimate))
    assert tree.stored_bytes() <= 10 * estimate and sizing.memory_bytes == 10 * estimate
    with pytest.raises(SeqsketchError, match="--memory"):
        build_tree(types, ts, BuildOptions(leaf_size=64, memory_bytes=200))
