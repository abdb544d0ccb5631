"""The exact engine: the matches of a query in a stream, under its strategy (docs/contract.md §2, §3).

:func:`evaluate_table` is the one entry point (:func:`evaluate` returns its matches as a sorted list).  It
normalises the query (:mod:`exact.query.normalize`), takes the stream's columns (:class:`~exact.prefilter.
EventFrame`, ``BETWEEN`` applied) and evaluates every variable's properties vectorised: only events some
variable can bind take part (Cadonna's filtered windows, Thm. 5.1).  Then:

1. **Nothing to read.** A positive variable none of whose types occur in the stream (by the type counts the
   caller has, or the frame's own) means no match, before any window is looked at.
2. **Partitions as segments.** With partitioning attributes X (``PARTITION BY`` and the equality closure,
   Def. 5.3) every event gets a partition code once; windows never leave their first event's partition.
3. **Windows worth running.** The first events are pruned vectorised: the two-phase candidate conditions
   (Thm. 5.2) or the rarest-first necessary conditions (:mod:`exact.engine.prune`).
4. **Evaluation.** A skip-till-next-match chain (:mod:`exact.engine.chain`) runs for all windows at once (linear
   passes, or bisections); everything else runs in the compiled kernels of :mod:`exact.engine.kernels` over the
   automaton laid out as arrays (:mod:`exact.engine.program`), windows in stream order, in slices between which
   the budget's clock is read.  SASE+ run operands and aggregates (``v[1]``, ``v[last]``, ``count``,
   ``sum``/``avg``/``min``/``max``) are evaluated in the kernels, incrementally per run (the chain leaves such
   queries to them); when an integer sum leaves int64, or a literal does, the query is evaluated again by the
   same kernels as plain Python with Python's integers (:func:`exact.engine.kernels.python_kernels`) — exact, and slow.
5. **What is kept** follows ``RETURN``: ``exists`` stops at the first match, ``count`` only counts,
   ``intervals`` merges spans as they come, ``matches`` keeps the bindings of the first ``limit`` matches
   in answer order and stops once they are certain (the count is then unknown), ``cases`` keeps every
   match (each case's matches are counted, and a limit cuts cases, not matches).  An OR position bound to
   the same events under several alternatives is reported once, under the first alternative; SASE+
   negation (:mod:`exact.engine.negation`) drops the matches with a forbidden event in a negated gap.  Both need
   the bindings, so a query with either keeps them until they are applied.

Semantics decided here, where the sources leave a choice (tested in tests/exact/test_engine_*.py): stream order is
seq (consecutive SEQ positions need a strictly larger seq; ``ts`` must not decrease along seq); a condition
with a null or missing operand is false, values of different kinds are never equal; a condition on one
variable holds for each of its events (∀), between two variables for every pair, ``prev`` for consecutive
pairs; ``skip_till_next_match`` is the SES automaton (Alg. 2, corrected), with no ignore-proceed
nondeterminism (on ``a1 b1 c1 c2`` the pattern ``SEQ(A, B+, C)`` gives one match); contiguity is over the
events passed (after ``BETWEEN``); ``partition_contiguity`` without ``PARTITION BY`` is strict contiguity;
events whose partition attribute is null belong to no partition.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa

import exact.engine.kernels as K
from exact.engine.automaton import automaton_for
from exact.engine.chain import ChainShape, Reach, branches, chain_rows, chain_shape, run_chains
from exact.engine.matchtable import (
    Match,
    MatchTable,
    answer,
    combined,
    iso_ts,
    iso_ts_many,
    match_ts,
    merge_intervals,
    merge_spans,
    ts_lookup,
)
from exact.engine.negation import negation_filter
from exact.engine.ordering import (
    contiguity,
    partition_codes,
    positions_by_variable,
    program_order,
    successor_links,
    successors,
    value_columns,
)
from exact.engine.parallel import query_threads, run_parts, split_windows
from exact.engine.program import automaton_tables, run_attributes, run_program
from exact.engine.prune import candidate_windows, necessary_starts
from exact.engine.slices import Budget, Slicing, exists_only, run_slices
from exact.errors import QueryLimitError
from exact.frame import EventFrame
from exact.prefilter import variable_bits
from exact.query.ast import Query, Return, Strategy, WithinEvents, WithinTime
from exact.query.normalize import Plan, normalize

__all__ = ["Budget", "Match", "MatchTable", "absent_types", "answer", "evaluate", "evaluate_table", "iso_ts",
           "iso_ts_many", "match_ts", "merge_intervals", "merge_spans", "ts_lookup"]

#: Positive variables are bits of a 63-bit mask.
MAX_VARIABLES = 62
_I64 = np.int64


def evaluate(query: Query, events: pa.Table | Iterable[pa.RecordBatch] | EventFrame, *,
             two_phase: bool = True, prefilter: bool = True, type_counts: Mapping[str, int] | None = None,
             starts: tuple[int, int] | None = None, budget: Budget | None = None) -> list[Match]:
    """All matches of ``query`` in ``events`` under its strategy, sorted (answer order), as values.

    ``two_phase`` prunes first events by the candidate windows of Algorithm 3, otherwise by the rarest-first
    necessary conditions; ``prefilter=False`` prunes none; ``type_counts`` (type → count in the stream)
    orders the pruning rarest first; ``starts=(lo, hi)`` reports only matches whose first event's seq lies
    in [lo, hi] — the events passed may reach further, so the strategy sees everything it needs.  The
    results do not depend on ``two_phase``, ``prefilter`` or ``type_counts``."""
    found = evaluate_table(query, events, two_phase=two_phase, prefilter=prefilter, type_counts=type_counts,
                           starts=starts, returns=Return.MATCHES, budget=budget)
    return found.matches()


def evaluate_table(query: Query, events: pa.Table | Iterable[pa.RecordBatch] | EventFrame, *,
                   returns: Return | None = None, limit: int | None = None, budget: Budget | None = None,
                   two_phase: bool = True, prefilter: bool = True,
                   type_counts: Mapping[str, int] | None = None,
                   starts: tuple[int, int] | None = None, chains: bool = True, spans: bool = True) -> MatchTable:
    """The matches of ``query`` in ``events`` as a :class:`MatchTable`, keeping what ``returns`` (default:
    the query's ``RETURN``) needs — see the module docstring; ``limit`` caps the matches kept.
    ``chains=False`` runs every pattern in the kernels (the tests hold both ways to the reference);
    ``spans=False``: the matches' merged spans are not wanted (an answer as columns carries none), so the
    chains leave them out (``spans`` None)."""
    plan = normalize(query)
    if plan.nvars > MAX_VARIABLES:
        raise QueryLimitError(f"a pattern may have at most {MAX_VARIABLES} positive variables")
    names = tuple(v.name for v in plan.positives)
    frame = (events.restrict(query.between) if isinstance(events, EventFrame)
             else EventFrame.build(events, query.between))
    if len(frame) == 0 or plan.unsatisfiable or absent_types(plan, type_counts):
        return MatchTable(names)
    evaluation = _Evaluation(plan, frame, type_counts=type_counts, starts=starts, two_phase=two_phase,
                             prefilter=prefilter)
    evaluation.want_spans = spans
    returns = query.returns if returns is None else returns
    if returns == Return.CASES:  # every match's place is needed to count the cases' matches: a limit cuts cases
        limit = None
    return evaluation.run(returns, limit, budget or Budget(), chains)


def absent_types(plan: Plan, type_counts: Mapping[str, int] | None) -> bool:
    """Does some position need types that ``type_counts`` says the stream never holds (every alternative
    of it typed, and none of those types counted)?"""
    if type_counts is None:
        return False
    positions: dict[int, list[frozenset[str] | None]] = {}
    for v in plan.positives:
        positions.setdefault(v.group, []).append(v.types)
    return any(all(types is not None and not any(type_counts.get(t, 0) for t in types) for types in alts)
               for alts in positions.values())


class _Evaluation:
    """The state of one evaluation: the filtered events' columns, the automaton, the partitions."""

    def __init__(self, plan: Plan, frame: EventFrame, *, type_counts: Mapping[str, int] | None,
                 starts: tuple[int, int] | None, two_phase: bool, prefilter: bool) -> None:
        self.plan = plan
        self.query = plan.query
        self.frame = frame
        self.type_counts = type_counts
        self.starts = starts
        self.two_phase = two_phase
        self.want_spans = True  # (see evaluate_table)
        self.prefilter = prefilter
        self.aut = automaton_for(self.query)
        evmask, var_counts = variable_bits(frame, plan.positives, counts=type_counts is None)
        self.var_counts = var_counts or []
        self.contiguous = contiguity(self.query.strategy)
        # the contiguity strategies read every event (an unbindable one breaks a run); others the filtered
        self.idx = np.arange(len(frame)) if self.contiguous else np.flatnonzero(evmask)
        #: every event of the frame can bind (a read of the pattern's types only, often): no gathers
        self.every = len(self.idx) == len(frame)
        self.em = (evmask if self.every else evmask[self.idx]).astype(_I64)
        self.seq = frame.seq if self.every else frame.seq[self.idx]
        self.names = tuple(v.name for v in plan.positives)

    @functools.cached_property
    def ts(self) -> np.ndarray:
        """The filtered events' ts: asked only by a time window (a frame may decode them only then)."""
        return self.frame.ts if self.every else self.frame.ts_at(self.idx)

    # -- partitions ---------------------------------------------------------------------------------

    @functools.cached_property
    def keys(self) -> np.ndarray | None:
        """Partition code per filtered event (-1: in no partition), None without partitioning attributes."""
        if not self.plan.partition_attrs:
            return None
        codes = self.partition_codes(self.plan.partition_attrs)
        return codes if self.every else codes[self.idx]

    def partition_codes(self, attrs: tuple[str, ...]) -> np.ndarray:
        """An int64 code per frame event for the tuple of ``attrs`` values (-1 when one is null)."""
        return partition_codes(self.frame, attrs)

    @functools.cached_property
    def ends(self) -> np.ndarray:
        """Per filtered event that may start a window (its first element's), the last position of that
        window (stream order); 0 elsewhere — no window starts there, and most events are not first ones."""
        out = np.zeros(len(self.idx), dtype=_I64)
        firsts = np.flatnonzero((self.em & self.aut.first_element_mask) != 0)
        out[firsts] = self.reach.last(firsts, len(self.idx), query_threads())
        return out

    @functools.cached_property
    def reach(self) -> Reach:
        """How far a window reaches from its first event."""
        w = self.query.within
        if isinstance(w, WithinTime):
            return Reach(self.ts, w.micros)
        if isinstance(w, WithinEvents):
            return Reach(self.seq, w.count - 1)
        return Reach(None, 0)

    def _start_ok(self) -> np.ndarray:
        if self.starts is None:
            return np.ones(len(self.idx), dtype=bool)
        lo, hi = self.starts
        return (self.seq >= lo) & (self.seq <= hi)

    # -- driver -------------------------------------------------------------------------------------

    def run(self, returns: Return, limit: int | None, budget: Budget, chains: bool = True) -> MatchTable:
        dropped = frozenset(self.plan.partition_attrs)
        shape = None
        if chains and self.query.strategy == Strategy.SKIP_TILL_NEXT_MATCH:
            shape = chain_shape(self.plan, self.aut, dropped)
            if shape is not None and branches(shape, self.em):
                shape = None
        if shape is not None:
            # the chain decides every window exactly, in the time pruning them would take: no pruning
            firsts = np.flatnonzero(((self.em & self.aut.first_element_mask) != 0) & self._start_ok())
            return self._chains(shape, firsts, returns, limit) if len(firsts) else MatchTable(self.names)
        firsts = self._firsts()
        if not len(firsts):
            return MatchTable(self.names)
        if returns == Return.CASES:  # the kernels keep every match whole
            returns = Return.MATCHES
        return self._kernel(firsts, dropped, returns, limit, budget)

    def _firsts(self) -> np.ndarray:
        """The first events of the windows worth running, in stream order."""
        start_ok = self._start_ok()
        if self.contiguous or not self.prefilter:
            return np.flatnonzero(((self.em & self.aut.first_element_mask) != 0) & start_ok)
        if self.two_phase:
            return candidate_windows(self.aut, self.em, self.keys, self.ends, start_ok)
        firsts = np.flatnonzero(((self.em & self.aut.first_element_mask) != 0) & start_ok)
        keys = self.keys if self.keys is not None else np.zeros(len(self.idx), dtype=_I64)
        return necessary_starts(self.aut, self.em, keys, self.ends, firsts, self._rarity)

    def _rarity(self, members: tuple[int, ...]) -> float:
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

    @property
    def _post(self) -> bool:
        """Must matches be kept to be merged (OR) or filtered (NOT) before they are counted?"""
        return bool(self.plan.negatives) or any(len(m) > 1 for m in self.plan.group_members)

    # -- chains -------------------------------------------------------------------------------------

    def _chains(self, shape: ChainShape, firsts: np.ndarray, returns: Return, limit: int | None) -> MatchTable:
        counted = returns in (Return.COUNT, Return.EXISTS) and not self.plan.negatives
        chains = run_chains(shape, self.em, self.keys, self.reach, firsts, ordered=not counted,
                            threads=query_threads())
        m = len(chains.starts)
        if returns == Return.EXISTS and not self.plan.negatives:
            return exists_only(self.names) if m else MatchTable(self.names)
        start = self.seq[chains.starts]
        end = self.seq[chains.last]
        if self.plan.negatives:
            off, var, pos = chain_rows(shape, chains, self.em, np.arange(m))
            table = MatchTable(self.names, start, end, off, var, self.seq[pos], count=None,
                               rows_at=pos if self.every else self.idx[pos], rows_in=self.frame.seq)
            table = table.take(self.negation(table))
            table.count = len(table)
            table.spans = merge_spans(table.start, table.end)
            return self.cut(table, Return.MATCHES if returns == Return.CASES else returns, limit)
        table = MatchTable(self.names, start, end, count=m)
        if returns == Return.CASES:  # every match's first and last event, no bindings: one match per start
            table.spans, table.off = None, np.zeros(m + 1, dtype=_I64)
            return table
        wanted = returns == Return.INTERVALS or (returns == Return.MATCHES and self.want_spans)
        table.spans = merge_spans(start, end) if wanted else None
        if returns == Return.MATCHES:
            keep = np.arange(m if limit is None else min(m, limit))  # one match per start: sorted already
            off, var, pos = chain_rows(shape, chains, self.em, keep)
            table.start, table.end = start[keep], end[keep]
            table.off, table.var, table.seq = off, var, self.seq[pos]
            table.rows_at, table.rows_in = (pos if self.every else self.idx[pos]), self.frame.seq
        else:
            table.start, table.end = start[:0], end[:0]
        return table

    def cut(self, table: MatchTable, returns: Return, limit: int | None) -> MatchTable:
        """``table`` (complete) reduced to what ``returns`` keeps."""
        if returns != Return.MATCHES:
            out = MatchTable(self.names, count=table.count, spans=table.spans, complete=table.complete)
            out.start, out.end = table.start[:0], table.end[:0]
            return out
        if limit is not None and len(table) > limit:
            order = np.lexsort((table.end, table.start))
            cut = np.zeros(len(table), dtype=bool)
            cut[order[:limit]] = True
            # ties at the cut are kept whole: they are ordered by bindings later
            s, e = table.start[order], table.end[order]
            k = limit
            while k < len(order) and s[k] == s[limit - 1] and e[k] == e[limit - 1]:
                cut[order[k]] = True
                k += 1
            kept = table.take(cut)
            kept.count, kept.spans, kept.complete = table.count, table.spans, table.complete
            return kept
        return table

    def negation(self, table: MatchTable) -> np.ndarray:
        return negation_filter(self.plan, self.frame, table,
                               lambda: self.partition_codes(self.query.partition_by))

    # -- kernels ------------------------------------------------------------------------------------

    def _kernel(self, firsts: np.ndarray, dropped: frozenset[str], returns: Return, limit: int | None,
                budget: Budget) -> MatchTable:
        # the partition's conditions are made true by segments, which the contiguity strategies do not use
        segmented = self.keys is not None and not self.contiguous
        tables = automaton_tables(self.plan, dropped if segmented else frozenset())
        codes = (self.partition_codes(self.query.partition_by)
                 if self.query.strategy == Strategy.PARTITION_CONTIGUITY and self.query.partition_by else None)
        succ = (successor_links(self.em, self.seq, codes, self.frame.partition_next if codes is not None else None,
                                self.frame.sparse) if self.contiguous else None)
        order, wend, prog_starts = program_order(self.ends, firsts, None if self.contiguous else self.keys)
        em = self.em[order]
        seq = self.seq[order]
        runs = tables.runs
        strings = tuple(v for v in runs.literals if isinstance(v, str))
        kind, value, integer, ranks = value_columns(self.frame, tables.attrs, self.idx[order],
                                                    run_attributes(tables), strings)
        var_off, var_pos = (positions_by_variable(em, self.plan.nvars) if not self.contiguous
                            else (np.zeros(1, dtype=_I64), np.zeros(0, dtype=_I64)))
        events = K.Events(em, seq, wend, var_off, var_pos, np.zeros(0, dtype=_I64) if succ is None else succ, kind,
                          value, integer)
        rank_of = dict(zip(strings, ranks.tolist(), strict=True))
        program = run_program(runs, rank_of, python=False)
        found = (None if program is None
                 else self._windows(K.compiled(), events, tables.machine, program, prog_starts, returns, limit,
                                    budget))
        if found is None:
            # an integer beyond int64 (a literal, or a run's sum): the same kernels in plain Python, with
            # Python's integers in the run rows — exact, and slow
            plain = run_program(runs, rank_of, python=True)
            assert plain is not None  # (Python's integers hold every literal)
            found = self._windows(K.python_kernels(), events, tables.machine, plain, prog_starts, returns, limit,
                                  budget)
            assert found is not None  # (nor does a sum overflow them)
        return found

    def _windows(self, kernels: K.Kernels, events: K.Events, machine: K.Machine, program: K.RunProgram,
                 starts: np.ndarray, returns: Return, limit: int | None, budget: Budget) -> MatchTable | None:
        """Run ``kernels`` over the windows of ``starts``, slice by slice, reading the clock between slices;
        None when a run's integer sum overflowed int64 (``out[INEXACT]``: the caller runs them again in
        Python).  Windows that all run split over threads (:mod:`exact.engine.parallel`)."""
        post = self._post
        compiled = kernels is K.compiled()
        mode = {Return.EXISTS: K.EXISTS, Return.COUNT: K.COUNT, Return.INTERVALS: K.SPANS}.get(
            returns, K.MATCHES)
        keep = (1 << 62) if limit is None or post else limit
        if post:
            mode = K.MATCHES
        # RETURN matches under a limit stops once more than ``limit`` matches are found: windows run in the
        # stream order of their first events and a slice ends between windows, so every match still to come
        # starts later than those found, and the first ``limit`` in answer order are certain
        stop_after = limit if returns == Return.MATCHES and limit is not None else None
        if self.contiguous:
            kernel = kernels.contiguous
        else:
            kernel = {Strategy.SKIP_TILL_NEXT_MATCH: kernels.next_match,
                      Strategy.ROBUST_SKIP_TILL_NEXT_MATCH: kernels.robust_next_match,
                      Strategy.SKIP_TILL_ANY_MATCH: kernels.any_match}[self.query.strategy]
        how = Slicing(returns, limit, post, mode, keep, stop_after)
        # every window runs (nothing stops early), compiled, under an automaton strategy: the windows may split
        # over threads (a contiguity window follows one chain of successors: too little work to share)
        whole = stop_after is None and returns != Return.EXISTS and mode != K.EXISTS and not self.contiguous
        parts = split_windows(starts, events.window_end, query_threads() if whole and compiled else 1)
        try:
            if len(parts) == 1:
                return run_slices(self, kernel, events, machine, program, starts, how, budget)
            tables = run_parts(lambda part, cancel: run_slices(self, kernel, events, machine, program, part, how,
                                                               budget, cancel), parts)
            done = [t for t in tables if t is not None]
            return combined(self.names, done) if len(done) == len(tables) else None
        except QueryLimitError as err:
            if stop_after is None or self.query.strategy != Strategy.SKIP_TILL_ANY_MATCH:
                raise
            raise QueryLimitError(
                f"{err} — the first {limit} matches were not certain yet: under skip_till_any_match a window "
                "must be searched whole before its matches are ordered, and here one window's combinations "
                "outgrew the time", where=err.where) from err

    def merge_alternatives(self, table: MatchTable) -> MatchTable:
        """An OR position bound to the same events under several alternatives is one match, reported under
        the first alternative (pattern order) — docs/contract.md §2: bound by exactly one alternative."""
        ors = [m for m in set(self.plan.group_members) if len(m) > 1]
        if not ors or not len(table):
            return table
        group_of = {}
        for members in ors:
            for i in members:
                group_of[i] = members[0]
        rows_var, rows_seq, off = table.var.tolist(), table.seq.tolist(), table.off.tolist()
        best: dict[tuple[tuple[int, int], ...], tuple[tuple[int, ...], int]] = {}
        for j in range(len(table)):
            key_rows = []
            rank = []
            for r in range(off[j], off[j + 1]):
                v = rows_var[r]
                g = group_of.get(v, v)
                key_rows.append((g, rows_seq[r]))
                if v in group_of:
                    rank.append((g, v))
            key = tuple(sorted(key_rows))
            alternatives = tuple(v for _, v in sorted(set(rank)))
            if key not in best or alternatives < best[key][0]:
                best[key] = (alternatives, j)
        keep = np.zeros(len(table), dtype=bool)
        keep[[j for _, j in best.values()]] = True
        out = table.take(keep)
        out.count = len(out)
        return out


def warm_up() -> float:
    """Compile (or load from numba's on-disk cache) every kernel, on a tiny stream through the real path
    under each strategy; returns the seconds it took.  A server does this as it starts and ``./dev setup``
    once, so no user's query waits for a compilation."""
    started = time.perf_counter()
    from exact.query.ast import Single, Var, WithinEvents

    table = pa.table({"seq": pa.array([0, 1, 2, 3], pa.int64()),
                      "ts": pa.array([0, 1, 2, 3], pa.timestamp("us", tz="UTC")),
                      "type": pa.array(["A", "B", "A", "B"])})
    pattern = (Single(Var("a", "A", True)), Single(Var("b", "B")))
    for strategy in Strategy:
        for returns in (Return.MATCHES, Return.COUNT, Return.EXISTS):
            query = Query(pattern, within=WithinEvents(4), strategy=strategy, returns=returns)
            evaluate_table(query, table, chains=False)
    plain = (Single(Var("a", "A")), Single(Var("b", "B")))  # (skip-till-next-match's linear chain passes)
    evaluate_table(Query(plain, within=WithinEvents(4), strategy=Strategy.SKIP_TILL_NEXT_MATCH), table)
    successors(np.zeros(2, dtype=_I64), 2)  # (partition contiguity's links)
    return time.perf_counter() - started
