"""Chains of units and the windows that bound them (Baltus 2021, §4.3.1–4.3.4, generalised).

**Chains (§4.3.1–4.3.3, generalised).**  A match's elements occupy a non-decreasing sequence of units: every
event of element ``i`` precedes every event of element ``i+1``, so element ``i+1`` lies in units at or after
the unit of element ``i``'s last event; several elements may share one unit (the thesis' relaxed policies lose
exactly these matches — here they are kept), and an event set's members may be in any order.  For a match
whose first event is in unit ``s``, define ``e_0 = max_p next_p(s)`` over the positions ``p`` of element 0 and
``e_i = max_p next_p(e_{i-1})``, ``next_p(x)`` being the first unit ``≥ x`` where ``p`` may occur.  By
induction the unit of element ``i``'s last event is ``≥ e_i``: the greedy earliest chain is a necessary
condition, and it covers the thesis' three strategies at once (strict contiguity is tightened below;
skip-till-any needs no backtracking, because the earliest chain dominates every other; conjunction needs no
permutations, because an event set's members are placed independently).  Negation never prunes (Baltus 2021 §4.3.4 walks
down to check it; a Bloom filter cannot prove absence of *matching* events, and the NOT's conditions are not
visible on the tree).

**Windows.**  ``WITHIN d``: a match starting in ``s`` and ending in ``t`` has ``t.lo_ts − s.hi_ts ≤ d``;
``WITHIN n EVENTS``: ``t.lo_seq − s.hi_seq < n``.  Both bound the chain's last unit and the reach
(:mod:`~sketch.evaluate.candidates`).
"""

from __future__ import annotations

import numpy as np

from exact.query.ast import Query, Strategy, WithinEvents, WithinTime
from exact.query.normalize import Plan
from sketch.evaluate.units import EMPTY, Runs, Units

_I64 = np.int64


