"""Approximate evaluation of one query: its candidate intervals on a type index (Baltus 2021, §4.3).

:func:`approximate` finds where each position of the pattern may occur
(:mod:`~sketch.evaluate.occurrence`), the start units from which a chain of units can hold a match
within its window (:mod:`~sketch.evaluate.chains`), and how far each candidate reaches;
:func:`approximate_exists` answers ``RETURN exists`` from growing prefixes of the stream first.

**Reach.**  The end of an exact match is not bounded by the greedy chain (a Bloom false positive or a WHERE
condition can push the real binding later), so the candidate interval of start unit ``s`` reaches to the
last unit ``R(s)`` where the last element may occur within the window (without a window: in the rest of the
stream).  Under strict contiguity (and partition contiguity without ``PARTITION BY``, which is the same) every
event between a match's first and last is bound, so every unit between ``s`` and the end unit holds a pattern
type: the reach stops at the end of the run of such units, and without Kleene variables a match has exactly
one event per position, so it ends within ``positions − 1`` events of ``s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from exact.query.ast import Between, Query, WithinEvents
from exact.query.normalize import normalize
from sketch.evaluate.approximation import Approximation
from sketch.evaluate.chains import (
    contiguity_bound,
    greedy_chain,
    is_contiguous,
    negated_types,
    position_count,
    relevant_units,
    window_bound,
    window_neighbourhood,
    window_runs,
)
from sketch.evaluate.explain import Position, absent_text, explain_chain, positions_of, window_text
from sketch.evaluate.units import TypeIndex, union

_I64 = np.int64


def _types(position: Position) -> frozenset[str]:
    """The types of a position that has them (not ANY)."""
    assert position.types is not None
    return position.types


def approximate(query: Query, index: TypeIndex, *, type_counts: Mapping[str, int] | None = None
                ) -> Approximation:
    """The candidate intervals of ``query`` on ``index`` (see the module docstring).

    ``type_counts`` (type → events in the stream), when given for a query with a window, lets the walk go
    rarest position first and probe the others only within a window of it (fewer probes; as complete).
    Raises :class:`~exact.errors.QuerySemanticError` for invalid queries (as the exact engine does).
    """
    plan = normalize(query)
    units = index.units
    U = len(units)
    positions = positions_of(plan)
    between = query.between
    b_lo, b_hi = units.between_range(between)
    empty = np.zeros(0, dtype=_I64)
    probes_before = index.probes()

    def result(starts: np.ndarray, ends: np.ndarray, read_ends: np.ndarray, relevant: np.ndarray,
               explain: str | None, keys: int) -> Approximation:
        fpr = index.top_level_false_positive_rate(keys, between) if keys else 0.0
        return Approximation(query, units, starts, ends, read_ends, relevant, index.probes() - probes_before,
                             fpr, explain)

    no_relevant = np.zeros(U, dtype=bool)
    if U == 0 or b_lo >= b_hi:
        why = "the dataset is empty" if U == 0 else "no event lies in the BETWEEN range"
        return result(empty, empty, empty, no_relevant, why, 0)
    if plan.unsatisfiable:
        return result(empty, empty, empty, no_relevant, "the WHERE clause compares literals and is false", 0)

    # Occurrence of every position (and of the negated types, which verification must read), top-down in
    # one walk; a position found nowhere ends the walk early and the query at once.  Each is the sorted
    # list of units it may occur in (inside BETWEEN).
    typed = [p for element in positions for p in element if p.types is not None]
    keys = sum(len(_types(p)) for p in typed)
    neg_types = negated_types(plan)
    found_of: dict[int, np.ndarray] = {}
    allowed = None
    rest = typed
    if query.within is not None and type_counts is not None and typed:
        # Rarest first (Kolchinsky & Schuster's lazy evaluation, on the tree): walk the rarest position
        # alone, then the others only near it.  For a start unit s whose chain passes the rarest
        # position's unit h, every unit from s to s's window bound (chain, reach, a trailing NOT's window)
        # meets the window around h, so nothing a candidate needs is left unprobed.
        rare = min(typed, key=lambda p: sum(type_counts.get(t, 0) for t in _types(p)))
        rare_hits = index.occurrences([_types(rare)], between)[0]
        if not len(rare_hits):
            return result(empty, empty, empty, no_relevant, absent_text(rare, between), keys)
        found_of[id(rare)] = rare_hits
        allowed = window_neighbourhood(query, units, rare_hits)
        rest = [p for p in typed if p is not rare]
    found = index.occurrences([_types(p) for p in rest] + ([neg_types] if neg_types else []),
                              between, required=len(rest), allowed=allowed)
    found_of.update({id(p): h for p, h in zip(rest, found, strict=False)})
    neg_hits = found[-1] if neg_types else None
    if getattr(index, "cut_short", False):
        # The walk stopped at a position found nowhere; the others' answers are partial: name that one.
        absent = rest[index.absent[0]]  # type: ignore[attr-defined]
        if allowed is not None:
            return result(empty, empty, empty, no_relevant,
                          f"{absent.label} never occurs{window_text(query)} of {rare.label}", keys)
        return result(empty, empty, empty, no_relevant, absent_text(absent, between), keys)
    hits: list[list[np.ndarray]] = []
    for element in positions:
        row = []
        for p in element:
            h = np.arange(b_lo, b_hi, dtype=_I64) if p.types is None else found_of[id(p)]
            if not len(h):
                why = (f"{p.label} never occurs{window_text(query)} of {rare.label}" if allowed is not None
                       else absent_text(p, between))
                return result(empty, empty, empty, no_relevant, why, keys)
            row.append(h)
        hits.append(row)

    starts = union(hits[0])
    contiguous = is_contiguous(query)
    any_hit = np.zeros(U, dtype=bool)  # units where some position may occur
    for row in hits:
        for h in row:
            any_hit[h] = True
    bound = window_bound(query, units, starts)
    if contiguous:
        bound = np.minimum(bound, contiguity_bound(plan, units, np.flatnonzero(any_hit), starts))
    # per position, its hit units followed by U (the next hit at or after x is looked up by search)
    tail = np.asarray([U], dtype=_I64)
    hit_units = [[np.concatenate((h, tail)) for h in row] for row in hits]
    alive = greedy_chain(hit_units, starts, bound)[0]
    if not alive.any():
        _, reached, last_unit_of = greedy_chain(hit_units, starts, bound, record=True)
        return result(empty, empty, empty, no_relevant,
                      explain_chain(query, positions, units, starts, reached, last_unit_of, hits,
                                    contiguous), keys)

    starts, bound = starts[alive], bound[alive]
    last_hits = union(hits[-1])
    reach = last_hits[np.searchsorted(last_hits, bound, "right") - 1]  # the chain put one at or before
    ends = units.hi_seq[reach].astype(_I64)
    w = query.within
    if isinstance(w, WithinEvents):
        ends = np.minimum(ends, units.hi_seq[starts] + (w.count - 1))
    if contiguous and not any(v.kleene for v in plan.positives):
        ends = np.minimum(ends, units.hi_seq[starts] + (position_count(plan) - 1))
    read_ends = ends.copy()
    if plan.negatives and plan.negatives[-1].element == len(plan.elements):
        # A trailing NOT looks for forbidden events up to the window's end after the first event.
        window_end = units.hi_seq[window_bound(query, units, starts)].astype(_I64)
        if isinstance(w, WithinEvents):
            window_end = np.minimum(window_end, units.hi_seq[starts] + (w.count - 1))
        read_ends = np.maximum(read_ends, window_end)
    relevant = relevant_units(query, plan, (b_lo, b_hi), any_hit, neg_hits, contiguous)
    return result(starts, ends, read_ends, relevant, None, keys)


#: The tree is passed over (:func:`tree_narrows`) only with at least this many units in the query's range
#: (below, its walk costs little anyway) ...
PASS_OVER_MIN_UNITS = 1024
#: ... and when at least this share of them has the rarest position within a window.
PASS_OVER_SHARE = 0.98
#: Units sampled, evenly spaced, when the tree's units are not listed per key (a tree too large to slice),
#: each looked at within at most this many units either side.
PASS_OVER_SAMPLE = 512
PASS_OVER_REACH = 32


def tree_narrows(query: Query, index: TypeIndex, type_counts: Mapping[str, int]) -> bool:
    """May the tree's candidates be markedly fewer than the stream's units (within ``BETWEEN``)?

    Every candidate lies within a window of a unit holding the pattern's rarest position (by the stream's
    type counts; :func:`approximate` walks it first for that reason).  When at least
    :data:`PASS_OVER_SHARE` of a range of at least :data:`PASS_OVER_MIN_UNITS` units have such a unit
    within a window — frequent types spread evenly — the chains and windows would cost their time and
    rule out next to nothing: the store is better read whole through its row filter, which keeps only the
    events of the pattern's types (and their own conditions) anyway.  Without a window the rarest position
    prunes only the range's ends, so a unit counts only when it may hold that position itself.  Every unit
    is looked at when the tree lists each key's units (sliced filters); else a sample of
    :data:`PASS_OVER_SAMPLE`, each within :data:`PASS_OVER_REACH` units (a lower bound of the share).  A
    planner's estimate, never a matter of correctness: the stream read whole (:func:`whole_stream`) holds
    every candidate.  Types clustered in time keep the tree."""
    near_share = getattr(index, "near_share", None)
    units = index.units
    lo, hi = units.between_range(query.between)
    if near_share is None or hi - lo < max(PASS_OVER_MIN_UNITS, 1):
        return True
    plan = normalize(query)
    if plan.unsatisfiable:
        return True  # (the approximation explains it)
    typed = [p for element in positions_of(plan) for p in element if p.types is not None]
    if not typed:
        return False
    rare = min(typed, key=lambda p: sum(type_counts.get(t, 0) for t in _types(p)))
    every = getattr(index, "lists_units", False)
    at = (np.arange(lo, hi, dtype=_I64) if every else
          np.unique(np.linspace(lo, hi - 1, num=PASS_OVER_SAMPLE).astype(_I64)))
    if query.within is None:
        first, last = at, at + 1
    else:
        first, last = window_runs(query, units, at)
        first, last = np.maximum(first, lo), np.minimum(last, hi)
        if not every:
            first, last = np.maximum(first, at - PASS_OVER_REACH), np.minimum(last, at + PASS_OVER_REACH + 1)
    return bool(near_share(_types(rare), first, last) < PASS_OVER_SHARE)


def whole_stream(query: Query, index: TypeIndex) -> Approximation:
    """The approximation that rules nothing out: every unit within ``BETWEEN`` may start a match reaching
    to the range's end, and every one of them is read."""
    units = index.units
    lo, hi = units.between_range(query.between)
    starts = np.arange(lo, hi, dtype=_I64)
    ends = np.full(len(starts), units.hi_seq[hi - 1] if hi > lo else 0, dtype=_I64)
    relevant = np.zeros(len(units), dtype=bool)
    relevant[lo:hi] = True
    return Approximation(query, units, starts, ends, ends.copy(), relevant, 0, 1.0, None)


