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
is a chain of "the next event of this position after that one, in the same partition", with no loop per window:

- with no Kleene element, one backward pass over the events per element notes each event's next event of the
  element in its partition, and every chain steps along it (:func:`_passes`: compiled, linear, no sort);
- with a Kleene element, whose run needs its bounds among its variable's events, bisections in per-position
  sorted arrays (positions encoded as ``key · B + position``, one array serving every partition;
  :func:`_bisected`).

An event satisfying several alternatives of an OR binds the first of them, as one match (docs/contract.md §2).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from exact.arrays import joined, run_positions, sorted_ints
from exact.engine.automaton import Automaton
from exact.engine.parallel import each, pieces, searched
from exact.query.ast import Condition, Field
from exact.query.normalize import Plan

_I64 = np.int64


@dataclass(frozen=True)
class ChainShape:
    """Per element: its position's mask, its members (alternatives, pattern order), its Kleene variable
    (-1 for none), and its class: elements of one class can bind the same events (their members have the
    same types and properties), so one pass over the events serves them all."""

    masks: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]
    kleene: tuple[int, ...]
    classes: tuple[int, ...]


def chain_shape(plan: Plan, aut: Automaton, dropped: frozenset[str]) -> ChainShape | None:
    """The chain a skip-till-next-match pattern is, or None (see the module docstring); conditions on the
    attributes in ``dropped`` (the partition's) are made true by the caller's partition keys."""
    if plan.run_conditions:
        return None  # v[1], v[last] and aggregates decide what a run takes and what ends it: the kernels
    if plan.prevs and any(not _partition_prev(c, dropped) for c in plan.prevs):
        return None
    if plan.relations and any(not _partition_relation(c, dropped) for c in plan.relations):
        return None
    masks, members, kleene, classes = [], [], [], []
    seen: dict[object, int] = {}
    by_bit = {v.index: v for v in plan.positives}
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
        events = frozenset((by_bit[v].types, _unnamed(by_bit[v].properties)) for v in vs)
        classes.append(seen.setdefault(events, len(seen)))
    return ChainShape(tuple(masks), tuple(members), tuple(kleene), tuple(classes))


def _unnamed(properties: tuple[Condition, ...]) -> frozenset[Condition]:
    """A variable's properties with its name left out: two variables whose properties are equal so bind the
    same events (a partition's adds ``v.key = v.key`` to each)."""
    return frozenset(c.unnamed() for c in properties)


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


@dataclass(frozen=True)
class Reach:
    """How far a window reaches from its first event: to the last event whose ``ruler`` value (ts or seq,
    ascending in stream order) is at most ``width`` past the first event's; to the last event when ``ruler``
    is None (no window)."""

    ruler: np.ndarray | None
    width: int

    def last(self, starts: np.ndarray, n: int, threads: int) -> np.ndarray:
        """Per start (positions, ascending), the position of its window's last event among ``n`` events."""
        if self.ruler is None:
            return np.full(len(starts), n - 1, dtype=_I64)
        out: np.ndarray = searched(self.ruler, self.ruler[starts] + self.width, "right", threads) - 1
        return out


def run_chains(shape: ChainShape, em: np.ndarray, keys: np.ndarray | None, reach: Reach,
               starts: np.ndarray, ordered: bool = True, threads: int = 1) -> Chains:
    """The matches of the windows starting at ``starts`` (positions, stream order; each an event of
    element 0).  ``em``: variable bits per event; ``keys``: partition per event (-1: none; None: one
    partition); ``reach``: the window.  The matches come in stream order of their starts, or (``ordered``
    false: only counted) in any order.  By :func:`_passes` when no element is a Kleene one, else by
    :func:`_bisected`."""
    if all(v < 0 for v in shape.kleene):
        return _passes(shape, em, keys, reach, starts)
    ends = np.zeros(len(em), dtype=_I64)
    ends[starts] = reach.last(starts, len(em), threads)
    return _bisected(shape, em, keys, ends, starts, ordered, threads)


