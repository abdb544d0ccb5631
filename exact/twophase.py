"""The two-phase evaluation strategy (Cadonna 2013 ch. 5 = Cadonna, Gamper & Böhlen, KDD'12, Algorithm 3).

Phase 1 buffers events in *match windows* per partition and decides cheaply whether a window can contain a
match starting at its first event; phase 2 calls the matching algorithm ``A`` (one of the window functions
of :mod:`exact.strategies`) only for those *candidate* windows.

* **Filtered windows** (Thm. 5.1): only events satisfying some variable's properties are buffered.
* **Partitioned windows** (Def. 5.3): events are split by the values of the partitioning attributes X,
  the attributes on which the equality closure relates every pair of positive variables
  (``plan.partition_attrs``); each partition has its own window.
* **Candidate windows** (Thm. 5.2): (5.1) ``|W| ≥ m``; (5.2) the first event satisfies a ``B1`` variable;
  (5.3) every variable has an event in W; (5.4) for consecutive sets, some event of each ``Bi`` variable
  precedes some event of each ``B_{i+1}`` variable.  Instead of the printed counters — whose decrement
  undoes increments that never happened and loses matches (digest A5, T30) — each variable keeps a FIFO
  of the window positions of its events: (5.3) ⇔ every FIFO is non-empty, (5.4) ⇔
  ``first(v) < last(w)`` for v ∈ Bi, w ∈ B_{i+1} (the exact alternative the digest gives).
* **Corrected control flow** (digest A6): the first event is dequeued whether or not ``A`` was called,
  and the final flush does not stop at a window failing only (5.2) — that condition is not monotone
  under dequeue, the others are (T14).

An OR element is one position: its FIFOs are those of its alternatives, any of which satisfies it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from exact.automaton import Automaton, Buffer, Runner
from exact.strategies import PartitionViews, View

WindowFn = Callable[[Runner, View, int, int], list[Buffer]]


class _Window:
    """One partition's match window with per-group FIFOs of the positions satisfying the group."""

    __slots__ = ("events", "fifos")

    def __init__(self, ngroups: int) -> None:
        self.events: deque[int] = deque()
        self.fifos: list[deque[int]] = [deque() for _ in range(ngroups)]


def two_phase(run: Runner, window_fn: WindowFn, *, evmask_np: np.ndarray, seq: np.ndarray,
              ts: np.ndarray, positions: np.ndarray, partition_keys: np.ndarray | None,
              within: tuple[str, int] | None,
              jump: bool, start_ok: Callable[[int], bool]) -> list[Buffer]:
    """Algorithm 3 (corrected) over the events at ``positions`` (in stream order).

    ``partition_keys[i]`` is the partition of ``positions[i]`` (-1: in no partition, dropped), or None
    when X is empty; ``within`` is ("time", micros), ("events", n) or None (unbounded: windows close only
    in the final flush); ``start_ok(p)`` restricts which first events are reported (``starts=``).
    """
    aut: Automaton = run.automaton
    evmask = run.evmask
    group_masks = [g for groups in aut.element_groups for g in groups]
    ngroups = len(group_masks)
    b1 = aut.first_element_mask
    # per set boundary i → i+1: the group indices on each side, for (5.4)
    boundaries = []
    offset = 0
    sizes = [len(g) for g in aut.element_groups]
    for i in range(len(sizes) - 1):
        left = list(range(offset, offset + sizes[i]))
        right = list(range(offset + sizes[i], offset + sizes[i] + sizes[i + 1]))
        boundaries.append((left, right))
        offset += sizes[i]

    results: list[Buffer] = []
    windows: dict[int, _Window] = {}
    keys = partition_keys if partition_keys is not None else np.zeros(len(positions), dtype=np.int64)
    parts = PartitionViews(evmask_np, positions, keys, jump, evmask)
    kind, limit = within if within is not None else ("none", 0)

    def monotone_ok(w: _Window) -> bool:
        if len(w.events) < ngroups:  # (5.1)
            return False
        fifos = w.fifos
        for f in fifos:  # (5.3)
            if not f:
                return False
        for left, right in boundaries:  # (5.4)
            for a in left:
                first_a = fifos[a][0]
                for b in right:
                    if not first_a < fifos[b][-1]:
                        return False
        return True

    def call(key: int, w: _Window) -> None:
        first = w.events[0]
        if not evmask[first] & b1 or not start_ok(first):  # (5.2)
            return
        results.extend(window_fn(run, parts.view(key), first, w.events[-1]))

    def dequeue(w: _Window) -> None:
        first = w.events.popleft()
        for f in w.fifos:
            if f and f[0] == first:
                f.popleft()

    def expired(first: int, p: int) -> bool:
        if kind == "time":
            return ts[p] - ts[first] > limit
        if kind == "events":
            return seq[p] - seq[first] >= limit
        return False

    for i, p in enumerate(positions.tolist()):
        em = evmask[p]
        if not em:  # filtered match windows (Thm. 5.1)
            continue
        key = int(partition_keys[i]) if partition_keys is not None else 0
        if key < 0:
            continue
        w = windows.get(key)
        if w is None:
            w = windows[key] = _Window(ngroups)
        while w.events and expired(w.events[0], p):
            if monotone_ok(w):
                call(key, w)
            dequeue(w)
        w.events.append(p)
        for g, gm in enumerate(group_masks):
            if em & gm:
                w.fifos[g].append(p)
    for key, w in windows.items():  # final flush: stop only when a monotone condition fails
        while w.events and monotone_ok(w):
            call(key, w)
            dequeue(w)
    return results