def greedy_chain(hit_units: list[list[np.ndarray]], starts: np.ndarray, bound: np.ndarray, *,
                 record: bool = False) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The greedy earliest chain of units from each start, element by element (``hit_units``: per position,
    its hit units followed by the unit count): per start, whether it stays within ``bound`` (the last unit
    a match from it may reach, never beyond the last unit).  With ``record`` (for explain), also how many
    elements each start placed and per element the unit each live chain placed it in (-1 once dead)."""
    e = starts
    alive = np.ones(len(starts), dtype=bool)
    reached = np.zeros(len(starts) if record else 0, dtype=_I64)
    last_unit_of: list[np.ndarray] = []
    for i, row in enumerate(hit_units):
        # every position of the element from the same unit on: an event set's members come in any order
        nxt = [at[at.searchsorted(e, "left")] for at in row]
        e = nxt[0] if len(nxt) == 1 else np.maximum.reduce(nxt)
        alive &= e <= bound  # a dead chain searches on from the sentinel, beyond every bound
        if record:
            reached[alive] = i + 1
            last_unit_of.append(np.where(alive, e, -1))
            if not alive.any():
                break
    return alive, reached, last_unit_of


def window_neighbourhood(query: Query, units: Units, hits: np.ndarray) -> Runs:
    """The units meeting the window around some hit unit ``h`` (``hits``: sorted indices): time
    ``[h.lo_ts − d, h.hi_ts + d]``, or seqs ``[h.lo_seq − (n−1), h.hi_seq + (n−1)]``; as runs."""
    if not len(hits):
        return EMPTY, EMPTY
    # Each hit's window as a run of units: both ends grow with the hit (units follow the stream's order),
    # and each run holds its own hit, so the runs of consecutive hits meet; join the ones that meet.
    first, last = window_runs(query, units, hits)
    apart = (first[1:] > last[:-1]).nonzero()[0]
    return np.concatenate((first[:1], first[apart + 1])), np.concatenate((last[apart], last[-1:]))


def window_runs(query: Query, units: Units, at: np.ndarray) -> Runs:
    """Per unit ``u`` of ``at``, the run ``[first, last)`` of units meeting the window around it: time
    ``[u.lo_ts − d, u.hi_ts + d]``, or seqs ``[u.lo_seq − (n−1), u.hi_seq + (n−1)]`` (the query has a
    window)."""
    w = query.within
    if isinstance(w, WithinTime):
        return (units.hi_ts.searchsorted(units.lo_ts[at] - w.micros, "left"),
                units.lo_ts.searchsorted(units.hi_ts[at] + w.micros, "right"))
    assert isinstance(w, WithinEvents)
    return (units.hi_seq.searchsorted(units.lo_seq[at] - (w.count - 1), "left"),
            units.lo_seq.searchsorted(units.hi_seq[at] + (w.count - 1), "right"))


def position_count(plan: Plan) -> int:
    return sum(len(groups) for groups in plan.elements)


def window_bound(query: Query, units: Units, starts: np.ndarray) -> np.ndarray:
    """Per start unit, the last unit a match starting in it may reach by its window alone."""
    w = query.within
    bound: np.ndarray
    if isinstance(w, WithinTime):
        bound = np.searchsorted(units.lo_ts, units.hi_ts[starts] + w.micros, "right") - 1
        return bound
    if isinstance(w, WithinEvents):
        bound = np.searchsorted(units.lo_seq, units.hi_seq[starts] + (w.count - 1), "right") - 1
        return bound
    return np.full(len(starts), len(units) - 1, dtype=_I64)


def contiguity_bound(plan: Plan, units: Units, any_hit: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Strict contiguity: every event between a match's first and last is bound, so every unit it spans
    holds a pattern type (``any_hit``: the sorted units that may) — the match ends within the run of such
    units starting at its first unit; without Kleene variables it has one event per position."""
    # per start (itself a hit), the last unit of its run of consecutive hits
    run_end = np.ones(len(any_hit), dtype=bool)
    run_end[:-1] = np.diff(any_hit) != 1
    ends = any_hit[run_end]
    bound = ends[np.searchsorted(ends, starts, "left")]
    if not any(v.kleene for v in plan.positives):
        last_seq = units.hi_seq[starts] + (position_count(plan) - 1)
        bound = np.minimum(bound, np.searchsorted(units.lo_seq, last_seq, "right") - 1)
    return bound


def negated_types(plan: Plan) -> frozenset[str] | None:
    """Types some negated variable can bind (None when there is no negation or one is ANY)."""
    if not plan.negatives or any(v.types is None for v in plan.negatives):
        return None
    return frozenset().union(*(v.types for v in plan.negatives))  # type: ignore[arg-type]


def relevant_units(query: Query, plan: Plan, in_between: tuple[int, int], any_hit: np.ndarray,
                   neg_hits: np.ndarray | None, contiguous: bool) -> np.ndarray:
    """Units verification must read, as a mask (``any_hit``: a mask of units inside BETWEEN, the run
    ``in_between``; ``neg_hits``: sorted units).  Events of types no positive or negated variable can bind
    are ignored by every automaton transition and by negation, so units without such types are skipped;
    the contiguity strategies are defined on all events, so they read everything in the span."""
    if (query.strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY) or contiguous
            or any(v.types is None for v in plan.negatives)):
        relevant = np.zeros(len(any_hit), dtype=bool)
        relevant[in_between[0]:in_between[1]] = True
        return relevant
    relevant = any_hit.copy()
    if neg_hits is not None:
        relevant[neg_hits] = True
    return relevant


def is_contiguous(query: Query) -> bool:
    """Strict contiguity, or partition contiguity over the whole stream (no PARTITION BY)."""
    return (query.strategy == Strategy.STRICT_CONTIGUITY
            or (query.strategy == Strategy.PARTITION_CONTIGUITY and not query.partition_by))
