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


def sorted_ints(values: np.ndarray) -> np.ndarray:
    """``values`` (integers, distinct) in ascending order: ``values`` itself when already sorted, by a merge
    sort when they come in long ascending runs (fewer than one descent in four values: positions read
    mostly in order), by NumPy's default sort (vectorised, and twice as fast on disorder) otherwise."""
    if len(values) < 2:
        return values
    descents = int(np.count_nonzero(values[1:] < values[:-1]))
    if descents == 0:
        return values
    return np.sort(values, kind="stable" if 4 * descents < len(values) else "quicksort")