#: ``RETURN exists`` tries these shares of the stream's units first (1/64, 1/16, 1/4), then all of it.
_EXISTS_PREFIXES = (64, 16, 4)
#: Prefixes shorter than this many units are skipped (the whole walk costs little there anyway).
_EXISTS_MIN_UNITS = 256


def approximate_exists(query: Query, index: TypeIndex, *, type_counts: Mapping[str, int] | None = None
                       ) -> Approximation:
    """Whether ``query`` may match, from the tree, stopping early: :func:`approximate` on growing
    prefixes of the stream (its first 1/64, 1/16 and 1/4 of units, then all of it), until one has a
    candidate.

    A chain of units within a prefix is a chain of the whole stream (the prefix only has fewer units where
    a type may occur), so on a false-positive-free index ``exists: true`` from a prefix is what the whole
    evaluation says; on the tree the prefix's walk probes other nodes, so its yes may differ from the whole
    walk's by a Bloom false hit, never by a true occurrence.  ``false`` is only ever said by the walk over
    the whole stream, so it is never a false negative.  The result's candidates are those of the prefix
    that answered (RETURN exists reports none), its ``nodes_probed`` counts every walk.
    """
    units = index.units
    probes = 0
    for share in _EXISTS_PREFIXES:
        upto = len(units) // share
        if upto < _EXISTS_MIN_UNITS:
            continue
        end = int(units.hi_ts[upto - 1])
        own = query.between
        prefix = Between(own.start if own is not None else int(units.lo_ts[0]),
                         min(own.end, end) if own is not None else end)
        if prefix.start > prefix.end:
            continue
        approx = approximate(replace(query, between=prefix), index, type_counts=type_counts)
        probes += approx.nodes_probed
        if approx.exists:
            return replace(approx, query=query, nodes_probed=probes)
    whole = approximate(query, index, type_counts=type_counts)
    return replace(whole, nodes_probed=whole.nodes_probed + probes)