def _passes(shape: ChainShape, em: np.ndarray, keys: np.ndarray | None, reach: Reach, starts: np.ndarray
            ) -> Chains:
    """The chains of a SEQ of plain positions in one backward pass over the events per element after the
    first: the pass notes, for every event, the next event of element ``i`` in its partition (the events'
    keys index a table of the latest seen per partition), and every chain still alive steps from its event of
    element ``i - 1`` to that one, or ends when there is none or it lies past the window.  Linear in the
    events and the starts; no sort, and the matches come in the order of ``starts``.  One thread: split by
    ranges of keys, each thread still stepped over every event, and on interleaved partitions two were slower
    than one."""
    n = len(em)
    if keys is None:
        key = np.zeros(n, dtype=_I64)
        slots = 1
    else:
        key, slots = _dense_keys(keys)
    k = len(shape.masks)
    first = np.empty((k, len(starts)), dtype=_I64)
    alive = np.empty(len(starts), dtype=np.bool_)
    classes = np.asarray(shape.classes, dtype=_I64)
    # one row of ``after`` per class of the elements after the first, as many as fit in _AFTER_ENTRIES
    # (a class whose row was taken by another is passed again)
    wanted = len(set(shape.classes[1:])) or 1
    after = np.empty((max(1, min(wanted, _AFTER_ENTRIES // max(n, 1))), n), dtype=np.int32 if n < 2**31 else _I64)
    ruler = np.zeros(1, dtype=_I64) if reach.ruler is None else np.ascontiguousarray(reach.ruler, dtype=_I64)
    m = _passes_compiled()(np.ascontiguousarray(em, dtype=_I64), key, np.asarray(shape.masks, dtype=_I64),
                           classes, np.ascontiguousarray(starts, dtype=_I64), ruler, reach.ruler is not None,
                           reach.width, after, first, alive, slots)
    rows = [first[i, :m] for i in range(k)]
    return Chains(rows[0], rows, [None] * k, [None] * k, [], n + 1)


def _dense_keys(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """``keys`` as codes ``0 … slots - 1`` (-1 kept: in no partition) and ``slots``; as they are when they
    already lie within a few times the events' number, else renumbered."""
    top = int(keys.max(initial=-1))
    if top < 4 * len(keys) + 1024:
        return np.ascontiguousarray(keys, dtype=_I64), top + 1
    inside = keys >= 0
    values, inverse = np.unique(keys[inside], return_inverse=True)
    out = np.full(len(keys), -1, dtype=_I64)
    out[inside] = inverse
    return out, len(values)


#: the entries of the scratch table of next events (one row per class of elements) a chain pass may take
_AFTER_ENTRIES = 1 << 24


@functools.cache
def _passes_compiled() -> Callable[..., int]:
    """:func:`_chain_passes` compiled (cached on disk) on first use."""
    import numba

    compiled: Callable[..., int] = numba.njit(cache=True, nogil=True)(_chain_passes)
    return compiled


def _chain_passes(em: Any, key: Any, masks: Any, classes: Any, starts: Any, ruler: Any, bounded: bool, width: int,
                  after: Any, first: Any, alive: Any, slots: int) -> int:
    """Fills ``first[i, c]`` with the event of element ``i`` chain ``c`` binds, and returns how many chains
    matched: theirs are moved to the first columns, in order (a boolean index with a random mask would cost
    several times more).  ``alive`` and ``after`` are scratch, one entry per start and per event and row of
    ``after``; the row of element ``i`` is its class modulo the rows, passed again only when another class
    has taken it since (a pattern that names one activity five times passes the events once for them)."""
    n = len(em)
    m = len(starts)
    for c in range(m):
        s = starts[c]
        first[0, c] = s
        alive[c] = key[s] >= 0
    latest = np.empty(max(slots, 1), dtype=after.dtype)
    held = np.full(after.shape[0], -1, dtype=np.int64)  # the class whose pass each row of ``after`` holds
    for i in range(1, len(masks)):
        row = classes[i] % after.shape[0]
        here = after[row]
        if held[row] != classes[i]:
            held[row] = classes[i]
            mask = masks[i]
            latest[:] = -1
            for p in range(n - 1, -1, -1):
                kk = key[p]
                if kk < 0:
                    here[p] = -1
                    continue
                here[p] = latest[kk]
                if em[p] & mask:
                    latest[kk] = p
        for c in range(m):
            if alive[c]:
                q = here[first[i - 1, c]]
                if q < 0 or (bounded and ruler[q] - ruler[starts[c]] > width):
                    alive[c] = False
                else:
                    first[i, c] = q
    j = 0
    for c in range(m):
        if alive[c]:
            for i in range(len(masks)):
                first[i, j] = first[i, c]
            j += 1
    return j


def _bisected(shape: ChainShape, em: np.ndarray, keys: np.ndarray | None, ends: np.ndarray,
              starts: np.ndarray, ordered: bool = True, threads: int = 1) -> Chains:
    """:func:`run_chains` by bisections (``ends``: per start, the last position of its window).

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
