"""Array helpers shared by the event store, its seek files and the tree index: runs of consecutive
integers expanded, and arrays joined without a copy when there is only one."""

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
