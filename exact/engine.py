"""The exact engine: all matches of a query in a stream, under its strategy (CONTRACT §2, §3).

:func:`evaluate` is the one entry point.  It normalises the query (:mod:`exact.normalize`), reads the stream
into columns (:class:`~exact.prefilter.EventFrame`, with ``BETWEEN`` applied), evaluates every variable's
properties vectorised, and hands only the events some variable can bind to the Python loops (the
prefilter).  Then, by strategy:

* ``skip_till_next_match`` / ``robust_skip_till_next_match`` / ``skip_till_any_match``: one window per
  possible first event (Cadonna 2013, Algorithm 1) — or, with ``two_phase``, the filtered, partitioned and
  candidate match windows of Algorithm 3 (:mod:`exact.twophase`) — each evaluated by the window function
  of :mod:`exact.strategies`.  Without ``two_phase`` the possible first events are pruned vectorised
  (rarest variable first, then the ordered chain of sets) to those whose window can hold a match at all.
* ``strict_contiguity`` / ``partition_contiguity``: one run per possible first event over successive
  events of the stream (resp. the partition); these see every event, not only the filtered ones.
* A ``skip_till_next_match`` SEQ of single, non-Kleene variables with only properties to test (no
  relations, prev, NOT or partitioning) has one instance per window that binds each variable to the
  first event of it after the previous one: all its windows are run at once as a chain of bisections.

Afterwards OR positions bound to the same events under several alternatives are reported once (under the
first alternative in pattern order), SASE+ negation drops the matches with a forbidden event in a negated
gap, and the buffers become :class:`Match` values.  :func:`answer` turns matches into the parts of the
CONTRACT §3 answer.

Windows: ``WITHIN d`` — last ts − first ts ≤ d; ``WITHIN n EVENTS`` — last seq − first seq < n; none —
the window reaches the end of the stream (a match must still start at the window's first event; the lazy
reading of :class:`~exact.strategies.View` makes a run stop as soon as none of its instances can change).

Semantics decided here, where the sources leave a choice (tested in tests/test_engine_*.py):

* Stream order is seq; events with equal ts are ordered by seq, and consecutive SEQ positions need a
  strictly larger seq.  ``ts`` must not decrease along seq (InputError otherwise).
* A condition with a null or missing operand is false (also ``!=``); values of different kinds (number,
  string, boolean) are never equal.  A condition on one variable holds for each of its events (∀); between
  two variables for every pair (∀, Cadonna Def. 3.2); ``prev`` for consecutive pairs.
* ``skip_till_next_match`` is the SES automaton (Alg. 2, corrected): an instance takes every transition
  that fires and skips only events that fire none; it keeps reading in the accepting state, so a trailing
  Kleene variable extends maximally within the window, and nothing else changes there.  SASE+'s
  ignore-proceed nondeterminism is *not* part of it: on ``a1 b1 c1 c2`` the pattern ``SEQ(A, B+, C)``
  gives one match, not two.  Its results depend on the equality closure of the conditions (digest A8).
* OR alternatives are branches of one position; a match is reported once per set of bound events, under
  the first alternative (pattern order) with which it is a match.
* Contiguity is over the events passed (after BETWEEN): the caller passes every event of the range it
  asks about.  ``partition_contiguity`` uses ``PARTITION BY`` (without it: the whole stream); events whose
  partition attribute is null belong to no partition.  ``two_phase`` does not apply to contiguity.
* NOT: the positive pattern's matches under the strategy are computed first; a negated variable forbids
  events of its type satisfying its conditions (∀ over Kleene bindings of the positives they name) and,
  with PARTITION BY, in the match's partition, strictly between the neighbouring positive elements (by
  seq); a trailing NOT covers the events after the last positive one up to first ts + d (inclusive), resp.
  first seq + n − 1.
"""

from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.ast import Field, Query, Return, Strategy, WithinEvents, WithinTime
from exact.automaton import Buffer, Runner, automaton_for, condition_attrs
from exact.errors import QueryLimitError
from exact.events import micros
from exact.normalize import FLIPPED, Plan, compare, normalize
from exact.operands import reject_run_operands
from exact.prefilter import EventFrame, property_mask, variable_bits
from exact.strategies import (
    PartitionViews,
    View,
    any_match_window,
    contiguous_window,
    next_match_window,
    robust_next_match_window,
)
from exact.twophase import candidate_windows
from exact.twophase import two_phase as run_two_phase

