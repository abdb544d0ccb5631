"""A funnel of typed single steps in one compiled pass (what :func:`exact.engine.summarise.chained_funnel`
runs): the step types' events put in (partition, stream) order by counting, then every first-step event's
chain followed with one forward-moving cursor per step.

From each start, step *j* takes the first event of its type after step *j − 1*'s in the same partition,
within the window.  That event never moves back as the start moves forward within a partition, so each
step's cursor passes over the partition's events once: the pass costs the events times the steps, with no
search and no sort.  A step's types are a bit per step on each event, so a type that several steps share
(``SEQ(A, B, A)``) is one pass of each of those steps' cursors.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: how a window bounds a chain: none, by time from the start (µs, at most), by events (seq distance, below)
NO_WINDOW, TIME_WINDOW, EVENT_WINDOW = 0, 1, 2


@functools.cache
def _compiled() -> Any:
    import numba

    return numba.njit(cache=True, nogil=True)(_funnel)


def funnel_times(seq: np.ndarray, ts: np.ndarray, codes: np.ndarray, units: np.ndarray, steps: np.ndarray,
                 window_kind: int, window: int, keyed: bool) -> tuple[np.ndarray, int]:
    """Per step (rows) and unit (columns), the time (µs) from the unit's earliest start that reaches the step
    to that start's event of the step, -1 where no start of the unit reaches it; and the starts whose chain
    reaches the last step (under ``skip_till_next_match``, the pattern's matches: one per start).  ``seq``,
    ``ts``, type ``codes`` and ``units`` (a partition number ≥ 0 per event) are the step types' events in
    stream order; ``steps`` the step types' codes.  Units are the partitions when ``keyed``, else each start
    on its own (its number: its place among the starts)."""
    n_units = int(units.max()) + 1 if len(units) else 0
    columns = n_units if keyed else int(np.count_nonzero(codes == steps[0])) if len(steps) else 0
    took = np.full((len(steps), columns), -1, dtype=np.int64)
    whole = np.zeros(1, dtype=np.int64)
    if len(seq) and len(steps):
        _compiled()(np.ascontiguousarray(seq, dtype=np.int64), np.ascontiguousarray(ts, dtype=np.int64),
                    np.ascontiguousarray(codes, dtype=np.int64), np.ascontiguousarray(units, dtype=np.int64),
                    n_units, np.ascontiguousarray(steps, dtype=np.int64), window_kind, window, keyed, took, whole)
    return took, int(whole[0])


def _funnel(seq: Any, ts: Any, codes: Any, units: Any, n_units: int, steps: Any, window_kind: int, window: int,
            keyed: bool, took: Any, whole: Any) -> None:
    n = len(seq)
    k = len(steps)
    # the events in (unit, stream) order: counted per unit, then placed in stream order (stable), with a bit
    # per step whose type the event has, its ts and its seq copied to its place
    off = np.zeros(n_units + 1, dtype=np.int64)
    for i in range(n):
        off[units[i] + 1] += 1
    for u in range(n_units):
        off[u + 1] += off[u]
    fill = off[:-1].copy()
    kind = np.empty(n, dtype=np.int64)
    t_of = np.empty(n, dtype=np.int64)
    s_of = np.empty(n, dtype=np.int64)
    for i in range(n):
        at = fill[units[i]]
        fill[units[i]] += 1
        bits = 0
        for j in range(k):
            if steps[j] == codes[i]:
                bits |= 1 << j
        kind[at] = bits
        t_of[at] = ts[i]
        s_of[at] = seq[i]
    cursor = np.zeros(k, dtype=np.int64)  # per step, the place before the last event it found
    start = 0  # the starts seen (an unkeyed funnel's units)
    for u in range(n_units):
        lo, hi = off[u], off[u + 1]
        done = 0  # steps this unit's earliest starts have reached already
        for j in range(k):
            cursor[j] = lo - 1
        for p in range(lo, hi):
            if not kind[p] & 1:
                continue
            column = u if keyed else start
            start += 1
            t0, s0 = t_of[p], s_of[p]
            if not keyed or done == 0:
                took[0, column] = 0
                done = max(done, 1)
            cur = p
            reached = 1
            for j in range(1, k):
                bit = 1 << j
                q = max(cursor[j], cur)  # (the next of its type after ``cur``: never before the last found)
                q += 1
                while q < hi and not kind[q] & bit:
                    q += 1
                cursor[j] = q - 1
                if q >= hi:
                    break
                if window_kind == 1 and t_of[q] - t0 > window:
                    break
                if window_kind == 2 and s_of[q] - s0 >= window:
                    break
                cur = q
                reached += 1
                if not keyed or j >= done:
                    took[j, column] = t_of[q] - t0
                    if keyed:
                        done = j + 1
            if reached == k:
                whole[0] += 1
