"""Verification read around its rarest variable's events: the anchored read.

A query over frequent types whose candidates the tree cannot narrow (every leaf holds every type) is read
through the store's row filter: every event some variable can bind by its type and its own conditions.  When
one variable is far rarer than that — ``v3.a1 >= 815 AND v3.a1 <= 867 AND v3.a2 <= 180`` on a frequent type
— every match holds one of its events, and every event a match's window can look at lies within one window
of it.  So verification first reads that variable's events alone (the *anchors*, found by the value
indexes), then the other variables' events only within a window either side of an anchor: Kolchinsky and
Schuster's lazy, rarest-first evaluation, applied to the read.

**Why nothing is lost.**  The anchor is a positive variable every match binds (not an ``OR`` alternative),
under one of the automaton strategies (``skip_till_any_match``, ``skip_till_next_match``, robust), with a
window (``WITHIN``).  A match's events, and every event its window's automaton instances look at — the
window runs from the match's first event for the window's length (docs/semantics.md §3; a trailing ``NOT``
and a trailing Kleene run look to its end) — lie within one window of the match's first event, which is at
most one window before the anchor event the match binds.  So the events within a window before and after
each anchor are every event those instances see; the events left out only start instances whose windows
hold no anchor, which complete no match.  Under the contiguity strategies a left-out event changes runs
that reach it, and those are not anchored.

**When.**  The anchor is the variable whose clause the value indexes say keeps the fewest rows (an estimate
from a few parts: :meth:`~exact.store.reader.StoreReader.clause_rows`), and the read is anchored only when
its windows would hold well under the events of the read without it (:data:`ANCHOR_SHARE`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exact.query.ast import Query, Strategy, WithinEvents, WithinTime
from exact.query.normalize import Plan
from exact.store.manifest import SeqRanges
from exact.store.rowfilter import Clause, RowFilter
from sketch.answer.event_sources import EventSource, StoreSource

#: The read is anchored only when the anchors' windows are estimated to hold at most this share of the
#: events the read would otherwise look through (reading the anchors costs a read of their own).
ANCHOR_SHARE = 0.25

_AUTOMATON = (Strategy.SKIP_TILL_ANY_MATCH, Strategy.SKIP_TILL_NEXT_MATCH, Strategy.ROBUST_SKIP_TILL_NEXT_MATCH)
_I64 = np.int64


@dataclass(frozen=True)
class Anchored:
    """An anchored read's plan: the anchor (its index among the positive variables and its clause), the seq
    ranges to read (inclusive, sorted, disjoint), the rows looked at to find the anchors, how many there
    are, and about how many rows the read without anchors would have looked at (the value indexes' estimate)."""

    variable: int
    clause: Clause
    ranges: np.ndarray
    scanned: int
    anchors: int
    unanchored_rows: int


def anchorable(query: Query, keep: RowFilter | None, source: EventSource) -> bool:
    """May a read for ``query`` be anchored (see the module docstring)?"""
    return (keep is not None and isinstance(source, StoreSource) and query.strategy in _AUTOMATON
            and isinstance(query.within, (WithinTime, WithinEvents)))


def anchored_ranges(query: Query, plan: Plan, keep: RowFilter | None, source: EventSource,
                    ranges: SeqRanges) -> Anchored | None:
    """The ranges of ``ranges`` (a read's, inclusive, sorted, disjoint) within a window of the rarest
    variable's events, or None where the read is better not anchored (or cannot be)."""
    if keep is None or not anchorable(query, keep, source):
        return None
    assert isinstance(source, StoreSource)
    bounds = np.asarray(ranges, dtype=_I64).reshape(-1, 2)
    if not len(bounds):
        return None
    # positive variables every match binds (an OR alternative need not), with a clause of their own; the
    # filter's clauses are the positive variables' in order, then the negated ones'
    mandatory = [v.index for v in plan.positives if len(plan.group_members[v.group]) == 1
                 and keep.clauses[v.index].conditions]
    if not mandatory:
        return None
    estimates = source.store.clause_rows(keep, bounds, source.snapshot)
    variable = rarest(mandatory, estimates)
    within = query.within
    in_ranges = int((bounds[:, 1] - bounds[:, 0]).sum()) + len(bounds)
    snap = source.snapshot
    if isinstance(within, WithinEvents):
        reach = 2.0 * within.count
    else:  # (events per µs on average, over the stream's span)
        assert isinstance(within, WithinTime)
        span = (snap.last_ts or 0) - (snap.first_ts or 0)
        reach = 2.0 * within.micros * snap.events / max(span, 1) + 64
    if estimates[variable] * reach > ANCHOR_SHARE * in_ranges:
        return None  # (the anchors' windows would cover much of the read anyway)
    clause = keep.clauses[variable]
    frame, scanned = source.read_frame(bounds, ["seq", "ts", "type"], clause.types, RowFilter((clause,)))
    if isinstance(within, WithinEvents):
        reach_lo = frame.seq - (within.count - 1)
        reach_hi = frame.seq + (within.count - 1)
        around = np.stack([reach_lo, reach_hi], axis=1)
    else:
        assert isinstance(within, WithinTime)
        around = source.store.seqs_within(frame.ts - within.micros, frame.ts + within.micros, snap)
    return Anchored(variable, clause, _intersected(_merged(around), bounds), scanned, len(frame), sum(estimates))


def rarest(variables: list[int], estimates: list[int]) -> int:
    """The anchor among ``variables`` (indices of mandatory positive variables): the one whose clause keeps
    the fewest rows by ``estimates`` (any of them would do: every match binds each)."""
    return min(variables, key=lambda i: estimates[i])


def _merged(spans: np.ndarray) -> np.ndarray:
    """Inclusive ranges (sorted by their starts) merged where they overlap or touch."""
    spans = spans[spans[:, 0] <= spans[:, 1]]
    if not len(spans):
        return spans
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    reach = np.maximum.accumulate(spans[:, 1])
    new = np.ones(len(spans), dtype=bool)
    new[1:] = spans[1:, 0] > reach[:-1] + 1
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(spans)) - 1
    return np.stack([spans[starts, 0], reach[ends]], axis=1)


def _intersected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The seqs in both ``a`` and ``b`` (inclusive ranges, sorted, disjoint) as such ranges."""
    if not len(a) or not len(b):
        return np.zeros((0, 2), dtype=_I64)
    # each range of ``a`` cut by the ranges of ``b`` it meets
    first = np.searchsorted(b[:, 1], a[:, 0], "left")  # the first of b ending at or after a's start
    last = np.searchsorted(b[:, 0], a[:, 1], "right")  # past the last of b starting at or before a's end
    counts = np.maximum(last - first, 0)
    if not counts.sum():
        return np.zeros((0, 2), dtype=_I64)
    owner = np.repeat(np.arange(len(a)), counts)
    which = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    lo = np.maximum(a[owner, 0], b[which, 0])
    hi = np.minimum(a[owner, 1], b[which, 1])
    keep = lo <= hi
    return np.stack([lo[keep], hi[keep]], axis=1).astype(_I64)
