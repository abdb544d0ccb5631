"""Where a pattern's types may occur, found top-down on the Bloom tree (Baltus 2021, §4.3).

**Occurrence, top-down (§4.3).**  For each position of the pattern (a variable, or an OR of alternatives) the
units that may hold one of its types are found by probing the top-level nodes first and descending only into
nodes that answered "maybe" (``nodes_probed`` counts the probes).  ``ANY`` occurs everywhere.  A position
absent from every top-level node answers ``exists: false`` at once.  ``BETWEEN`` keeps only nodes whose ts
interval meets it (Baltus 2021 §4.3.4, windowing via a node cover).  All positions descend in one level-by-level walk
(each level probes the union of live nodes with every key once); a level that prunes little hands over to
the units below its survivors directly, since a dense type would survive every level in between.  When
the units' and top-level filters fit a bit-sliced copy (the usual case), the walk is exactly that jump:
each key is probed over all of them at once, and the units that may hold it are remembered as a sorted
list, so a query's occurrences, chains and windows work on short lists of units.  With a
window and the stream's type counts, the rarest position is walked first and the others only within one
window of its units (the lazy, rarest-first order of Kolchinsky & Schuster, applied to the tree).  Which
intermediate levels a walk probes can change which Bloom false hits survive, never a true occurrence.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
from numpy.typing import NDArray

from exact.query.ast import Between
from sketch.evaluate.units import EMPTY, Runs, clip_runs, expand_runs, in_runs, runs_before, union, units_at

if TYPE_CHECKING:
    from sketch.tree.nodes import TreeNodes

_I64 = np.int64
#: Descent shortcut: once a level of at least this many probed nodes keeps this share of them, the walk
#: probes the units below the survivors directly (a dense type would survive every level in between).
_JUMP_MIN_NODES = 16
_JUMP_ALIVE = 0.75
#: ... and once the units below the survivors number at most this many per level left to descend.
_JUMP_UNITS_PER_LEVEL = 2048
#: Bytes of remembered probe answers per :class:`TreeIndex` (two flags per node and key).
_MEMO_BYTES = 64 << 20


class TreeIndex:
    """Occurrence from the Bloom tree, found top-down (Baltus §4.3): probe the top-level nodes, descend
    only into nodes that may contain a key, stop at the units' level."""

    def __init__(self, tree: TreeNodes, granularity: int = 0) -> None:
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
            self._unit_top[expand_runs(top_first, top_last)] = np.repeat(
                np.arange(len(self._top), dtype=_I64), top_last - top_first)
            self._top_deep = self._level[self._top] > granularity
            self._top_first, self._top_last = top_first, top_last
            self._top_bounds = np.concatenate((top_first, top_last))

    @classmethod
    def shared(cls, tree: TreeNodes, granularity: int = 0) -> TreeIndex:
        """The index of ``tree`` at ``granularity`` kept with the tree, so the queries a service answers on
        one index version share its units and probe answers (dropped with the tree, or when it changes)."""
        return tree.cached(("tree-index", granularity), lambda: cls(tree, granularity))

    @classmethod
    def prepare(cls, tree: TreeNodes) -> TreeIndex:
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
        col: NDArray[np.int64] = self._sliced_col[nodes]
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
        keep: NDArray[np.bool_] = (self._hi_ts[nodes] >= between.start) & (self._lo_ts[nodes] <= between.end)
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
            mask[expand_runs(*allowed)] = True
        return [np.flatnonzero(found) for found in
                self._walk(type_sets, between, required=required, allowed=mask)]

    def _key_hits(self, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For ``key``: per top-level node, may it hold the key; the units whose own filter says it may
        (sorted indices); and the same as a flag per unit.  One sliced probe per key and
        :class:`TreeIndex`, remembered (LRU, bounded in keys and bytes like :meth:`_probe`'s answers)."""
        with self._lock:
            # (with sliced filters the memo holds these triples only, not :meth:`_probe`'s pairs)
            known = cast("tuple[np.ndarray, np.ndarray, np.ndarray] | None", self._memo.get(key))
            if known is not None:
                self._memo.move_to_end(key)
                return known
        assert self._sliced is not None  # (asked only of an index with sliced filters)
        hit = self._sliced.probe([key])[:, 0]
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
        out = [EMPTY] * P
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
            ok = allowed if lo == 0 and hi == U else clip_runs(allowed, lo, hi)
            before = runs_before(self._top_bounds, ok)
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
                ok_units = expand_runs(*ok)
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
                            units = union([hits[key][1] for key in sorted(types)])
                            if ok is not None or lo > 0 or hi < U:
                                units = in_runs(units, ok if ok is not None else clip_runs(None, lo, hi))
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
        meets: NDArray[np.bool_] = csum[self._last_unit[nodes]] > csum[self._first_unit[nodes]]
        return meets

    def _over(self, nodes: np.ndarray, csum: np.ndarray | None) -> np.ndarray:
        return nodes if csum is None or not nodes.size else nodes[self._meets(nodes, csum)]

    def _units_below(self, nodes: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The units inside each of ``nodes`` (a contiguous run of units each), with the node's row of
        ``alive`` repeated for each."""
        first, last = self._first_unit[nodes], self._last_unit[nodes]
        return self.units.nodes[expand_runs(first, last)], np.repeat(alive, last - first, axis=0)

    @property
    def lists_units(self) -> bool:
        """Whether every unit's answer for a key comes from one sliced probe (remembered), so that asking
        about all units costs about as little as asking about a few."""
        return self._sliced is not None

    def near_share(self, types: frozenset[str], first: np.ndarray, last: np.ndarray) -> float:
        """The share of the runs of units ``[first_i, last_i)`` that hold a unit whose filter says an event
        of one of ``types`` may occur there: from the remembered sliced answers (a prefix count); else each
        run's units are probed (answers remembered, counted as a walk's probes)."""
        if not len(first) or not types:
            return 0.0
        keys = sorted(types)
        if self._sliced is not None:
            flags = self._key_hits(keys[0])[2]
            for key in keys[1:]:
                flags = flags | self._key_hits(key)[2]
            before = np.concatenate(([0], np.cumsum(flags, dtype=_I64)))
            self._local.probes = self.probes() + len(flags)
            return float(np.count_nonzero(before[last] > before[first])) / len(first)
        at = expand_runs(first, last)
        hit = self._probe(self.units.nodes[at].astype(_I64), keys).any(axis=1)
        self._local.probes = self.probes() + len(at)
        found = np.zeros(len(first), dtype=bool)
        found[np.repeat(np.arange(len(first)), last - first)[hit]] = True
        return float(np.count_nonzero(found)) / len(first)

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
