"""Skip-till-next-match over a chain of positions, for every window at once (vectorised).

When each element of a SEQ is one position — a variable, a Kleene variable or an OR of plain alternatives
— whose transitions test nothing but the variables' own properties (relations and ``prev`` conditions
other than the partition's, which the partition keys make true, rule a pattern out, and so do the SASE+
run conditions — ``v[1]``, ``v[last]``, aggregates — which the kernels evaluate), the SES automaton of
a window runs one instance: from the state after element ``i`` only element ``i+1`` and the Kleene loop of
element ``i`` can fire, and where no event satisfies both (checked on the data) nothing branches.  That
instance binds each element to the first event of its position after the element before it was entered;
a Kleene element takes every event of its variable from its first one up to (not including) the next
element's event, or, last, up to the window's end (the trailing-Kleene rule, docs/semantics.md A3).  So every window
is a chain of bisections in per-position sorted arrays (positions encoded as ``key · B + position``, one
array serving every partition), with no loop per window.  An event satisfying several alternatives of an
OR binds the first of them, as one match (docs/contract.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exact.arrays import joined, run_positions, sorted_ints
from exact.engine.automaton import Automaton
from exact.engine.parallel import each, pieces
from exact.query.ast import Condition, Field
from exact.query.normalize import Plan

_I64 = np.int64


@dataclass(frozen=True)
class ChainShape:
    """Per element: its position's mask, its members (alternatives, pattern order), its Kleene variable
    (-1 for none)."""

    masks: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]
    kleene: tuple[int, ...]


def chain_shape(plan: Plan, aut: Automaton, dropped: frozenset[str]) -> ChainShape | None:
    """The chain a skip-till-next-match pattern is, or None (see the module docstring); conditions on the
    attributes in ``dropped`` (the partition's) are made true by the caller's partition keys."""
    if plan.run_conditions:
        return None  # v[1], v[last] and aggregates decide what a run takes and what ends it: the kernels
    if plan.prevs and any(not _partition_prev(c, dropped) for c in plan.prevs):
        return None
    if plan.relations and any(not _partition_relation(c, dropped) for c in plan.relations):
        return None
    masks, members, kleene = [], [], []
    for groups in aut.element_groups:
        if len(groups) != 1:
            return None  # an event set: its members bind in any order
        group = groups[0]
        vs = [v for v in range(plan.nvars) if group >> v & 1]
        ks = [v for v in vs if aut.kleene[v]]
        if ks and len(vs) > 1:
            return None  # a Kleene alternative of an OR
        masks.append(group)
        members.append(tuple(vs))
        kleene.append(ks[0] if ks else -1)
    return ChainShape(tuple(masks), tuple(members), tuple(kleene))


# (relations and prev conditions compare two fields: a run operand makes a run condition, and a literal a
# property, or, for prev, an error)
def _partition_relation(c: Condition, dropped: frozenset[str]) -> bool:
    return (c.op == "=" and isinstance(c.left, Field) and isinstance(c.right, Field)
            and c.left.attr == c.right.attr and c.left.attr in dropped)


def _partition_prev(c: Condition, dropped: frozenset[str]) -> bool:
    return (c.op == "=" and isinstance(c.left, Field) and isinstance(c.right, Field)
            and c.left.attr == c.right.attr and c.left.attr in dropped)


def branches(shape: ChainShape, em: np.ndarray) -> bool:
    """Does some event fire both a Kleene loop and the next element (the automaton would branch)?"""
    for i, v in enumerate(shape.kleene[:-1]):
        if v >= 0 and bool(np.any((em & (1 << v)) != 0) and np.any(
                ((em & (1 << v)) != 0) & ((em & shape.masks[i + 1]) != 0))):
            return True
    return False


@dataclass
class Chains:
    """The windows that match: per match its start position, and per element the first event bound and the
    bounds of its Kleene run in that element's sorted array (``lo`` inclusive, ``hi`` exclusive)."""

    starts: np.ndarray
    first: list[np.ndarray]
    run_lo: list[np.ndarray | None]
    run_hi: list[np.ndarray | None]
    enc: list[np.ndarray]
    base: int

    @property
    def last(self) -> np.ndarray:
        """Per match, the position of its last event."""
        k = len(self.first) - 1
        hi = self.run_hi[k]
        if hi is None:
            return self.first[k]
        last: np.ndarray = self.enc[k][hi - 1] % self.base
        return last


def run_chains(shape: ChainShape, em: np.ndarray, keys: np.ndarray | None, ends: np.ndarray,
               starts: np.ndarray, ordered: bool = True, threads: int = 1) -> Chains:
    """The matches of the windows starting at ``starts`` (positions, stream order; each the first event
    of element 0).  ``em``: variable bits per event; ``keys``: partition per event (-1: none; None: one
    partition); ``ends``: per event, the last position of the window it starts.  The matches come in
    stream order of their starts, or (``ordered`` false: only counted) in any order.

    The starts are searched in key order, so that each bisection reads the sorted array in one sweep
    (with interleaved cases, a third of the time of searching in stream order at ten million events).
    Each start's chain is its own: with ``threads`` > 1 and enough starts, contiguous pieces of them follow
    their chains on their own threads (NumPy's sorts and searches release the GIL), as do the elements'
    sorts, and the pieces are joined in order."""
    n = len(em)
    base = n + 1
    k = len(shape.masks)
    key = np.zeros(n, dtype=_I64) if keys is None else keys

    def encoded(mask: int) -> np.ndarray:
        pos = np.flatnonzero((em & mask) != 0)
        if keys is None:
            return pos.astype(_I64)  # one partition: already sorted
        pos = pos[key[pos] >= 0]
        return sorted_ints(key[pos] * base + pos)

    many = threads > 1 and len(starts) >= MIN_PARALLEL_STARTS
    enc = each(encoded, list(shape.masks), threads if many else 1)
    if keys is not None:
        starts = starts[key[starts] >= 0]
    # every event of element 0 starts a window (the usual case): they are enc[0] already, in key order
    by_key = enc[0] if len(starts) == len(enc[0]) else sorted_ints(key[starts] * base + starts)
    starts = by_key % base
    moved = len(starts) > 1 and bool(np.any(starts[1:] < starts[:-1]))
    skey = by_key - starts
    window_end = ends[starts]
    parts = threads if many else 1
    found = each(lambda ab: _follow(enc, base, skey[ab[0]:ab[1]], starts[ab[0]:ab[1]], window_end[ab[0]:ab[1]]),
                 pieces(len(starts), parts), parts)
    skey, window_end = joined([p[0] for p in found]), joined([p[1] for p in found])
    first = [joined([p[2][i] for p in found]) for i in range(k)]
    if moved and ordered:  # back to stream order
        back = np.argsort(first[0])
        skey, window_end = skey[back], window_end[back]
        first = [f[back] for f in first]
    starts = first[0]
    run_lo: list[np.ndarray | None] = []
    run_hi: list[np.ndarray | None] = []
    for i in range(k):
        if shape.kleene[i] < 0:
            run_lo.append(None)
            run_hi.append(None)
            continue
        e = enc[i]
        lo = e.searchsorted(skey + first[i], "left")
        if i < k - 1:
            hi = e.searchsorted(skey + first[i + 1], "left")
        else:
            hi = e.searchsorted(skey + window_end, "right")
        run_lo.append(lo)
        run_hi.append(hi)
    return Chains(starts, first, run_lo, run_hi, enc, base)


def chain_rows(shape: ChainShape, chains: Chains, em: np.ndarray, take: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bindings of the matches ``take`` (indices into ``chains``) as (offsets, variable, position) rows,
    each match's rows in stream order; an OR position is bound under its first alternative the event
    satisfies."""
    k = len(shape.masks)
    lengths = []
    for i in range(k):
        lo, hi = chains.run_lo[i], chains.run_hi[i]
        if lo is None or hi is None:  # (both, or neither: element i is not a Kleene one)
            lengths.append(np.ones(len(take), dtype=_I64))
        else:
            lengths.append((hi[take] - lo[take]).astype(_I64))
    per_match = np.sum(lengths, axis=0) if k else np.zeros(len(take), dtype=_I64)
    off = np.zeros(len(take) + 1, dtype=_I64)
    off[1:] = np.cumsum(per_match)
    total = int(off[-1])
    var = np.empty(total, dtype=_I64)
    pos = np.empty(total, dtype=_I64)
    before = off[:-1].copy()
    for i in range(k):
        length = lengths[i]
        lo = chains.run_lo[i]
        if lo is None:
            at = chains.first[i][take]
            var[before] = _first_member(shape.members[i], em, at)
            pos[before] = at
        else:
            rows = run_positions(before, length)
            src = run_positions(lo[take], length)
            var[rows] = shape.kleene[i]
            pos[rows] = chains.enc[i][src] % chains.base
        before = before + length
    return off, var, pos


def _first_member(members: tuple[int, ...], em: np.ndarray, at: np.ndarray) -> np.ndarray:
    out = np.full(len(at), -1, dtype=_I64)
    bits = em[at]
    for v in members:
        out = np.where((out < 0) & ((bits & (1 << v)) != 0), v, out)
    return out


#: A chain search splits across threads only with at least this many starts (below, a thread costs more).
MIN_PARALLEL_STARTS = 100_000


def _follow(enc: list[np.ndarray], base: int, skey: np.ndarray, starts: np.ndarray, window_end: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The chains from ``starts`` (key ``skey`` · base, in key order): per element, bisect for the first
    event after the previous one in the same partition and within the window; the chains that find none
    are dropped.  Returns the surviving chains' keys, window ends and per element positions."""
    first = [starts]
    for i in range(1, len(enc)):
        e = enc[i]
        if not len(e):
            return skey[:0], window_end[:0], [f[:0] for f in first] + [skey[:0]] * (len(enc) - i)
        j = e.searchsorted(skey + first[i - 1], "right")
        hit = e[np.minimum(j, len(e) - 1)]
        # the chains still alive go on, the others are dropped now: each next search asks fewer
        idx = np.flatnonzero((j < len(e)) & (hit - skey < base) & (hit >= skey) & (hit - skey <= window_end))
        skey, window_end = skey[idx], window_end[idx]
        first = [f[idx] for f in first]
        first.append(hit[idx] - skey)
    return skey, window_end, first