#: Positive variables are bits of a 63-bit mask.
MAX_VARIABLES = 62

_WINDOW_FUNCS = {
    Strategy.SKIP_TILL_NEXT_MATCH: next_match_window,
    Strategy.ROBUST_SKIP_TILL_NEXT_MATCH: robust_next_match_window,
    Strategy.SKIP_TILL_ANY_MATCH: any_match_window,
}


class Match(NamedTuple):
    """One match: first and last seq, and per positive variable (pattern order) its seqs in stream order.

    An OR position appears under the name of the alternative that bound it; negated variables never appear.
    Matches order by their fields in turn (a tuple: made and compared without Python calls, which counts
    for answers with many matches).
    """

    start_seq: int
    end_seq: int
    bindings: tuple[tuple[str, tuple[int, ...]], ...]

    def bindings_dict(self) -> dict[str, list[int]]:
        return {name: list(seqs) for name, seqs in self.bindings}


def evaluate(query: Query, events: pa.Table | Iterable[pa.RecordBatch] | EventFrame, *,
             two_phase: bool = True,
             prefilter: bool = True, type_counts: Mapping[str, int] | None = None,
             starts: tuple[int, int] | None = None) -> list[Match]:
    """All matches of ``query`` in ``events`` under its strategy: sorted, deduplicated.

    ``two_phase`` selects Algorithm 3 (match windows) over Algorithm 1; ``prefilter`` keeps events no
    variable can bind out of the Python loops; ``type_counts`` (type → count in the stream) orders the
    pruning rarest first; ``starts=(lo, hi)`` reports only matches whose first event's seq lies in
    [lo, hi] — the events passed may reach further, so the strategy sees everything it needs.  The results
    do not depend on ``two_phase``, ``prefilter`` or ``type_counts``.
    """
    reject_run_operands(query)
    plan = normalize(query)
    if plan.nvars > MAX_VARIABLES:
        raise QueryLimitError(f"a pattern may have at most {MAX_VARIABLES} positive variables")
    frame = (events.restrict(query.between) if isinstance(events, EventFrame)
             else EventFrame.build(events, query.between))
    if len(frame) == 0 or plan.unsatisfiable:
        return []
    return _Evaluation(plan, frame, two_phase=two_phase, prefilter=prefilter, type_counts=type_counts,
                       starts=starts).run()


