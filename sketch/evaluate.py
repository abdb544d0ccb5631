"""Approximate evaluation of a query on the Bloom-filter tree: candidate intervals (Baltus 2021, §4.2–4.3).

The tree knows, per node, only which event *types* may occur in the node's interval ("maybe" or "no";
Bloom filters have no false negatives).  Conditions cannot be checked on it; they only make exact matches
fewer, so the approximate evaluator reasons about type occurrence alone and is a *necessary* condition for
every exact match — the guarantee that verification builds on (CONTRACT §3, guarantee 2).

**Units.**  At granularity ``g`` (a tree level; 0 = leaves, the default) the stream is cut into *units*: the
top-level nodes (§4.3), each opened down to level ``g`` (a top-level node already at or below ``g`` is one
unit).  Units are consecutive seq intervals in stream order; everything below holds for any such cut, so the
granularity only changes how fine the answer is (§4.3.2: "the desired level … can be adjusted on a
per-query basis").

**Occurrence, top-down (§4.3).**  For each position of the pattern (a variable, or an OR of alternatives) the
units that may hold one of its types are found by probing the top-level nodes first and descending only into
nodes that answered "maybe" (``nodes_probed`` counts the probes).  ``ANY`` occurs everywhere.  A position
absent from every top-level node answers ``exists: false`` at once.  ``BETWEEN`` keeps only nodes whose ts
interval meets it (§4.3.4, windowing via a node cover).  All positions descend in one level-by-level walk
(each level probes the union of live nodes with every key once); a level that prunes little hands over to
the units below its survivors directly, since a dense type would survive every level in between.  When
the units' and top-level filters fit a bit-sliced copy (the usual case), the walk is exactly that jump:
each key is probed over all of them at once, and the units that may hold it are remembered as a sorted
list, so a query's occurrences, chains and windows work on short lists of units.  With a
window and the stream's type counts, the rarest position is walked first and the others only within one
window of its units (the lazy, rarest-first order of Kolchinsky & Schuster, applied to the tree).  Which
intermediate levels a walk probes can change which Bloom false hits survive, never a true occurrence.

**Chains (§4.3.1–4.3.3, generalised).**  A match's elements occupy a non-decreasing sequence of units: every
event of element ``i`` precedes every event of element ``i+1``, so element ``i+1`` lies in units at or after
the unit of element ``i``'s last event; several elements may share one unit (the thesis' relaxed policies lose
exactly these matches — here they are kept), and an event set's members may be in any order.  For a match
whose first event is in unit ``s``, define ``e_0 = max_p next_p(s)`` over the positions ``p`` of element 0 and
``e_i = max_p next_p(e_{i-1})``, ``next_p(x)`` being the first unit ``≥ x`` where ``p`` may occur.  By
induction the unit of element ``i``'s last event is ``≥ e_i``: the greedy earliest chain is a necessary
condition, and it covers the thesis' three strategies at once (strict contiguity is tightened below;
skip-till-any needs no backtracking, because the earliest chain dominates every other; conjunction needs no
permutations, because an event set's members are placed independently).  Negation never prunes (§4.3.4 walks
down to check it; a Bloom filter cannot prove absence of *matching* events, and the NOT's conditions are not
visible on the tree).

**Windows.**  ``WITHIN d``: a match starting in ``s`` and ending in ``t`` has ``t.lo_ts − s.hi_ts ≤ d``;
``WITHIN n EVENTS``: ``t.lo_seq − s.hi_seq < n``.  Both bound the chain's last unit and the reach below.

**Reach.**  The end of an exact match is not bounded by the greedy chain (a Bloom false positive or a WHERE
condition can push the real binding later), so the candidate interval of start unit ``s`` reaches to the
last unit ``R(s)`` where the last element may occur within the window (without a window: in the rest of the
stream).  Under strict contiguity (and partition contiguity without ``PARTITION BY``, which is the same) every
event between a match's first and last is bound, so every unit between ``s`` and the end unit holds a pattern
type: the reach stops at the end of the run of such units, and without Kleene variables a match has exactly
one event per position, so it ends within ``positions − 1`` events of ``s``.

The result, :class:`Approximation`, lists the possible start units with their reach (the candidate
intervals), the units verification must read, and an ``explain`` text when nothing can match.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Protocol

import numpy as np

from exact.ast import (
    Between,
    Query,
    Strategy,
    WithinEvents,
    WithinTime,
)
from exact.engine import iso_ts
from exact.normalize import Plan, normalize
from exact.runs import run_positions

_I64 = np.int64
_EMPTY = np.zeros(0, dtype=_I64)
_EMPTY.flags.writeable = False
_ZERO = np.zeros(1, dtype=_I64)
_ZERO.flags.writeable = False
#: Descent shortcut: once a level of at least this many probed nodes keeps this share of them, the walk
#: probes the units below the survivors directly (a dense type would survive every level in between).
_JUMP_MIN_NODES = 16
_JUMP_ALIVE = 0.75
#: ... and once the units below the survivors number at most this many per level left to descend.
_JUMP_UNITS_PER_LEVEL = 2048
#: Bytes of remembered probe answers per :class:`TreeIndex` (two flags per node and key).
_MEMO_BYTES = 64 << 20


# ---------------------------------------------------------------------------------------------- units


@dataclass(frozen=True, eq=False)
class Units:
    """The stream cut into consecutive tree nodes at one granularity (see the module docstring).

    Column arrays, one entry per unit in stream order: node id, level, seq and ts interval.
    """

    nodes: np.ndarray
    level: np.ndarray
    lo_seq: np.ndarray
    hi_seq: np.ndarray
    lo_ts: np.ndarray
    hi_ts: np.ndarray
    granularity: int

    def __len__(self) -> int:
        return len(self.nodes)

    def index_of_seq(self, seqs: np.ndarray) -> np.ndarray:
        """The unit holding each seq (seqs must lie in the indexed stream)."""
        return np.searchsorted(self.lo_seq, seqs, "right") - 1

    def between_range(self, between: Between | None) -> tuple[int, int]:
        """The units whose ts interval meets ``BETWEEN``: a run ``[lo, hi)`` (units follow the stream's ts
        order, so their first and last ts never decrease)."""
        if between is None:
            return 0, len(self)
        lo = int(np.searchsorted(self.hi_ts, between.start, "left"))
        return lo, max(lo, int(np.searchsorted(self.lo_ts, between.end, "right")))


def units_at(tree, granularity: int = 0) -> Units:
    """The units of ``tree`` at level ``granularity`` (0 = leaves): every top-level node opened down to it."""
    if granularity < 0:
        raise ValueError(f"granularity must be a tree level ≥ 0, got {granularity}")
    cols = tree.intervals()
    level, children = cols["level"], cols["children"]
    frontier = np.asarray(tree.top_nodes(), dtype=_I64)
    done: list[np.ndarray] = []
    while frontier.size:
        deep = level[frontier] > granularity
        done.append(frontier[~deep])
        kids = children[frontier[deep]].ravel()
        frontier = kids[kids >= 0]
    nodes = np.concatenate(done) if done else np.zeros(0, dtype=_I64)
    nodes = nodes[np.argsort(cols["lo_seq"][nodes], kind="stable")]
    return Units(nodes=nodes, level=level[nodes].astype(_I64), lo_seq=cols["lo_seq"][nodes],
                 hi_seq=cols["hi_seq"][nodes], lo_ts=cols["lo_ts"][nodes], hi_ts=cols["hi_ts"][nodes],
                 granularity=granularity)


#: Runs of units: ``(first, last)`` arrays, each run ``[first, last)``; sorted, disjoint, none empty.
Runs = tuple[np.ndarray, np.ndarray]


def _clip_runs(runs: Runs | None, lo: int, hi: int) -> Runs:
    """``runs`` (all units when None) within ``[lo, hi)``."""
    if runs is None:
        return np.asarray([lo], dtype=_I64), np.asarray([hi], dtype=_I64)
    first, last = np.maximum(runs[0], lo), np.minimum(runs[1], hi)
    keep = first < last
    return first[keep], last[keep]


def _in_runs(units: np.ndarray, runs: Runs) -> np.ndarray:
    """``units`` (sorted indices) that lie in ``runs``."""
    first, last = runs
    if not len(first):
        return units[:0]
    if len(first) == 1:
        a, b = np.searchsorted(units, (int(first[0]), int(last[0])))
        return units[a:b]
    k = np.searchsorted(first, units, "right") - 1
    return units[(k >= 0) & (units < last[np.maximum(k, 0)])]


def _runs_before(x: np.ndarray, runs: Runs) -> np.ndarray:
    """Per ``x``, how many units of ``runs`` lie below it."""
    first, last = runs
    sizes = last - first
    before = np.concatenate(([0], np.cumsum(sizes)))
    k = np.searchsorted(first, x, "left")  # runs starting below x
    j = np.maximum(k - 1, 0)
    return np.where(k > 0, before[j] + np.minimum(x - first[j], sizes[j]), 0) if len(first) else 0 * x


def _union(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The sorted union of sorted index arrays."""
    if len(arrays) == 1:
        return arrays[0]
    return np.unique(np.concatenate(arrays))