def candidate_windows(aut: Automaton, evmask: np.ndarray, keys: np.ndarray | None, end: np.ndarray,
                      start_ok: np.ndarray) -> np.ndarray:
    """Phase 1 of Algorithm 3 for all windows at once: the first events of the candidate match windows.

    The same filtered, partitioned windows and conditions (5.1)–(5.4) as :func:`two_phase`, evaluated
    with sorted arrays instead of a loop: window ``W(s)`` holds the filtered events of ``s``'s partition
    from ``s`` to ``end[s]``; positions are searched as ``key * B + position`` (one sorted array per
    group for all partitions), so ``|W|``, the first and the last event of each group in ``W`` are
    binary searches.  ``keys[p] < 0`` puts ``p`` in no partition; ``keys=None``: one partition (the
    positions are searched as they are, already sorted, which saves the encoding and sorting).
    """
    if keys is None:
        member = evmask != 0
        everyone = member.nonzero()[0]
        starts = (((evmask & aut.first_element_mask) != 0) & start_ok).nonzero()[0]  # (5.2)
        lo, hi = starts, end[starts]
    else:
        base = len(evmask) + 1
        member = (evmask != 0) & (keys >= 0)
        everyone = np.sort(keys[member] * base + member.nonzero()[0])
        starts = (member & ((evmask & aut.first_element_mask) != 0) & start_ok).nonzero()[0]  # (5.2)
        lo = keys[starts] * base + starts
        hi = keys[starts] * base + end[starts]
    groups = [g for gs in aut.element_groups for g in gs]
    size = everyone.searchsorted(hi, "right") - everyone.searchsorted(lo, "left")
    ok = size >= len(groups)  # (5.1)
    first: dict[int, np.ndarray] = {}
    last: dict[int, np.ndarray] = {}
    for g in groups:
        if keys is None:
            enc = ((evmask & g) != 0).nonzero()[0]  # a group's events are members
        else:
            pos = (member & ((evmask & g) != 0)).nonzero()[0]
            enc = np.sort(keys[pos] * base + pos)
        if not len(enc):
            return starts[:0]
        i = enc.searchsorted(lo, "left")
        j = enc.searchsorted(hi, "right") - 1
        ok &= i <= j  # (5.3): some event of the group lies in [lo, hi]
        # where (5.3) fails the clipped positions are meaningless, but those windows are out already
        first[g], last[g] = enc[np.minimum(i, len(enc) - 1)], enc[np.maximum(j, 0)]
    for left, right in zip(aut.element_groups, aut.element_groups[1:], strict=False):  # (5.4)
        for g in left:
            for h in right:
                ok &= first[g] < last[h]
    return starts[ok]
