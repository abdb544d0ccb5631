"""Array helpers shared by the event store, its seek files and the tree index: runs of consecutive
integers expanded, arrays joined without a copy when there is only one, and integers sorted by the sort that
suits how ordered they already are."""

from __future__ import annotations

import numpy as np


def run_positions(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``first[i], first[i] + 1, … first[i] + counts[i] - 1`` for every run ``i``, concatenated (int64)."""
    counts = np.asarray(counts, dtype=np.int64)
    run_start = np.cumsum(counts) - counts
    return np.repeat(first - run_start, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The (non-empty list of) arrays one after the other; the one itself, uncopied, when there is one."""
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def distinct_ints(values: np.ndarray) -> np.ndarray:
    """The distinct integers of ``values``, ascending — sorted, then each kept once (NumPy's ``unique``
    hashes first, several times slower on millions of integers)."""
    if not len(values):
        return values
    ordered = np.sort(values)
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def sorted_ints(values: np.ndarray) -> np.ndarray:
    """``values`` (integers, distinct) in ascending order: ``values`` itself when already sorted; when they
    fill much of their range (at least one in 16 of the integers between their least and greatest), by
    marking them in a bitmap of that range and reading it back (a counting sort: linear, no comparisons);
    by a merge sort when they come in long ascending runs (fewer than one descent in four values:
    positions read mostly in order); by NumPy's default sort (vectorised) otherwise."""
    if len(values) < 2:
        return values
    descents = int(np.count_nonzero(values[1:] < values[:-1]))
    if descents == 0:
        return values
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < _DENSE * len(values):
        marked = np.zeros(hi - lo + 1, dtype=bool)
        marked[values - lo] = True
        return (np.flatnonzero(marked) + lo).astype(values.dtype, copy=False)
    return np.sort(values, kind="stable" if 4 * descents < len(values) else "quicksort")


#: :func:`sorted_ints` marks values in a bitmap when they are at least one in this many of their range.
_DENSE = 16
