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

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from exact.arrays import sorted_ints
from exact.engine.automaton import Automaton
from exact.engine.parallel import searched

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
    # the window's last member (the values ascend: by one merge when they are many)
    hi = searched(everyone, everyone[lo] - starts + end[starts], "right", 1) - 1
    groups = [g for gs in aut.element_groups for g in gs]
    ok = hi - lo + 1 >= len(groups)  # (5.1)
    # per group, its first member at or after each window's first and its last at or before the window's last
    at = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    first_of = np.empty((len(lo), len(at)), dtype=np.int64)
    last_of = np.empty((len(lo), len(at)), dtype=np.int64)
    by_end = np.arange(len(hi)) if bool(np.all(hi[1:] >= hi[:-1])) else np.argsort(hi, kind="stable")
    if not _bounds_compiled()(np.ascontiguousarray(em, dtype=np.int64), np.asarray(list(at), dtype=np.int64),
                              lo, hi[by_end], by_end, first_of, last_of):
        return starts[:0]  # a group without a member: no window holds a match
    first = {g: first_of[:, i] for g, i in at.items()}
    last = {g: last_of[:, i] for g, i in at.items()}
    for g in groups:
        ok &= first[g] <= last[g]  # (5.3): some event of the group lies in the window
    for left, right in zip(aut.element_groups, aut.element_groups[1:], strict=False):  # (5.4)
        for g in left:
            for h in right:
                ok &= first[g] < last[h]
    out = starts[ok]
    return out if keys is None else sorted_ints(out)


@functools.cache
def _bounds_compiled() -> Callable[..., bool]:
    """:func:`_group_bounds` compiled (cached on disk) on first use."""
    import numba

    compiled: Callable[..., bool] = numba.njit(cache=True, nogil=True)(_group_bounds)
    return compiled


def _group_bounds(em: Any, masks: Any, lo: Any, hi: Any, order: Any, first: Any, last: Any) -> bool:
    """For each group ``masks[g]``: ``first[j, g]``, its first member at or after ``lo[j]`` (ascending; the
    members' count where none), and ``last[order[j], g]``, its last at or before ``hi[j]`` (ascending; -1
    where none) — one pass forward and one back over the members.  False when a group has no member."""
    n, groups, m = len(em), len(masks), len(lo)
    seen = np.full(groups, -1, dtype=np.int64)
    j = 0
    for i in range(n):
        e = em[i]
        for g in range(groups):
            if e & masks[g]:
                seen[g] = i
        while j < m and hi[j] == i:
            for g in range(groups):
                last[order[j], g] = seen[g]
            j += 1
    for g in range(groups):
        if seen[g] < 0:
            return False
    ahead = np.full(groups, n, dtype=np.int64)
    j = m - 1
    for i in range(n - 1, -1, -1):
        e = em[i]
        for g in range(groups):
            if e & masks[g]:
                ahead[g] = i
        while j >= 0 and lo[j] == i:
            for g in range(groups):
                first[j, g] = ahead[g]
            j -= 1
    return True


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