class _Evaluation:
    """The state of one :func:`evaluate` call (columns of the filtered stream, the bound automaton)."""

    def __init__(self, plan: Plan, frame: EventFrame, *, two_phase: bool, prefilter: bool,
                 type_counts: Mapping[str, int] | None, starts: tuple[int, int] | None) -> None:
        self.plan = plan
        self.query = plan.query
        self.frame = frame
        self.two_phase = two_phase
        self.prefilter = prefilter
        self.type_counts = type_counts
        self.starts = starts
        n = len(frame)
        # per variable, the events it can bind; needed for rarest-first only without the stream's type counts
        evmask, var_counts = variable_bits(frame, plan.positives, counts=type_counts is None)
        self.var_counts = var_counts or []
        self.idx = np.flatnonzero(evmask) if prefilter else np.arange(n)
        self.evmask_np = evmask[self.idx].astype(np.int64)
        self.seq = frame.seq[self.idx]
        self.ts = frame.ts[self.idx]
        self.automaton = automaton_for(self.query)
        self.names = [v.name for v in plan.positives]
        self._key_cache: np.ndarray | None = None

    # -- made when a Python window loop runs (the chain of :meth:`_chain` needs none of them) --------

    @functools.cached_property
    def evmask(self) -> list[int]:
        return self.evmask_np.tolist()

    @functools.cached_property
    def columns(self) -> dict[str, list]:
        """Per attribute a condition names, its values at the filtered events."""
        return {attr: self.frame.values(attr, self.idx) for attr in condition_attrs(self.plan)}

    @functools.cached_property
    def runner(self) -> Runner:
        return Runner(self.automaton, self.evmask, self.columns)

    # -- windows ------------------------------------------------------------------------------------

    @functools.cached_property
    def end(self) -> np.ndarray:
        """Per filtered event, the last position of the window it starts."""
        return self._window_ends(np.arange(len(self.idx)))

    def _window_ends(self, positions: np.ndarray) -> np.ndarray:
        """The last position of the windows starting at ``positions`` (the chain asks only for its
        first events', a fraction of the stream)."""
        w = self.query.within
        if isinstance(w, WithinTime):
            return self.ts.searchsorted(self.ts[positions] + w.micros, "right") - 1
        if isinstance(w, WithinEvents):
            return self.seq.searchsorted(self.seq[positions] + (w.count - 1), "right") - 1
        return np.full(len(positions), len(self.idx) - 1, dtype=np.int64)

    def _start_ok_mask(self) -> np.ndarray:
        if self.starts is None:
            return np.ones(len(self.idx), dtype=bool)
        lo, hi = self.starts
        return (self.seq >= lo) & (self.seq <= hi)

    # -- driver -------------------------------------------------------------------------------------

    def run(self) -> list[Match]:
        strategy = self.query.strategy
        if self.two_phase and self.prefilter and self._is_chain():
            return self._chain()
        if strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY):
            buffers = self._contiguous(strategy == Strategy.PARTITION_CONTIGUITY)
        elif self.two_phase:
            buffers = self._two_phase(_WINDOW_FUNCS[strategy])
        else:
            buffers = self._match_windows(_WINDOW_FUNCS[strategy])
        buffers = self._one_alternative(buffers)
        buffers = self._negation(buffers)
        # distinct buffers make distinct matches (seqs are distinct), so duplicates are dropped before any
        # Match is made
        return sorted(map(self._to_match, dict.fromkeys(buffers)))

    def _is_chain(self) -> bool:
        """Is the query skip-till-next-match over a SEQ of single, non-Kleene variables, with nothing but
        properties to test (no relations, prev, negation or partitioning)?

        Then each state has one transition, binding the next element's variable, so a window runs one
        instance that binds every variable to the first event of it after the previous one, and matches
        iff the last of these lies within the window: a chain of bisections, :meth:`_chain`."""
        plan, aut = self.plan, self.automaton
        return (self.query.strategy == Strategy.SKIP_TILL_NEXT_MATCH and not plan.relations
                and not plan.prevs and not plan.negatives and not plan.partition_attrs
                and not any(aut.kleene)
                and all(len(gs) == 1 and gs[0] & (gs[0] - 1) == 0 for gs in aut.element_groups))

    def _chain(self) -> list[Match]:
        """The matches of a chain query (:meth:`_is_chain`), for every possible first event at once.

        The same matches as the windows of Algorithms 1 and 3 — one per first event whose chain completes
        within its window, sorted by it — without a Python loop per window."""
        masks = [gs[0] for gs in self.automaton.element_groups]
        evmask = self.evmask_np
        starts = (((evmask & masks[0]) != 0) & self._start_ok_mask()).nonzero()[0]
        ok = np.ones(len(starts), dtype=bool)
        chain = [starts]
        for mask in masks[1:]:
            events = ((evmask & mask) != 0).nonzero()[0]
            if not len(events):
                return []
            k = events.searchsorted(chain[-1], "right")  # the first event of the variable after the last
            ok &= k < len(events)
            chain.append(events[np.minimum(k, len(events) - 1)])  # clipped where ok is false already
        ok &= chain[-1] <= self._window_ends(starts)
        seqs = [self.seq[positions[ok]].tolist() for positions in chain]
        # bindings in variable order (element i binds the variable of masks[i]), made column by column
        order = sorted(range(len(masks)), key=lambda i: masks[i])
        bound = [[(self.names[masks[i].bit_length() - 1], (s,)) for s in seqs[i]] for i in order]
        return list(map(Match, seqs[0], seqs[-1], zip(*bound, strict=True)))

    def _first_events(self) -> np.ndarray:
        """Positions whose event can start a match (Alg. 2: the start state must fire on W[1])."""
        ok = (self.evmask_np & self.automaton.first_element_mask) != 0
        return np.flatnonzero(ok & self._start_ok_mask())

    def _match_windows(self, window_fn: Callable[..., list[Buffer]]) -> list[Buffer]:
        """Algorithm 1: one window per possible first event."""
        firsts = self._first_events()
        if self.prefilter:
            firsts = self._necessary(firsts)
        out: list[Buffer] = []
        end = self.end
        if self.plan.partition_attrs:
            # after the first event only events of its partition can fire (the closure relates every
            # pair of variables on X), so each window reads its own partition
            keys = self._keys()
            parts = PartitionViews(self.evmask_np, np.arange(len(self.idx)), keys, self.prefilter,
                                   self.evmask)
            for s in firsts.tolist():
                key = int(keys[s])
                if key >= 0:
                    out.extend(window_fn(self.runner, parts.view(key), s, int(end[s])))
            return out
        view = View(self.evmask_np, None, self.prefilter)
        for s in firsts.tolist():
            out.extend(window_fn(self.runner, view, s, int(end[s])))
        return out

    def _group_rarity(self, members: tuple[int, ...]) -> float:
        counts = self.type_counts
        if counts is not None:
            total = 0.0
            for i in members:
                types = self.plan.positives[i].types
                if types is None:
                    return float(sum(counts.values()))
                total += sum(counts.get(t, 0) for t in types)
            return total
        return float(sum(self.var_counts[i] for i in members))

    def _keys(self) -> np.ndarray:
        """Partition code per filtered event (0 for all without partitioning attributes; -1: none)."""
        if self._key_cache is None:
            self._key_cache = (self._partition_codes(self.plan.partition_attrs, self.idx)
                               if self.plan.partition_attrs else np.zeros(len(self.idx), dtype=np.int64))
        return self._key_cache

    def _necessary(self, firsts: np.ndarray) -> np.ndarray:
        """Vectorised necessary conditions for a match starting at each of ``firsts``.

        Rarest group first (Kolchinsky & Schuster: the rarest variable decides fastest whether a window
        can match): every group needs an event within the window, in the first event's partition.  Then
        the ordered chain of Thm. 5.2 (5.4): the events of ``B_{i+1}`` follow the earliest possible
        completion of ``Bi``, and the earliest possible last event must lie within the window.  Positions
        are searched as ``key * B + position``, so one sorted array per group serves every partition.
        """
        aut = self.automaton
        keys = self._keys()
        firsts = firsts[keys[firsts] >= 0]
        base = len(self.idx) + 1
        never = np.iinfo(np.int64).max
        groups = [(gm, tuple(_bits(gm))) for gs in aut.element_groups for gm in gs]
        encoded = {}
        for gm, _ in groups:
            pos = np.flatnonzero((self.evmask_np & gm) != 0)
            pos = pos[keys[pos] >= 0]
            encoded[gm] = np.sort(keys[pos] * base + pos)
        end = self.end

        def next_in_partition(gm: int, starts: np.ndarray, after: np.ndarray, strictly: bool) -> np.ndarray:
            """Per start: the first position of group ``gm`` at (or after) ``after`` in its partition."""
            enc = encoded[gm]
            out = np.full(len(starts), never, dtype=np.int64)
            alive = np.flatnonzero(after != never)
            if not len(alive) or not len(enc):
                return out
            part = keys[starts[alive]]
            k = np.searchsorted(enc, part * base + after[alive], "right" if strictly else "left")
            inside = k < len(enc)
            hit = enc[k[inside]]
            same = hit // base == part[inside]
            out[alive[inside][same]] = hit[same] % base
            return out

        for gm, _members in sorted(groups, key=lambda g: self._group_rarity(g[1])):
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
        return firsts[bound <= end[firsts]]

    def _partition_codes(self, attrs: tuple[str, ...], positions: np.ndarray | None) -> np.ndarray:
        """An int64 code per event for the tuple of ``attrs`` values (-1 when one of them is null)."""
        n = len(self.frame)
        code = np.zeros(n, dtype=np.int64)
        null = np.zeros(n, dtype=bool)
        for attr in attrs:
            arr = self.frame.array(attr)
            if pa.types.is_null(arr.type):
                null[:] = True
                continue
            enc = pc.dictionary_encode(arr)
            idx = enc.indices
            if idx.null_count:
                null |= pc.is_null(idx).to_numpy(zero_copy_only=False)
                idx = pc.fill_null(idx, 0)
            codes = idx.to_numpy(zero_copy_only=False).astype(np.int64)
            radix = max(len(enc.dictionary), 1)
            code = code * radix + codes
        code[null] = -1
        return code if positions is None else code[positions]

    def _two_phase(self, window_fn: Callable[..., list[Buffer]]) -> list[Buffer]:
        w = self.query.within
        within: tuple[str, int] | None = None
        if isinstance(w, WithinTime):
            within = ("time", w.micros)
        elif isinstance(w, WithinEvents):
            within = ("events", w.count)
        if self.prefilter:
            # phase 1 vectorised (the filter is the prefilter's job); phase 2 per candidate window
            keys = self._keys() if self.plan.partition_attrs else None
            firsts = candidate_windows(self.automaton, self.evmask_np, keys, self.end,
                                       self._start_ok_mask())
            out: list[Buffer] = []
            ends = self.end[firsts].tolist()
            if keys is None:
                # one partition holding every filtered event: the whole stream's view
                view = View(self.evmask_np, None, True)
                for s, e in zip(firsts.tolist(), ends, strict=True):
                    out.extend(window_fn(self.runner, view, s, e))
                return out
            parts = PartitionViews(self.evmask_np, np.arange(len(self.idx)), keys, True, self.evmask)
            for s, k, e in zip(firsts.tolist(), keys[firsts].tolist(), ends, strict=True):
                out.extend(window_fn(self.runner, parts.view(k), s, e))
            return out
        keys = (self._partition_codes(self.plan.partition_attrs, self.idx)
                if self.plan.partition_attrs else None)
        start_ok = self._start_ok_mask().tolist()
        return run_two_phase(self.runner, window_fn, evmask_np=self.evmask_np, seq=self.seq, ts=self.ts,
                             positions=np.arange(len(self.idx)), partition_keys=keys, within=within,
                             jump=self.prefilter, start_ok=start_ok.__getitem__)

    def _contiguous(self, by_partition: bool) -> list[Buffer]:
        """Strict / partition contiguity over every event of the stream (resp. of the partition)."""
        n = len(self.frame)
        in_universe = np.full(n + 1, -1, dtype=np.int64)
        in_universe[self.idx] = np.arange(len(self.idx))
        if by_partition and self.query.partition_by:
            code = self._partition_codes(self.query.partition_by, None)
            order = np.lexsort((np.arange(n), code))
            nxt_full = np.full(n, n, dtype=np.int64)
            same = code[order[:-1]] == code[order[1:]]
            nxt_full[order[:-1][same]] = order[1:][same]
            nxt_full[code < 0] = n
        else:
            nxt_full = np.arange(1, n + 1, dtype=np.int64)
        successor = in_universe[nxt_full[self.idx]].tolist()
        out: list[Buffer] = []
        end = self.end
        for s in self._first_events().tolist():
            out.extend(contiguous_window(self.runner, successor, s, int(end[s])))
        return out

    # -- post-processing ----------------------------------------------------------------------------

    def _one_alternative(self, buffers: list[Buffer]) -> list[Buffer]:
        """An OR position bound to the same events under several alternatives is one match, reported
        under the first alternative (pattern order) — CONTRACT §2: bound by exactly one alternative."""
        ors = [m for m in set(self.plan.group_members) if len(m) > 1]
        if not ors:
            return buffers
        best: dict[tuple, tuple[tuple, Buffer]] = {}
        for b in buffers:
            key_parts = []
            rank = []
            for members in ors:
                chosen = next(i for i in members if b[i])
                key_parts.append(b[chosen])
                rank.append(chosen)
            rest = tuple(b[i] if not any(i in m for m in ors) else () for i in range(len(b)))
            key = (rest, tuple(key_parts))
            r = tuple(rank)
            if key not in best or r < best[key][0]:
                best[key] = (r, b)
        return [b for _, b in best.values()]

    def _negation(self, buffers: list[Buffer]) -> list[Buffer]:
        """SASE+ negation: drop matches with a forbidden event strictly inside a negated gap (or, for a
        trailing NOT, after the last positive event and within the window)."""
        if not self.plan.negatives or not buffers:
            return buffers
        checks = [self._negation_check(i) for i in range(len(self.plan.negatives))]
        return [b for b in buffers if not any(check(b) for check in checks)]

    def _negation_check(self, k: int) -> Callable[[Buffer], bool]:
        plan, frame = self.plan, self.frame
        nv = plan.negatives[k]
        cand = np.flatnonzero(property_mask(frame, nv))
        cand_seq = frame.seq[cand].tolist()
        cand_ts = frame.ts[cand].tolist()
        pos_index = plan.positive_index()
        rels = []
        for c in plan.negative_relations[k]:
            left, op, right = c.left, c.op, c.right
            assert isinstance(left, Field) and isinstance(right, Field)
            if left.var != nv.name:
                left, op, right = right, FLIPPED[op], left
            rels.append((frame.values(left.attr, cand), op, pos_index[right.var], self.columns[right.attr]))
        gap = nv.element
        nelem = len(plan.elements)
        before = [v.index for v in plan.positives if v.element == gap - 1]
        after = [v.index for v in plan.positives if v.element == gap]
        within = self.query.within
        seq_u, ts_u = self.seq_list, self.ts.tolist()
        # with PARTITION BY only the match's partition can hold a forbidden event: candidates are searched
        # as key * B + candidate index, so a gap is one bisection within the partition
        by_key: list[int] | None = None
        keys_u: list[int] = []
        base = len(cand) + 1
        if self.query.partition_by:
            codes = self._partition_codes(self.query.partition_by, None)
            by_key = np.sort(codes[cand] * base + np.arange(len(cand))).tolist()
            keys_u = codes[self.idx].tolist()

        def forbidden(b: Buffer) -> bool:
            lo = max(seq_u[x] for i in before for x in b[i])
            j0 = bisect_right(cand_seq, lo)
            if gap < nelem:
                hi = min(seq_u[x] for i in after for x in b[i])
                j1 = bisect_left(cand_seq, hi)
            else:
                first = min(x for xs in b for x in xs)
                if isinstance(within, WithinTime):
                    j1 = bisect_right(cand_ts, ts_u[first] + within.micros)
                else:
                    assert isinstance(within, WithinEvents)
                    j1 = bisect_right(cand_seq, seq_u[first] + within.count - 1)
            if by_key is not None:
                key = keys_u[next(x for xs in b for x in xs)] * base
                span = by_key[bisect_left(by_key, key + j0):bisect_left(by_key, key + j1)]
                js: Iterable[int] = (e - key for e in span)
            else:
                js = range(j0, j1)
            for j in js:
                if all(compare(col[j], op, wcol[y]) for col, op, w, wcol in rels for y in b[w]):
                    return True
            return False

        return forbidden

    @functools.cached_property
    def seq_list(self) -> list[int]:
        """The filtered events' seqs as a list, made only when there are matches (or negations) to read."""
        return self.seq.tolist()

    def _to_match(self, b: Buffer) -> Match:
        # one pass, no nested comprehensions (each is a function call): a variable's positions are in
        # stream order and seq grows with the position, so the first and last positions bound decide
        seq = self.seq_list
        bindings = []
        first = last = -1
        for name, xs in zip(self.names, b, strict=True):
            if xs:
                if first < 0 or xs[0] < first:
                    first = xs[0]
                if xs[-1] > last:
                    last = xs[-1]
                bindings.append((name, tuple(map(seq.__getitem__, xs))))
        return Match(seq[first], seq[last], tuple(bindings))


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


