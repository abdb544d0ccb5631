"""The array helpers of :mod:`exact.arrays` held to their definitions on random inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from exact.arrays import distinct_ints, joined, run_positions, sorted_ints


@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 5)), max_size=20))
def test_run_positions_expands_each_run(runs: list[tuple[int, int]]) -> None:
    first = np.asarray([f for f, _ in runs], dtype=np.int64)
    counts = np.asarray([c for _, c in runs], dtype=np.int64)
    expected = [f + i for f, c in runs for i in range(c)]
    assert run_positions(first, counts).tolist() == expected


@given(st.lists(st.lists(st.integers(-5, 5), min_size=1, max_size=4), min_size=1, max_size=4))
def test_joined_is_the_concatenation(parts: list[list[int]]) -> None:
    arrays = [np.asarray(p, dtype=np.int64) for p in parts]
    assert joined(arrays).tolist() == [x for p in parts for x in p]


@given(st.data(), st.booleans())
def test_sorted_ints_sorts_whatever_the_order(data: st.DataObject, shuffle: bool) -> None:
    """Ascending runs one after another (few descents: the merge sort), or shuffled (the default sort),
    spread thin or filling their range (the bitmap), or already sorted (the values themselves): always
    ``np.sort``'s answer, in the same dtype."""
    bound = data.draw(st.sampled_from([10**12, 300]))
    runs = data.draw(st.lists(st.lists(st.integers(-bound, bound), max_size=60, unique=True), max_size=8))
    values = list(dict.fromkeys(x for run in runs for x in sorted(run)))  # distinct, in ascending runs
    if shuffle:
        values = list(np.random.default_rng(len(values)).permutation(values))
    array = np.asarray(values, dtype=np.int64)
    got = sorted_ints(array)
    assert got.tolist() == sorted(values) and got.dtype == np.int64


@given(st.lists(st.integers(-2**62, 2**62), max_size=60), st.integers(0, 3))
def test_distinct_ints_are_the_set_in_order(values: list[int], repeat: int) -> None:
    doubled = np.array(values * (repeat + 1), dtype=np.int64)
    assert distinct_ints(doubled).tolist() == sorted(set(values))
