"""Which windows can hold a match at all: necessary conditions on a window's first event, vectorised.

* :func:`candidate_windows` — phase 1 of the two-phase strategy (Cadonna 2013 ch. 5 = KDD'12 Algorithm 3)
  for all windows at once: filtered (Thm. 5.1), partitioned (Def. 5.3) windows that satisfy the candidate
  conditions of Thm. 5.2 — (5.1) ``|W| ≥ m``; (5.2) the first event satisfies a ``B1`` variable; (5.3)
  every variable has an event in W; (5.4) for consecutive sets, some event of each ``Bi`` variable precedes
  some event of each ``B_{i+1}`` variable.  The printed counters' decrement undoes increments that never
  happened (docs/semantics.md A5 (T30)); this is the exact alternative the digest gives, with sorted arrays.
* :func:`necessary_starts` — rarest group first (Kolchinsky & Schuster: the rarest variable decides
  fastest whether a window can match), every group needs an event within the window in the first event's
  partition; then the ordered chain of Thm. 5.2 (5.4): the events of ``B_{i+1}`` follow the earliest
  possible completion of ``Bi``, and the earliest possible last event lies within the window.

Positions are searched as ``key · B + position``, so one sorted array per group serves every partition.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from exact.arrays import sorted_ints
from exact.engine.automaton import Automaton

_NEVER = np.iinfo(np.int64).max


def candidate_windows(aut: Automaton, evmask: np.ndarray, keys: np.ndarray | None, end: np.ndarray,
                      start_ok: np.ndarray) -> np.ndarray:
    """The first events of the candidate match windows (see the module docstring), in stream order.

    Window ``W(s)`` holds the filtered events of ``s``'s partition from ``s`` to ``end[s]``; ``keys[p] < 0``
    puts ``p`` in no partition; ``keys=None``: one partition.  The members are laid out partition by
    partition (``key · B + position``), so a window is a run ``[lo, hi]`` of that order; per group, the
    next of its events at or after each index and the last at or before it (running min/max, O(n)) answer
    (5.3) and (5.4) for every window at once."""
    if keys is None:
        spos = np.flatnonzero(evmask != 0)
        everyone = spos
    else:
        pos = np.flatnonzero((evmask != 0) & (keys >= 0))
        enc = keys[pos] * (len(evmask) + 1) + pos
        perm = np.argsort(enc)
        everyone, spos = enc[perm], pos[perm]
    em = evmask[spos]
    lo = np.flatnonzero(((em & aut.first_element_mask) != 0) & start_ok[spos])  # (5.2)
    starts = spos[lo]
    if not len(lo):
        return starts
    hi = everyone.searchsorted(everyone[lo] - starts + end[starts], "right") - 1  # the window's last member
    groups = [g for gs in aut.element_groups for g in gs]
    ok = hi - lo + 1 >= len(groups)  # (5.1)
    n = len(everyone)
    index = np.arange(n)
    first: dict[int, np.ndarray] = {}
    last: dict[int, np.ndarray] = {}
    for g in groups:
        mine = (em & g) != 0
        if not mine.any():
            return starts[:0]
        following = np.minimum.accumulate(np.where(mine, index, n)[::-1])[::-1]  # next of g at or after
        preceding = np.maximum.accumulate(np.where(mine, index, -1))  # last of g at or before
        first[g], last[g] = following[lo], preceding[hi]
        ok &= first[g] <= last[g]  # (5.3): some event of the group lies in the window
    for left, right in zip(aut.element_groups, aut.element_groups[1:], strict=False):  # (5.4)
        for g in left:
            for h in right:
                ok &= first[g] < last[h]
    out = starts[ok]
    return out if keys is None else sorted_ints(out)


def necessary_starts(aut: Automaton, evmask: np.ndarray, keys: np.ndarray, end: np.ndarray,
                     firsts: np.ndarray, rarity: Callable[[tuple[int, ...]], float]) -> np.ndarray:
    """The ``firsts`` whose windows pass the necessary conditions (see the module docstring).
    ``rarity(members)`` orders the groups (smaller first)."""
    firsts = firsts[keys[firsts] >= 0]
    base = len(evmask) + 1
    groups = [(gm, tuple(_bits(gm))) for gs in aut.element_groups for gm in gs]
    encoded = {}
    for gm, _ in groups:
        pos = np.flatnonzero((evmask & gm) != 0)
        pos = pos[keys[pos] >= 0]
        encoded[gm] = sorted_ints(keys[pos] * base + pos)

    def next_in_partition(gm: int, starts: np.ndarray, after: np.ndarray, strictly: bool) -> np.ndarray:
        """Per start: the first position of group ``gm`` at (or after) ``after`` in its partition."""
        enc = encoded[gm]
        out = np.full(len(starts), _NEVER, dtype=np.int64)
        alive = np.flatnonzero(after != _NEVER)
        if not len(alive) or not len(enc):
            return out
        part = keys[starts[alive]]
        k = np.searchsorted(enc, part * base + after[alive], "right" if strictly else "left")
        inside = k < len(enc)
        hit = enc[k[inside]]
        same = hit // base == part[inside]
        out[alive[inside][same]] = hit[same] % base
        return out

    for gm, _members in sorted(groups, key=lambda g: rarity(g[1])):
        if not len(firsts):
            return firsts
        nxt = next_in_partition(gm, firsts, firsts, strictly=False)
        firsts = firsts[nxt <= end[firsts]]
    if not len(firsts):
        return firsts
    bound = firsts.copy()
    for i, gs in enumerate(aut.element_groups):
        done = np.zeros(len(firsts), dtype=np.int64)
        for gm in gs:
            done = np.maximum(done, next_in_partition(gm, firsts, bound, strictly=i > 0))
        bound = done
    within: NDArray[np.bool_] = bound <= end[firsts]  # the earliest possible last event lies in the window
    return firsts[within]


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]