class TypeIndex(Protocol):
    """Where event types may occur, per unit: the Bloom tree, or a perfect index for measuring accuracy."""

    units: Units

    def occurrence(self, types: frozenset[str], between: Between | None) -> np.ndarray:
        """The units (sorted indices) where an event of one of ``types`` may occur (within ``between``)."""
        ...

    def occurrences(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
                    required: int | None = None, allowed: Runs | None = None) -> list[np.ndarray]:
        """:meth:`occurrence` of each of ``type_sets``; once one of the first ``required`` sets (default
        all) occurs nowhere, the others' answers may be left incomplete; only units in ``allowed`` (default
        all) are answered."""
        ...

    def probes(self) -> int: ...

    def top_level_false_positive_rate(self, keys: int, between: Between | None) -> float: ...


class TreeIndex:
    """Occurrence from the Bloom tree, found top-down (Baltus §4.3): probe the top-level nodes, descend
    only into nodes that may contain a key, stop at the units' level."""

    def __init__(self, tree, granularity: int = 0) -> None:
        self.tree = tree
        self.units = units_at(tree, granularity)
        cols = tree.intervals()
        self._level, self._children = cols["level"], cols["children"]
        self._lo_ts, self._hi_ts = cols["lo_ts"], cols["hi_ts"]
        self._top = np.asarray(tree.top_nodes(), dtype=_I64)
        self._granularity = granularity
        self._top_fp: np.ndarray | None = None
        self._rows = len(self._level)
        # Probe answers by key (LRU, bounded in bytes), shared by the queries of every thread; the walk
        # state of a query (probes counted, early stop) is per thread.
        self._memo: OrderedDict[str, tuple[np.ndarray, ...]] = OrderedDict()
        self._memo_bytes = 0  # of the sliced answers' unit lists and flags (see _key_hits)
        self._memo_keys = max(16, _MEMO_BYTES // max(2 * self._rows, 1))
        self._lock = threading.Lock()
        self._local = threading.local()
        # per node, the units it spans: [first, last) (a node at or above the units' level spans a run)
        self._first_unit = np.searchsorted(self.units.lo_seq, cols["lo_seq"], "left")
        self._last_unit = np.searchsorted(self.units.lo_seq, cols["hi_seq"], "right")
        # The filters of the units and of the top level (where every walk starts) bit-sliced, so a key is
        # probed over all of them in a few passes (None when that copy would be too large; they are then
        # probed like any node).  Per node, its column in that copy, or -1.
        top_only = self._top[self._level[self._top] > granularity]
        sliced_nodes = np.concatenate((self.units.nodes.astype(_I64), top_only))
        self._sliced = tree.sliced(sliced_nodes)
        self._sliced_col = np.full(self._rows, -1, dtype=_I64)
        if self._sliced is not None:
            self._sliced_col[sliced_nodes] = np.arange(len(sliced_nodes), dtype=_I64)
            # per top-level node, its column; per unit, the top-level node above it (or equal to it), as an
            # index into the top level
            self._top_col = self._sliced_col[self._top]
            top_first, top_last = self._first_unit[self._top], self._last_unit[self._top]
            self._unit_top = np.zeros(len(self.units), dtype=_I64)
            self._unit_top[_expand(top_first, top_last)] = np.repeat(
                np.arange(len(self._top), dtype=_I64), top_last - top_first)
            self._top_deep = self._level[self._top] > granularity
            self._top_first, self._top_last = top_first, top_last
            self._top_bounds = np.concatenate((top_first, top_last))

    @classmethod
    def shared(cls, tree, granularity: int = 0) -> TreeIndex:
        """The index of ``tree`` at ``granularity`` kept with the tree, so the queries a service answers on
        one index version share its units and probe answers (dropped with the tree, or when it changes)."""
        return tree.cached(("tree-index", granularity), lambda: cls(tree, granularity))

    @classmethod
    def prepare(cls, tree) -> TreeIndex:
        """:meth:`shared` at the leaves, made now: what every query of an index version needs first (its
        units, which units each node spans, the top-level filters' densities) is computed once when the
        version is loaded instead of by its first query."""
        index = cls.shared(tree, 0)
        index.top_level_false_positive_rate(1, None)
        return index

    def forget_probes(self) -> None:
        """Forget the probe answers remembered so far (as right after :meth:`prepare`)."""
        with self._lock:
            self._memo.clear()
            self._memo_bytes = 0

    def probes(self) -> int:
        """Nodes probed by this thread's walks so far."""
        return getattr(self._local, "probes", 0)

    @property
    def cut_short(self) -> bool:
        """Whether this thread's last :meth:`occurrences` walk stopped early (the non-empty answers are
        then partial)."""
        return getattr(self._local, "cut_short", False)

    @property
    def absent(self) -> list[int]:
        """The sets this thread's last walk found to occur nowhere."""
        return getattr(self._local, "absent", [])

    def _probe(self, nodes: np.ndarray, keys: list[str]) -> np.ndarray:
        """:meth:`BloomTree.probe`, remembering answers: the tree of one index version never changes, so a
        (node, key) pair is probed once per :class:`TreeIndex` however many queries ask for it."""
        with self._lock:
            memos = []
            for key in keys:
                memo = self._memo.get(key)
                if memo is None:
                    memo = self._memo[key] = (np.zeros(self._rows, dtype=bool),
                                              np.zeros(self._rows, dtype=bool))
                    while len(self._memo) > self._memo_keys:
                        self._memo.popitem(last=False)
                else:
                    self._memo.move_to_end(key)
                memos.append(memo)
            unknown = np.zeros(len(nodes), dtype=bool)
            for known, _ in memos:
                unknown |= ~known[nodes]
            todo = nodes[unknown]
            if todo.size:
                fresh = self._probe_fresh(todo, keys)
                for j, (known, hit) in enumerate(memos):
                    hit[todo] = fresh[:, j]
                    known[todo] = True
            return np.stack([hit[nodes] for _, hit in memos], axis=1)

    def _probe_fresh(self, nodes: np.ndarray, keys: list[str]) -> np.ndarray:
        """:meth:`BloomTree.probe`, the units and top-level nodes among ``nodes`` answered from their sliced
        filters."""
        if self._sliced is None:
            return self.tree.probe(nodes, keys)
        col = self._sliced_col[nodes]
        have = col >= 0
        if have.all():
            return self._sliced.probe(keys)[col]
        if not have.any():
            return self.tree.probe(nodes, keys)
        out = np.empty((len(nodes), len(keys)), dtype=bool)
        out[have] = self._sliced.probe(keys)[col[have]]
        out[~have] = self.tree.probe(nodes[~have], keys)
        return out

    def _within(self, nodes: np.ndarray, between: Between | None) -> np.ndarray:
        if between is None:
            return nodes
        keep = (self._hi_ts[nodes] >= between.start) & (self._lo_ts[nodes] <= between.end)
        return nodes[keep]

    def occurrence(self, types: frozenset[str], between: Between | None) -> np.ndarray:
        return self.occurrences([types], between)[0]

    def occurrences(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
                    required: int | None = None, allowed: Runs | None = None) -> list[np.ndarray]:
        """:meth:`occurrence` of several type sets: from the sliced filters when the index has them
        (:meth:`_from_sliced`), else in one level-by-level walk (:meth:`_walk`)."""
        if self._sliced is not None:
            return self._from_sliced(type_sets, between, required, allowed)
        mask = None
        if allowed is not None:
            mask = np.zeros(len(self.units), dtype=bool)
            mask[_expand(*allowed)] = True
        return [np.flatnonzero(found) for found in
                self._walk(type_sets, between, required=required, allowed=mask)]

    def _key_hits(self, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For ``key``: per top-level node, may it hold the key; the units whose own filter says it may
        (sorted indices); and the same as a flag per unit.  One sliced probe per key and
        :class:`TreeIndex`, remembered (LRU, bounded in keys and bytes like :meth:`_probe`'s answers)."""
        with self._lock:
            known = self._memo.get(key)
            if known is not None:
                self._memo.move_to_end(key)
                return known
        hit = self._sliced.probe([key])[:, 0]  # type: ignore[union-attr]
        U = len(self.units)
        flags = hit[:U].copy()
        known = (hit[self._top_col], flags.nonzero()[0], flags)
        with self._lock:
            self._memo[key] = known
            self._memo_bytes += known[1].nbytes + flags.nbytes
            while len(self._memo) > 1 and (len(self._memo) > self._memo_keys
                                           or self._memo_bytes > _MEMO_BYTES):
                gone = self._memo.popitem(last=False)[1]
                self._memo_bytes -= gone[1].nbytes + gone[2].nbytes
        return known

    def _from_sliced(self, type_sets: Sequence[frozenset[str]], between: Between | None,
                     required: int | None, allowed: Runs | None) -> list[np.ndarray]:
        """:meth:`_walk`'s answers when every unit's and every top-level node's filter is sliced: the walk
        would probe the top level, then jump to the units below the survivors (:meth:`_jump`), so a set
        occurs in a unit where its top-level node's filter and its own say "maybe" (each for one of the
        set's keys).  Each key costs one sliced probe per index, remembered as the top-level answers and
        the list of units that say "maybe"; a query then works on those short lists instead of a flag
        per unit.  ``nodes_probed`` counts what the walk probes: the top-level nodes over units the
        query may use, and the units below the ones some set survives in."""
        P = len(type_sets)
        need = P if required is None else required
        out = [_EMPTY] * P
        local = self._local
        local.cut_short = False
        local.absent = []
        if not any(type_sets):
            return out
        hits = {key: self._key_hits(key) for key in set().union(*type_sets)}
        U = len(self.units)
        lo, hi = self.units.between_range(between)
        top_first, top_last = self._top_first, self._top_last
        # per top-level node, the usable units under it (BETWEEN, and the allowed runs); a node is probed
        # when it holds one
        if allowed is None:
            ok = None
            in_top = np.maximum(np.minimum(top_last, hi) - np.maximum(top_first, lo), 0)
        else:
            ok = allowed if lo == 0 and hi == U else _clip_runs(allowed, lo, hi)
            before = _runs_before(self._top_bounds, ok)
            in_top = before[len(top_first):] - before[:len(top_first)]
        top_ok = in_top > 0
        probed = int(top_ok.sum())
        no_top = np.zeros(len(top_ok), dtype=bool)
        top_alive = []  # per set, the probed top-level nodes that may hold one of its types
        top_any = []  # ... and all the top-level nodes that may (the units are cut to the usable ones)
        for types in type_sets:
            if not types:
                top_alive.append(no_top)
                top_any.append(no_top)
                continue
            alive = hits[next(iter(types))][0] if len(types) == 1 else np.logical_or.reduce(
                [hits[key][0] for key in types])
            top_alive.append(alive & top_ok)
            top_any.append(alive)
        absent = [p for p in range(need) if not top_alive[p].any()]
        if not absent:
            # the units under the top-level nodes some set survives in (not those that are units themselves)
            under = (top_alive[0] if P == 1 else np.logical_or.reduce(top_alive)) & self._top_deep
            probed += int(in_top[under].sum())
            # the usable units listed, when some set's units are more (a neighbourhood of a rare type)
            ok_units = None
            longest = max(len(h[1]) for h in hits.values())
            if ok is not None and len(ok[0]) > 1 and int(in_top.sum()) <= longest:
                ok_units = _expand(*ok)
            done: dict[frozenset[str], np.ndarray] = {}  # a pattern may repeat a type
            for p, types in enumerate(type_sets):
                if types and top_alive[p].any():
                    if types not in done:
                        if ok_units is not None:
                            # the usable units listed are fewer: look each up in the keys' flags
                            keys = sorted(types)
                            flags = hits[keys[0]][2][ok_units]
                            for key in keys[1:]:
                                flags |= hits[key][2][ok_units]
                            units = ok_units[flags]
                        else:
                            units = _union([hits[key][1] for key in sorted(types)])
                            if ok is not None or lo > 0 or hi < U:
                                units = _in_runs(units, ok if ok is not None else _clip_runs(None, lo, hi))
                        alive = top_any[p]
                        if not alive.all():
                            units = units[alive[self._unit_top[units]]]
                        done[types] = units
                    out[p] = done[types]
            absent = [p for p in range(need) if not len(out[p])]
        local.probes = getattr(local, "probes", 0) + probed
        if absent:
            local.cut_short = True
            local.absent = absent
        return out

    def _walk(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
              required: int | None = None, allowed: np.ndarray | None = None) -> list[np.ndarray]:
        """:meth:`occurrence` of several type sets (per unit, a mask) in one level-by-level walk.

        All sets descend together: each level probes the union of the nodes some set is still alive in
        with every key once, and a set stays alive in a child only if the parent may hold one of its types.
        The walk stops early once one of the first ``required`` sets (default: all) has died everywhere —
        the query cannot match, and the other sets' answers are then incomplete.  ``allowed`` (per unit)
        limits the walk to nodes over at least one allowed unit; the answer is then False elsewhere.
        """
        P = len(type_sets)
        need = P if required is None else required
        out = [np.zeros(len(self.units), dtype=bool) for _ in range(P)]
        keys = sorted(set().union(*type_sets)) if P else []
        if not keys:
            return out
        column = {key: j for j, key in enumerate(keys)}
        member = np.zeros((len(keys), P), dtype=np.int32)
        for p, types in enumerate(type_sets):
            for key in types:
                member[column[key], p] = 1
        csum = None if allowed is None else np.concatenate(([0], np.cumsum(allowed, dtype=_I64)))
        frontier = self._over(self._within(self._top, between), csum)
        alive = np.ones((len(frontier), P), dtype=bool)
        local = self._local
        local.cut_short = False
        local.absent = []
        alive[:, [p for p, types in enumerate(type_sets) if not types]] = False
        while frontier.size:
            probed = int(frontier.size)
            local.probes = getattr(local, "probes", 0) + probed
            hit = self._probe(frontier, keys).astype(np.int32) @ member > 0
            alive &= hit
            rows = alive.any(axis=1)
            frontier, alive = frontier[rows], alive[rows]
            deep = self._level[frontier] > self._granularity
            done = ~deep
            if done.any():
                at = self._first_unit[frontier[done]]
                for p in range(P):
                    out[p][at[alive[done, p]]] = True
            dead = np.flatnonzero(~alive[:, :need].any(axis=0))
            absent = [p for p in dead.tolist() if not out[p].any()]
            if absent:
                # a set occurs nowhere (dead below every node, found in no unit): nothing can match
                local.cut_short = True
                local.absent = absent
                break
            if self._jump(frontier[deep], probed, len(frontier), csum):
                frontier, alive = self._units_below(frontier[deep], alive[deep])
            else:
                kids = self._children[frontier[deep]]
                kid_alive = np.repeat(alive[deep], kids.shape[1], axis=0)
                kids = kids.ravel()
                ok = kids >= 0
                frontier, alive = kids[ok], kid_alive[ok]
            if between is not None and frontier.size:
                keep = (self._hi_ts[frontier] >= between.start) & (self._lo_ts[frontier] <= between.end)
                frontier, alive = frontier[keep], alive[keep]
            if csum is not None and frontier.size:
                keep = self._meets(frontier, csum)
                frontier, alive = frontier[keep], alive[keep]
        return out

    def _jump(self, nodes: np.ndarray, probed: int, survived: int, csum: np.ndarray | None) -> bool:
        """Whether to probe the units under ``nodes`` (the survivors still above the units' level) directly
        instead of descending level by level: when little was pruned at this level (a dense type would
        survive every level in between), or when those units are few enough that probing them costs less
        than the steps of the levels left (each level's step has a fixed cost of many units' probes).

        The skipped levels' filters no longer prune: a unit whose own filter (folded smaller than an
        ancestor's) errs may now be a candidate where the walk would have cut it.  Nothing is lost (no filter
        has false negatives) and each filter's false-positive rate is bounded on its own (stored at most half
        full, ``2^−k``), so the answer stays within the configured accuracy."""
        if not nodes.size:
            return False
        if self._sliced is not None:
            return True  # the units' sliced filters answer all of them in a few passes
        if probed >= _JUMP_MIN_NODES and survived >= _JUMP_ALIVE * probed:
            return True
        first, last = self._first_unit[nodes], self._last_unit[nodes]
        below = int((last - first).sum() if csum is None else (csum[last] - csum[first]).sum())
        return below <= _JUMP_UNITS_PER_LEVEL * (int(self._level[nodes].max()) - self._granularity)

    def _meets(self, nodes: np.ndarray, csum: np.ndarray) -> np.ndarray:
        """Per node: does it cover an allowed unit (``csum``: prefix sums of the allowed mask)?"""
        return csum[self._last_unit[nodes]] > csum[self._first_unit[nodes]]

    def _over(self, nodes: np.ndarray, csum: np.ndarray | None) -> np.ndarray:
        return nodes if csum is None or not nodes.size else nodes[self._meets(nodes, csum)]

    def _units_below(self, nodes: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The units inside each of ``nodes`` (a contiguous run of units each), with the node's row of
        ``alive`` repeated for each."""
        first, last = self._first_unit[nodes], self._last_unit[nodes]
        return self.units.nodes[_expand(first, last)], np.repeat(alive, last - first, axis=0)

    def top_level_false_positive_rate(self, keys: int, between: Between | None) -> float:
        """Eq. 4.3 with the query's own probes of the top level: ``1 − Π (1 − ρ_i^k)`` over every
        (top-level node, key) pair probed, ``ρ_i`` the node's measured density (eq. 4.1)."""
        if self._top_fp is None:
            # only the top-level nodes' own bits are counted (the whole tree's would cost a pass over it)
            dens = np.asarray([self.tree.filter(int(node)).density() for node in self._top], dtype=float)
            self._top_fp = np.minimum(dens ** self.tree.config.k, 1 - 1e-16)
        keep = np.ones(len(self._top), dtype=bool)
        if between is not None:
            keep = (self._hi_ts[self._top] >= between.start) & (self._lo_ts[self._top] <= between.end)
        return float(-np.expm1(keys * np.log1p(-self._top_fp[keep]).sum()))


class PerfectIndex:
    """A false-positive-free index over the same units, from the true types of every unit's events.

    It answers exactly what the tree would answer if its Bloom filters never erred; running the same
    evaluation on it defines the false positives of the tree's answers (see :func:`false_positives`).
    """

    def __init__(self, units: Units, seq: np.ndarray, types) -> None:
        """``seq`` and ``types`` of every event (types as a list, numpy or Arrow array of strings)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self.units = units
        U = max(len(units), 1)
        unit_of = units.index_of_seq(np.asarray(seq, dtype=_I64))
        if isinstance(types, pa.ChunkedArray):
            types = types.combine_chunks()
        elif not isinstance(types, pa.Array):
            types = pa.array(list(types), pa.string())
        encoded = pc.dictionary_encode(types)
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=_I64)
        pairs = np.unique(codes * U + unit_of)
        code_of, unit = pairs // U, pairs % U
        cuts = np.flatnonzero(np.diff(code_of)) + 1
        vocabulary = encoded.dictionary.to_pylist()
        self._where: dict[str, np.ndarray] = {
            vocabulary[int(chunk_codes[0])]: chunk_units
            for chunk_codes, chunk_units in zip(np.split(code_of, cuts), np.split(unit, cuts), strict=True)
            if len(chunk_codes)}

    def probes(self) -> int:
        return 0

    def occurrences(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
                    required: int | None = None, allowed: Runs | None = None) -> list[np.ndarray]:
        ok = _clip_runs(allowed, *self.units.between_range(between))
        return [_in_runs(self._units_of(types), ok) for types in type_sets]

    def occurrence(self, types: frozenset[str], between: Between | None) -> np.ndarray:
        return self.occurrences([types], between)[0]

    def _units_of(self, types: frozenset[str]) -> np.ndarray:
        found = [self._where[t] for t in types if t in self._where]
        return _union(found) if found else np.zeros(0, dtype=_I64)

    def top_level_false_positive_rate(self, keys: int, between: Between | None) -> float:
        return 0.0


# ---------------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Region:
    """Where verification looks: matches starting in ``[start_lo, start_hi]`` (seqs) are reported; events
    up to ``read_end`` are read (of the units listed in ``units``, a sorted index array)."""

    start_lo: int
    start_hi: int
    end: int
    read_end: int
    units: np.ndarray


@dataclass(frozen=True, eq=False)
class Approximation:
    """The approximate answer of one query at one granularity.

    ``starts``: the units where a match may start (sorted); ``ends``: per start, the last seq a match
    starting there may end at; ``read_ends``: per start, the last seq verification must see (the window's
    end after the start for a trailing NOT); ``relevant``: per unit, whether verification must read it.
    """

    query: Query
    units: Units
    starts: np.ndarray
    ends: np.ndarray
    read_ends: np.ndarray
    relevant: np.ndarray
    nodes_probed: int
    expected_false_positive_rate: float
    explain: str | None

    @property
    def exists(self) -> bool:
        return bool(len(self.starts))

    def candidate_spans(self) -> list[tuple[int, int]]:
        """Per start unit, ``(first seq of the unit, last seq a match starting there may end at)``."""
        return list(zip(self.units.lo_seq[self.starts].tolist(), self.ends.tolist(), strict=True))

    def intervals(self) -> list[dict[str, int]]:
        """The candidate intervals: per-start spans merged where they overlap, with the highest tree level
        among their start units (the level they were resolved at)."""
        lo, hi, levels = self._intervals
        return [{"start_seq": a, "end_seq": b, "level": c}
                for a, b, c in zip(lo.tolist(), hi.tolist(), levels.tolist(), strict=True)]

    def interval_count(self) -> int:
        """How many :meth:`intervals` there are."""
        return len(self._intervals[0])

    @cached_property
    def _intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The intervals' first and last seqs and levels."""
        lo = self.units.lo_seq[self.starts]
        if not len(lo):
            return _EMPTY, _EMPTY, _EMPTY
        # spans are in start order; one begins a new interval where it starts after every earlier end
        reach = np.maximum.accumulate(self.ends)
        first = np.concatenate((_ZERO, (lo[1:] > reach[:-1]).nonzero()[0] + 1))
        last = np.concatenate((first[1:], [len(lo)])) - 1
        levels = np.maximum.reduceat(self.units.level[self.starts], first)
        return lo[first], reach[last], levels

    def regions(self, merge_gap: int = 0) -> list[Region]:
        """Start units grouped where their read ranges overlap or lie less than ``merge_gap`` events apart,
        each with the units verification reads.

        Merging is sound: a unit inside a region that is not a start can start no exact match (no false
        negatives), so widening ``starts`` over it reports nothing extra.  It trades reading the gap for one
        engine call less (each call has a fixed cost; reads go by whole row groups anyway).
        """
        units = self.units
        if not len(self.starts):
            return []
        first, last, read_ends, last_units = self._groups(merge_gap)
        ends = np.maximum.reduceat(self.ends.astype(_I64), first)
        out = []
        for a, b, end, read_end, last_unit in zip(first.tolist(), last.tolist(), ends.tolist(),
                                                  read_ends.tolist(), last_units.tolist(), strict=True):
            s_first, s_last = int(self.starts[a]), int(self.starts[b])
            span = np.arange(s_first, last_unit + 1)
            out.append(Region(int(units.lo_seq[s_first]), int(units.hi_seq[s_last]), end, read_end,
                              span[self.relevant[span]]))
        return out

    def _groups(self, merge_gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The regions as runs of starts: each one's first and last start (indices into ``starts``), its
        read end and the unit that read end lies in."""
        lo = self.units.lo_seq[self.starts]
        # Starts come in stream order and each read end lies at or after its start, so the running maximum
        # of read ends is the current group's reach; a start beyond it (plus the gap) opens a new group.
        reach = np.maximum.accumulate(self.read_ends)
        first = np.concatenate((_ZERO, (lo[1:] > reach[:-1] + merge_gap).nonzero()[0] + 1))
        last = np.concatenate((first[1:], [len(lo)])) - 1
        return first, last, reach[last], self.units.index_of_seq(reach[last])

    def read_plan(self, merge_gap: int = 0) -> tuple[np.ndarray, int, Region | None]:
        """What :meth:`regions` reads, for all regions at once: the seq ranges (an (n, 2) array, inclusive,
        sorted, disjoint, neighbours joined) of the relevant units from each region's first start unit to
        its reach, clipped to its read end; the number of regions; and one region spanning them all (starts
        from the first region's first to the last one's last; None without starts).  Vectorised: the same
        ranges as :meth:`regions` joined region by region, without a Python step per region."""
        units = self.units
        if not len(self.starts):
            return np.zeros((0, 2), dtype=_I64), 0, None
        starts = self.starts
        first, _, read_end, last_unit = self._groups(merge_gap)
        # Region g spans the units [F_g, L_g] (its first start unit, the unit of its reach); F grows, and L
        # and the read end never fall (the reach is a running maximum).  A unit u is read whole when some
        # span holds it before its last unit — then the last region starting at or before u does, the one
        # reaching furthest — and read to the read end when it is some span's last unit (the last region
        # ending there reads furthest).  Spans overlap only with a negative gap.
        F, L = starts[first], last_unit
        u = self.relevant.nonzero()[0]
        g = F.searchsorted(u, "right") - 1
        whole_unit = (g >= 0) & (u < L[g])
        h = L.searchsorted(u, "right") - 1
        at_end = (h >= 0) & (L[h] == u)
        take = whole_unit | at_end
        u, cut, h = u[take], ~whole_unit[take], h[take]
        r_lo = units.lo_seq[u]
        r_hi = units.hi_seq[u]
        r_hi[cut] = np.minimum(r_hi[cut], read_end[h[cut]])
        # neighbours joined (a unit's read begins at its first seq, so none is empty)
        apart = (r_lo[1:] > r_hi[:-1] + 1).nonzero()[0]
        ranges = np.stack([np.concatenate((r_lo[:1], r_lo[apart + 1])),
                           np.concatenate((r_hi[apart], r_hi[-1:]))], axis=1).astype(_I64, copy=False)
        whole = Region(int(units.lo_seq[starts[0]]), int(units.hi_seq[starts[-1]]),
                       int(self.ends[first[-1]:].max()), int(read_end[-1]), _EMPTY)
        return ranges, len(first), whole

    def coverage(self) -> int:
        """Events inside the candidate intervals (their union)."""
        lo, hi, _ = self._intervals
        return int((hi - lo).sum()) + len(lo)


# ---------------------------------------------------------------------------------------------- evaluation


class _Position:
    """One position of the pattern: a variable, or an OR's alternatives (types None = any type); its label
    (for explain) is made only when asked for."""

    __slots__ = ("members", "types")

    def __init__(self, members: list[frozenset[str] | None]) -> None:
        self.members = members
        if any(t is None for t in members):
            self.types: frozenset[str] | None = None
        else:
            self.types = members[0] if len(members) == 1 else frozenset().union(*members)  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        return " | ".join(_type_label(t) for t in self.members)


def _positions(plan: Plan) -> list[list[_Position]]:
    return [[_Position([plan.positives[i].types for i in plan.group_members[g]]) for g in groups]
            for groups in plan.elements]


def _type_label(types: frozenset[str] | None) -> str:
    if types is None:
        return "ANY"
    if not types:
        return "(no type)"
    return " | ".join(sorted(types))


def _element_label(element: list[_Position]) -> str:
    if len(element) == 1:
        return element[0].label
    return "{" + ", ".join(p.label for p in element) + "}"


def _expand(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The units of the runs ``[first, last)``, concatenated."""
    return run_positions(first, last - first)


def _human_duration(micros: int) -> str:
    for unit, size in (("days", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000),
                       ("s", 1_000_000), ("ms", 1000)):
        if micros >= size and micros % size == 0:
            n = micros // size
            return f"{n} {unit[:-1] if unit == 'days' and n == 1 else unit}"
    return f"{micros} µs"


def _window_text(query: Query) -> str:
    w = query.within
    if isinstance(w, WithinTime):
        return f" within {_human_duration(w.micros)}"
    if isinstance(w, WithinEvents):
        return f" within {w.count} events"
    return ""


def _is_contiguous(query: Query) -> bool:
    """Strict contiguity, or partition contiguity over the whole stream (no PARTITION BY)."""
    return (query.strategy == Strategy.STRICT_CONTIGUITY
            or (query.strategy == Strategy.PARTITION_CONTIGUITY and not query.partition_by))


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
    positions = _positions(plan)
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
    keys = sum(len(p.types) for p in typed)  # type: ignore[arg-type]
    neg_types = _negated_types(plan)
    found_of: dict[int, np.ndarray] = {}
    allowed = None
    rest = typed
    if query.within is not None and type_counts is not None and typed:
        # Rarest first (Kolchinsky & Schuster's lazy evaluation, on the tree): walk the rarest position
        # alone, then the others only near it.  For a start unit s whose chain passes the rarest
        # position's unit h, every unit from s to s's window bound (chain, reach, a trailing NOT's window)
        # meets the window around h, so nothing a candidate needs is left unprobed.
        rare = min(typed, key=lambda p: sum(type_counts.get(t, 0) for t in p.types))  # type: ignore[union-attr]
        rare_hits = index.occurrences([rare.types], between)[0]  # type: ignore[list-item]
        if not len(rare_hits):
            return result(empty, empty, empty, no_relevant, _absent_text(rare, between), keys)
        found_of[id(rare)] = rare_hits
        allowed = _window_neighbourhood(query, units, rare_hits)
        rest = [p for p in typed if p is not rare]
    found = index.occurrences([p.types for p in rest] + ([neg_types] if neg_types else []),  # type: ignore[misc]
                              between, required=len(rest), allowed=allowed)
    found_of.update({id(p): h for p, h in zip(rest, found, strict=False)})
    neg_hits = found[-1] if neg_types else None
    if getattr(index, "cut_short", False):
        # The walk stopped at a position found nowhere; the others' answers are partial: name that one.
        absent = rest[index.absent[0]]  # type: ignore[attr-defined]
        if allowed is not None:
            return result(empty, empty, empty, no_relevant,
                          f"{absent.label} never occurs{_window_text(query)} of {rare.label}", keys)
        return result(empty, empty, empty, no_relevant, _absent_text(absent, between), keys)
    hits: list[list[np.ndarray]] = []
    for element in positions:
        row = []
        for p in element:
            h = np.arange(b_lo, b_hi, dtype=_I64) if p.types is None else found_of[id(p)]
            if not len(h):
                why = (f"{p.label} never occurs{_window_text(query)} of {rare.label}" if allowed is not None
                       else _absent_text(p, between))
                return result(empty, empty, empty, no_relevant, why, keys)
            row.append(h)
        hits.append(row)

    starts = _union(hits[0])
    contiguous = _is_contiguous(query)
    any_hit = np.zeros(U, dtype=bool)  # units where some position may occur
    for row in hits:
        for h in row:
            any_hit[h] = True
    bound = _window_bound(query, units, starts)
    if contiguous:
        bound = np.minimum(bound, _contiguity_bound(plan, units, np.flatnonzero(any_hit), starts))
    # per position, its hit units followed by U (the next hit at or after x is looked up by search)
    tail = np.asarray([U], dtype=_I64)
    hit_units = [[np.concatenate((h, tail)) for h in row] for row in hits]
    alive = _greedy_chain(hit_units, starts, bound)[0]
    if not alive.any():
        _, reached, last_unit_of = _greedy_chain(hit_units, starts, bound, record=True)
        return result(empty, empty, empty, no_relevant,
                      _explain_chain(query, positions, units, starts, reached, last_unit_of, hits,
                                     contiguous), keys)

    starts, bound = starts[alive], bound[alive]
    last_hits = _union(hits[-1])
    reach = last_hits[np.searchsorted(last_hits, bound, "right") - 1]  # the chain put one at or before
    ends = units.hi_seq[reach].astype(_I64)
    w = query.within
    if isinstance(w, WithinEvents):
        ends = np.minimum(ends, units.hi_seq[starts] + (w.count - 1))
    if contiguous and not any(v.kleene for v in plan.positives):
        ends = np.minimum(ends, units.hi_seq[starts] + (_position_count(plan) - 1))
    read_ends = ends.copy()
    if plan.negatives and plan.negatives[-1].element == len(plan.elements):
        # A trailing NOT looks for forbidden events up to the window's end after the first event.
        window_end = units.hi_seq[_window_bound(query, units, starts)].astype(_I64)
        if isinstance(w, WithinEvents):
            window_end = np.minimum(window_end, units.hi_seq[starts] + (w.count - 1))
        read_ends = np.maximum(read_ends, window_end)
    relevant = _relevant_units(query, plan, (b_lo, b_hi), any_hit, neg_hits, contiguous)
    return result(starts, ends, read_ends, relevant, None, keys)


def _greedy_chain(hit_units: list[list[np.ndarray]], starts: np.ndarray, bound: np.ndarray, *,
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


def _absent_text(p: _Position, between: Between | None) -> str:
    if not p.types:
        return f"the conditions on {p.label} admit no event type"
    if between is not None:
        return f"{p.label} never occurs between {iso_ts(between.start)} and {iso_ts(between.end)}"
    return f"{p.label} never occurs in the history"


def _window_neighbourhood(query: Query, units: Units, hits: np.ndarray) -> Runs:
    """The units meeting the window around some hit unit ``h`` (``hits``: sorted indices): time
    ``[h.lo_ts − d, h.hi_ts + d]``, or seqs ``[h.lo_seq − (n−1), h.hi_seq + (n−1)]``; as runs."""
    h = hits
    if not len(h):
        return _EMPTY, _EMPTY
    # Each hit's window as a run of units: both ends grow with the hit (units follow the stream's order),
    # and each run holds its own hit, so the runs of consecutive hits meet; join the ones that meet.
    w = query.within
    if isinstance(w, WithinTime):
        first = units.hi_ts.searchsorted(units.lo_ts[h] - w.micros, "left")
        last = units.lo_ts.searchsorted(units.hi_ts[h] + w.micros, "right")
    else:
        assert isinstance(w, WithinEvents)
        first = units.hi_seq.searchsorted(units.lo_seq[h] - (w.count - 1), "left")
        last = units.lo_seq.searchsorted(units.hi_seq[h] + (w.count - 1), "right")
    apart = (first[1:] > last[:-1]).nonzero()[0]
    return np.concatenate((first[:1], first[apart + 1])), np.concatenate((last[apart], last[-1:]))


def _position_count(plan: Plan) -> int:
    return sum(len(groups) for groups in plan.elements)


def _window_bound(query: Query, units: Units, starts: np.ndarray) -> np.ndarray:
    """Per start unit, the last unit a match starting in it may reach by its window alone."""
    w = query.within
    if isinstance(w, WithinTime):
        return np.searchsorted(units.lo_ts, units.hi_ts[starts] + w.micros, "right") - 1
    if isinstance(w, WithinEvents):
        return np.searchsorted(units.lo_seq, units.hi_seq[starts] + (w.count - 1), "right") - 1
    return np.full(len(starts), len(units) - 1, dtype=_I64)


def _contiguity_bound(plan: Plan, units: Units, any_hit: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Strict contiguity: every event between a match's first and last is bound, so every unit it spans
    holds a pattern type (``any_hit``: the sorted units that may) — the match ends within the run of such
    units starting at its first unit; without Kleene variables it has one event per position."""
    # per start (itself a hit), the last unit of its run of consecutive hits
    run_end = np.ones(len(any_hit), dtype=bool)
    run_end[:-1] = np.diff(any_hit) != 1
    ends = any_hit[run_end]
    bound = ends[np.searchsorted(ends, starts, "left")]
    if not any(v.kleene for v in plan.positives):
        last_seq = units.hi_seq[starts] + (_position_count(plan) - 1)
        bound = np.minimum(bound, np.searchsorted(units.lo_seq, last_seq, "right") - 1)
    return bound


def _negated_types(plan: Plan) -> frozenset[str] | None:
    """Types some negated variable can bind (None when there is no negation or one is ANY)."""
    if not plan.negatives or any(v.types is None for v in plan.negatives):
        return None
    return frozenset().union(*(v.types for v in plan.negatives))  # type: ignore[arg-type]


def _relevant_units(query: Query, plan: Plan, in_between: tuple[int, int], any_hit: np.ndarray,
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


def _explain_chain(query: Query, positions: list[list[_Position]], units: Units, starts: np.ndarray,
                   reached: np.ndarray, last_unit_of: list[np.ndarray], hits: list[list[np.ndarray]],
                   contiguous: bool) -> str:
    """Why no chain of units can hold a match: the first element no start gets past, and where."""
    k = int(reached.max()) if len(reached) else 0
    window = _window_text(query)
    if k >= len(positions):
        return ("no run of consecutive leaves holding only pattern types can hold the whole pattern under "
                f"{query.strategy.value}{window}")
    what = _element_label(positions[k])
    if k == 0:
        return f"{what} cannot complete the first element{window}"
    before = " , ".join(_element_label(e) for e in positions[:k]) if k > 1 else _element_label(positions[0])
    ok = last_unit_of[k - 1] >= 0
    last = int(last_unit_of[k - 1][ok].max()) if ok.any() else -1
    detail = ""
    if last >= 0:
        unit = "unit" if units.granularity else "leaf"
        detail = (f"; the last {unit} where {before} can be completed ends at seq "
                  f"{int(units.hi_seq[last])} ({iso_ts(int(units.hi_ts[last]))})")
        occurs = _union(hits[k])
        if occurs.size:
            detail += f", and {what} last occurs by seq {int(units.hi_seq[occurs[-1]])}"
    return f"{what} never occurs after {before}{window}{detail}"


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
