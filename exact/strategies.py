"""Per-window evaluation under each event selection strategy (CONTRACT §2).

Every function here is an *event pattern matching algorithm* in the sense of Cadonna 2013, Def. 5.1: given
a match window — the events of a :class:`View` from position ``s`` up to ``end`` — it returns the match
buffers of the matches that **start with the window's first event** ``s``.  Positions are indices into the
stream the :class:`~exact.automaton.Runner` was bound to.

* :func:`next_match_window` — skip-till-next-match: Algorithm 2 (SESExec) with the corrected line 12
  (digest A1: the instance set is *replaced* per event), instances fire every transition that holds
  (greedy), skip events that fire none, and are read until the window ends so that a trailing Kleene
  variable extends maximally (digest A3).
* :func:`robust_next_match_window` — robust skip-till-next-match: Algorithm 4 (automaton with
  backtracking over an execution tree, Def. 6.3 and Lemma 6.1's sibling rule).
* :func:`any_match_window` — skip-till-any-match (Def. 3.2): every match starting at ``s``, enumerated
  depth-first by the next bound event in stream order, so each match is produced exactly once.
* :func:`contiguous_window` — strict / partition contiguity: the next bound event must be the very next
  event of the stream (resp. of the partition), given by a successor array.

Lazy reading (Kolchinsky & Schuster's "process only what an instance needs"): an instance in state ``q``
can only change on an event satisfying the properties of a variable with a transition out of ``q``; the
:class:`View` jumps straight to the next such event (bisection in per-mask position lists), so noise,
other partitions' events and states that can no longer move cost nothing.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from exact.automaton import Buffer, Runner

NEVER = 1 << 62


class View:
    """The events one window executor may read: a whole stream or one partition, with jumping.

    ``members`` are the positions of the view (None = all positions ``0..n-1``); with ``jump`` the view
    returns only events satisfying one of the requested variables' properties, otherwise every event of
    the view (the prefilter-off mode: every event enters the Python loop).
    """

    def __init__(self, evmask: np.ndarray, members: np.ndarray | None, jump: bool,
                 evmask_list: Sequence[int] | None = None) -> None:
        self.evmask = evmask
        self.evmask_list = evmask.tolist() if evmask_list is None and members is not None else evmask_list
        self.members = members
        self.jump = jump
        self._lists: dict[int, list[int]] = {}
        self._all: list[int] | None = None

    def after(self, mask: int, i: int) -> int:
        """The first position > i whose event may fire one of the variables in ``mask``."""
        if not mask:
            return NEVER
        if not self.jump:
            if self.members is None:
                return i + 1 if i + 1 < len(self.evmask) else NEVER
            lst = self._all
            if lst is None:
                lst = self._all = self.members.tolist()
        else:
            lst = self._lists.get(mask)
            if lst is None:
                lst = self._positions(mask)
        k = bisect_right(lst, i)
        return lst[k] if k < len(lst) else NEVER

    def _positions(self, mask: int) -> list[int]:
        if self.members is None:
            lst = np.flatnonzero(self.evmask & mask).tolist()
        elif len(self.members) < 64:
            # a small partition: numpy's per-call overhead exceeds the work
            if self._all is None:
                self._all = self.members.tolist()
            em = self.evmask_list
            lst = [p for p in self._all if em[p] & mask]
        else:
            m = self.members
            lst = m[(self.evmask[m] & mask) != 0].tolist()
        self._lists[mask] = lst
        return lst


class PartitionViews:
    """One :class:`View` per partition (Def. 5.3): positions sorted by key once, views made on demand.

    ``keys[i]`` is the partition of ``positions[i]``; negative keys (a null partition attribute) belong
    to no partition.  Events satisfying no variable's properties are left out.  A partition's positions
    are found by bisection when a window first reads it: a verified read has hundreds of partitions
    (cases) and views a few of them.  ``evmask_list`` is ``evmask`` as a list, when the caller has it.
    """

    def __init__(self, evmask: np.ndarray, positions: np.ndarray, keys: np.ndarray, jump: bool,
                 evmask_list: Sequence[int] | None = None) -> None:
        keep = (keys >= 0) & (evmask[positions] != 0)
        pos, k = positions[keep], keys[keep]
        order = np.argsort(k, kind="stable")
        self.positions, self._sorted_keys = pos[order], k[order]
        self.evmask = evmask
        self.evmask_list = evmask.tolist() if evmask_list is None else evmask_list
        self.jump = jump
        self._views: dict[int, View] = {}

    def members(self, key: int) -> np.ndarray:
        lo = int(self._sorted_keys.searchsorted(key, "left"))
        hi = int(self._sorted_keys.searchsorted(key, "right"))
        return self.positions[lo:hi]

    def view(self, key: int) -> View:
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = View(self.evmask, self.members(key), self.jump, self.evmask_list)
        return v


def next_match_window(run: Runner, view: View, s: int, end: int) -> list[Buffer]:
    """Skip-till-next-match on the window [s, end]: Algorithm 2 with digest A1 (see module docstring)."""
    aut = run.automaton
    evmask = run.evmask
    relmask = run.relmask
    after = view.after
    i = s
    started = run.firing(aut.start, run.empty, s)
    if len(started) == 1:
        # one instance (mutually exclusive variables, Lemma 4.1): its buffer is extended in place, so a
        # long (trailing) Kleene binding costs O(1) per event; a branch falls back to the general loop
        q, v, _ = started[0]
        cur: list[list[int]] = [[] for _ in run.empty]
        cur[v].append(s)
        while True:
            mask = relmask(q)
            nxt = after(mask, i)
            if nxt > end:
                return [tuple(map(tuple, cur))] if aut.is_final(q) else []
            if evmask[nxt] & mask:
                fired = run.firing(q, cur, nxt)
                if len(fired) == 1:
                    q, v, _ = fired[0]
                    cur[v].append(nxt)
                elif fired:
                    b = tuple(map(tuple, cur))
                    insts = [(t, b[:v] + (b[v] + (nxt,),) + b[v + 1:]) for t, v, _ in fired]
                    i = nxt
                    break
            i = nxt
    else:
        insts = [(q, b) for q, b, _, _ in run.fire(aut.start, run.empty, s)]
    while insts:
        nxt = NEVER
        for q, _ in insts:
            p = view.after(relmask(q), i)
            if p < nxt:
                nxt = p
        if nxt > end:
            break
        em = evmask[nxt]
        new: list[tuple[int, Buffer]] = []
        for q, b in insts:
            fired = run.fire(q, b, nxt) if em & relmask(q) else None
            if fired:
                new.extend((t, nb) for t, nb, _, _ in fired)
            else:
                new.append((q, b))  # noise for this instance: skipped
        insts = new
        i = nxt
    return [b for q, b in insts if aut.is_final(q)]


def any_match_window(run: Runner, view: View, s: int, end: int) -> list[Buffer]:
    """Skip-till-any-match (Def. 3.2): all matches starting at ``s`` within [s, end]."""
    aut = run.automaton
    relmask = run.relmask
    out: list[Buffer] = []
    stack = [(q, b, s) for q, b, _, _ in run.fire(aut.start, run.empty, s)]
    while stack:
        q, b, last = stack.pop()
        if aut.is_final(q):
            out.append(b)
        mask = relmask(q)
        j = view.after(mask, last)
        while j <= end:
            for t, nb, _, _ in run.fire(q, b, j):
                stack.append((t, nb, j))
            j = view.after(mask, j)
    return out


def contiguous_window(run: Runner, successor: Sequence[int], s: int, end: int) -> list[Buffer]:
    """Matches starting at ``s`` whose events are exactly the consecutive events s, successor[s], ...

    ``successor[x]`` is the position of the event following ``x`` in the stream (strict contiguity) or in
    ``x``'s partition (partition contiguity), or -1 when that event cannot be bound by any variable.
    """
    aut = run.automaton
    out: list[Buffer] = []
    frontier = [(q, b) for q, b, _, _ in run.fire(aut.start, run.empty, s)]
    x = s
    while frontier:
        out.extend(b for q, b in frontier if aut.is_final(q))
        y = successor[x]
        if y < 0 or y > end:
            break
        frontier = [(t, nb) for q, b in frontier for t, nb, _, _ in run.fire(q, b, y)]
        x = y
    return out


class _Node:
    """A node ``(δ, c)`` of the execution tree (Def. 6.3): ``var`` bound from state ``source`` at ``pos``."""

    __slots__ = ("parent", "var", "source", "pos", "children")

    def __init__(self, parent: _Node | None, var: int, source: int, pos: int) -> None:
        self.parent = parent
        self.var = var
        self.source = source
        self.pos = pos
        self.children = 0


def robust_next_match_window(run: Runner, view: View, s: int, end: int) -> list[Buffer]:
    """Robust skip-till-next-match on [s, end]: Algorithm 4 (Cadonna 2013 §6.4).

    Instances run greedily as in Algorithm 2 but each transition adds a node to the window's execution
    tree.  An instance that is not accepting at the window's end reverts its last transition (removes
    that event from the buffer) and resumes reading after it — unless the node has siblings (Lemma 6.1:
    another branch took the same event) or is a child of the root (every match starts at ``s``).  Nodes of
    accepted instances stay in the tree and keep blocking their siblings.  R starts empty (digest A14).
    """
    aut = run.automaton
    relmask = run.relmask
    evmask = run.evmask
    root = _Node(None, -1, aut.start, s - 1)
    results: dict[Buffer, None] = {}
    omega: list[tuple[int, Buffer, _Node, int]] = []
    for t, nb, v, _ in run.fire(aut.start, run.empty, s):
        child = _Node(root, v, aut.start, s)
        root.children += 1
        omega.append((t, nb, child, s + 1))
    first_round = True
    while omega:
        backtracked: list[tuple[int, Buffer, _Node, int]] = []
        if first_round:
            # the children of the root were created by the same event: one forward pass for all of them
            batches = [[(q, b, nd) for q, b, nd, _ in omega]]
            resumes = [s]
            first_round = False
        else:
            batches = [[(q, b, nd)] for q, b, nd, _ in omega]
            resumes = [c - 1 for _, _, _, c in omega]
        for insts, i in zip(batches, resumes, strict=True):
            while insts:
                nxt = NEVER
                for q, _, _ in insts:
                    p = view.after(relmask(q), i)
                    if p < nxt:
                        nxt = p
                if nxt > end:
                    break
                em = evmask[nxt]
                new: list[tuple[int, Buffer, _Node]] = []
                for q, b, nd in insts:
                    fired = run.fire(q, b, nxt) if em & relmask(q) else None
                    if fired:
                        for t, nb, v, _ in fired:
                            child = _Node(nd, v, q, nxt)
                            nd.children += 1
                            new.append((t, nb, child))
                    else:
                        new.append((q, b, nd))
                insts = new
                i = nxt
            for q, b, nd in insts:
                if aut.is_final(q):
                    results[b] = None
                    continue
                parent = nd.parent
                assert parent is not None
                if parent is not root and parent.children == 1:
                    v = nd.var
                    nb = b[:v] + (b[v][:-1],) + b[v + 1:]
                    backtracked.append((nd.source, nb, parent, nd.pos + 1))
                parent.children -= 1
        omega = backtracked
    return list(results)