# ------------------------------------------------------------------------------------------------ answers


def iso_ts(micros: int) -> str:
    """UTC microseconds → ISO 8601 with microseconds and offset, as in CONTRACT §3."""
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(micros))).isoformat(
        timespec="microseconds")


def iso_ts_many(micros: np.ndarray | Sequence[int]) -> list[str]:
    """:func:`iso_ts` of many values at once (same text)."""
    stamps = np.asarray(micros, dtype=np.int64).astype("datetime64[us]")
    return [text + "+00:00" for text in np.datetime_as_string(stamps, unit="us").tolist()]


def merge_intervals(matches: Iterable[Match]) -> list[tuple[int, int]]:
    """The union of the matches' [start_seq, end_seq] as disjoint intervals (overlapping ones merged)."""
    spans = sorted((m.start_seq, m.end_seq) for m in matches)
    out: list[list[int]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def answer(query: Query, matches: list[Match], ts_of: Mapping[int, int] | Callable[[int], int], *,
           limit: int | None = None) -> dict[str, Any]:
    """The query-dependent parts of a CONTRACT §3 answer for ``matches`` (sorted, as from evaluate).

    Always ``strategy``, ``exists``, ``count`` and ``truncated``; ``matches`` (capped by ``limit``) and
    ``intervals`` for RETURN matches, ``intervals`` for RETURN intervals.  ``ts_of`` maps a seq to its UTC
    microseconds.
    """
    lookup: Callable[[int], int] = ts_of.__getitem__ if isinstance(ts_of, Mapping) else ts_of
    out: dict[str, Any] = {"strategy": query.strategy.value, "exists": bool(matches),
                           "count": len(matches)}
    truncated = False
    shown: list[Match] = []
    spans: list[tuple[int, int]] = []
    if query.returns == Return.MATCHES:
        shown = matches if limit is None else matches[:max(limit, 0)]
        truncated = len(shown) < len(matches)
    if query.returns in (Return.MATCHES, Return.INTERVALS):
        spans = merge_intervals(matches)
    # every time shown is formatted once, all together
    seqs = sorted({s for m in shown for s in (m.start_seq, m.end_seq)} | {s for span in spans for s in span})
    text = dict(zip(seqs, iso_ts_many([lookup(s) for s in seqs]), strict=True))
    if query.returns == Return.MATCHES:
        out["matches"] = [
            {"start_seq": m.start_seq, "end_seq": m.end_seq, "start_ts": text[m.start_seq],
             "end_ts": text[m.end_seq], "bindings": m.bindings_dict()} for m in shown]
    if query.returns in (Return.MATCHES, Return.INTERVALS):
        out["intervals"] = [{"start_seq": s, "end_seq": e, "start_ts": text[s], "end_ts": text[e]}
                            for s, e in spans]
    out["truncated"] = truncated
    return out


def match_ts(events: pa.Table | EventFrame, matches: Sequence[Match]) -> dict[int, int]:
    """seq → ts (UTC microseconds) of the first and last events of ``matches`` (for :func:`answer`), found
    in the seq-sorted ``events`` chunk by chunk: a full scan's columns are never converted as a whole.

    Chunks are read as numpy views (no compute calls, no copies): on a verified read of a few hundred
    rows the take and casts this once used cost more than the search."""
    if not matches or len(events) == 0:
        return {}
    wanted_list = sorted({s for m in matches for s in (m.start_seq, m.end_seq)})
    wanted = np.asarray(wanted_list, dtype=np.int64)
    if isinstance(events, EventFrame):
        return dict(zip(wanted_list, events.ts[events.seq.searchsorted(wanted)].tolist(), strict=True))
    chunks = [c.to_numpy(zero_copy_only=False) for c in events.column("seq").chunks if len(c)]
    if len(chunks) == 1:
        positions = chunks[0].searchsorted(wanted)
    else:
        firsts = np.fromiter((c[0] for c in chunks), dtype=np.int64, count=len(chunks))
        offsets = np.cumsum([0] + [len(c) for c in chunks])
        which = firsts.searchsorted(wanted, "right") - 1
        positions = np.empty(len(wanted), dtype=np.int64)
        for k in np.unique(which).tolist():
            at = which == k
            positions[at] = offsets[k] + chunks[k].searchsorted(wanted[at])
    return dict(zip(wanted_list, _micros_at(events.column("ts"), positions).tolist(), strict=True))


def _micros_at(column: pa.ChunkedArray, positions: np.ndarray) -> np.ndarray:
    """The UTC microseconds of ``column`` at the sorted ``positions``, from the chunks holding them."""
    chunks = [c for c in column.chunks if len(c)]
    if len(chunks) == 1:
        return micros(chunks[0])[positions]
    offsets = np.cumsum([0] + [len(c) for c in chunks])
    which = offsets.searchsorted(positions, "right") - 1
    out = np.empty(len(positions), dtype=np.int64)
    for k in np.unique(which).tolist():
        at = which == k
        out[at] = micros(chunks[k])[positions[at] - offsets[k]]
    return out


def ts_lookup(events: pa.Table | Iterable[pa.RecordBatch]) -> dict[int, int]:
    """seq → ts (UTC microseconds) of a stream, for :func:`answer`."""
    frame = EventFrame.build(events)
    return dict(zip(frame.seq.tolist(), frame.ts.tolist(), strict=True))
