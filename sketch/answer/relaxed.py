"""The search of an empty answer's explain (:mod:`sketch.answer.cause`): relaxed queries run on what
verification read, within one time budget.

A relaxed query runs on the events verification handed the engine (:class:`Read`) — or, when it drops a
condition the read's row filter tested, on the same candidates read again with its own filter (once per
filter): the events that fail the dropped condition are the ones it needs.  The budget is a fraction of what
verification took (:func:`search_budget`), so an explain costs little beside its answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from exact.engine import Budget, MatchTable, evaluate_table, match_ts
from exact.errors import QueryLimitError, SeqsketchError
from exact.frame import EventFrame
from exact.query.ast import Query, Return, WithinEvents
from exact.query.normalize import Plan, normalize
from exact.store.rowfilter import RowFilter, row_filter
from sketch.evaluate.chains import is_contiguous

#: The relaxations' shared time budget (ms) is at most this, …
EXPLAIN_MS = 300
#: … and at least this long, however fast verification was (a millisecond: the search is bounded by what the
#: answer cost, not by a fixed allowance that would make a fast empty answer several times slower), …
EXPLAIN_FLOOR_MS = 1
#: … but otherwise no longer than this many times what verification took: an explain is a hint beside the
#: answer that was asked for, and costs a fraction of it.
EXPLAIN_FACTOR = 0.25
_FIRST_WINDOW_STEPS = 10_000
#: the engine's work between looks at the clock in a search (a few milliseconds at most)
_SLICE_STEPS = 2_000

_I64 = np.int64


@dataclass(frozen=True)
class Read:
    """The events verification handed to the exact engine: pieces of ``(events, starts)`` (``starts``: the
    seq range of the first events it reported matches for, None for all), and the event types they were
    read for (None: every type)."""

    pieces: tuple[tuple[EventFrame | pa.Table, tuple[int, int] | None], ...]
    types: frozenset[str] | None
    #: the same events without the row filter the read had (:mod:`exact.store.rowfilter`), read again when
    #: asked: relaxing a variable's condition needs the events that fail it (None: the read had no filter)
    unfiltered: Callable[[], Read] | None = None
    #: at most how many events that read again holds (the rows the filtered read looked at)
    unfiltered_events: int = 0
    #: the row filter the read had, and the same candidates read again with another one (a relaxed query's:
    #: dropping a condition on attributes alone needs only the events that fail that one)
    keep: RowFilter | None = None
    reread: Callable[[RowFilter | None], Read] | None = None
    #: the read's seqs are stream positions (a store's: see :func:`exact.store.rowfilter.row_filter`)
    positional: bool = True
    #: how long the read took (ms): about what reading the candidates again costs
    read_ms: float = 0.0

    @property
    def events(self) -> int:
        return sum(len(events) for events, _ in self.pieces)


@dataclass(frozen=True)
class Found:
    count: int
    shortest: int | None = None  # the shortest match's span (µs, or events for WITHIN n EVENTS)


class TimedOut(Exception):
    pass


def search_budget(budget: Budget | None, spent_ms: float | None) -> Budget:
    """The search's own budget: :data:`EXPLAIN_FACTOR` times what verification took, at least
    :data:`EXPLAIN_FLOOR_MS` and at most :data:`EXPLAIN_MS` (or the
    query's own, when it ends sooner);
    relaxed queries whose windows outgrow it are given up early (they only serve a hint)."""
    ms = EXPLAIN_MS if spent_ms is None else min(EXPLAIN_MS, max(EXPLAIN_FLOOR_MS, EXPLAIN_FACTOR * spent_ms))
    deadline = time.monotonic() + ms / 1000.0
    if budget is not None and budget.deadline is not None and budget.deadline < deadline:
        deadline = budget.deadline
    return Budget(deadline, int(ms), window_steps=_FIRST_WINDOW_STEPS, stop_early=True, slice_steps=_SLICE_STEPS)


class Search:
    """Runs relaxed queries on what verification read, within one budget."""

    def __init__(self, query: Query, read: Read, spans: np.ndarray | None,
                 type_counts: Mapping[str, int] | None, budget: Budget, max_events: int,
                 run_s: float = 0.0) -> None:
        self.query = query
        #: the longest a relaxed query's run has taken (s): one that would end past the deadline at that pace is
        #: not begun (the engine reads the clock between its slices, but a run's setup and its answer take their
        #: time all the same); at first, what the query's own run took, as a relaxed one over the same events
        #: takes about as long
        self.run_s = run_s
        self.read = read
        self.spans = spans
        self.type_counts = type_counts
        self.budget = budget
        self.max_events = max_events  # (the most events the candidates without the row filter may hold)
        self._types = _positive_types(normalize(query))
        self._counted: dict[Query, Found | None] = {}  # relaxed query → its full count, once searched
        self._reads: dict[RowFilter | None, Read] = {read.keep: read}

    def unfiltered(self, read_more: bool = True) -> Read:
        """The candidates without the row filter (which tell the counts of the events a position's
        conditions rule out), when they were read or — ``read_more`` — can be within the limits; else the
        read."""
        if None in self._reads:
            return self._reads[None]
        if (not read_more or self.read.reread is None or self.read.unfiltered_events > self.max_events
                or self.budget.deadline is not None and time.monotonic() > self.budget.deadline):
            return self.read
        self._reads[None] = self.read.reread(None)
        return self._reads[None]

    def read_for(self, relaxed: Query) -> Read:
        """The events to search ``relaxed`` in: those read, or — when its row filter keeps rows the read's
        did not — the candidates read again with its filter (once per filter)."""
        if self.read.reread is None:
            return self.read
        keep = row_filter(normalize(relaxed), positional=self.read.positional)
        if keep not in self._reads:
            if self.budget.deadline is not None and (
                    time.monotonic() + self.read.read_ms / 1000.0 > self.budget.deadline):
                raise TimedOut  # (a read cannot be stopped half-way: one that would overrun is not begun)
            self._reads[keep] = self.read.reread(keep)
        return self._reads[keep]

    def same_candidates(self, relaxed: Query) -> bool:
        """Would ``relaxed`` have the query's candidates?  Always on the partition path (whole groups); on
        the stream path when the tree sees nothing new: the positions' types, the window, contiguity."""
        if self.spans is None:
            return True
        q = self.query
        return (relaxed.within == q.within and is_contiguous(relaxed) == is_contiguous(q)
                and _positive_types(normalize(relaxed)) == self._types)

    def run(self, relaxed: Query, *, shortest: bool = False, exists: bool = False) -> Found | None:
        """The matches of ``relaxed`` in the candidates: how many (1 at most with ``exists``), and with
        ``shortest`` the shortest one's span; None when the engine refuses the relaxed query.  A query
        already counted is not searched again (dropping every part tried is often one of the parts)."""
        if relaxed in self._counted and not shortest:
            known = self._counted[relaxed]
            return known if known is None or not exists else Found(min(known.count, 1))
        found = self._search(relaxed, shortest=shortest, exists=exists)
        if not shortest and not exists:
            self._counted[relaxed] = found
        return found

    def _search(self, relaxed: Query, *, shortest: bool, exists: bool) -> Found | None:
        began = time.monotonic()
        if self.budget.deadline is not None and began + self.run_s > self.budget.deadline:
            raise TimedOut
        try:
            return self._run_on_read(relaxed, shortest=shortest, exists=exists)
        finally:
            self.run_s = max(self.run_s, time.monotonic() - began)

    def _run_on_read(self, relaxed: Query, *, shortest: bool, exists: bool) -> Found | None:
        inside = self.same_candidates(relaxed)
        keep_all = inside and not shortest
        returns = (Return.EXISTS if exists else Return.COUNT) if keep_all else Return.MATCHES
        count = 0
        widths: list[np.ndarray] = []
        for events, starts in self.read_for(relaxed).pieces:
            if self.budget.deadline is not None and time.monotonic() > self.budget.deadline:
                raise TimedOut  # (the engine reads the clock in its windows, not while it filters)
            try:
                found = evaluate_table(relaxed, events, returns=returns, budget=self.budget,
                                       type_counts=self.type_counts, starts=starts)
            except QueryLimitError as exc:
                if self.budget.deadline is not None and time.monotonic() > self.budget.deadline:
                    raise TimedOut from exc
                return None  # a limit of the engine's own (too many variables): nothing to judge
            except SeqsketchError:
                return None
            if keep_all:
                count += 1 if found.found_one else int(found.count or 0)
            else:
                keep = _inside(found, None if inside else self.spans)
                count += int(keep.sum())
                if shortest and keep.any():
                    widths.append(_widths(self.query, events, found, keep))
            if exists and count:
                break
        least = int(np.concatenate(widths).min()) if widths else None
        return Found(count, least)


def _positive_types(plan: Plan) -> tuple[tuple[int, frozenset[str] | None], ...]:
    return tuple((v.group, v.types) for v in plan.positives)


def _inside(found: MatchTable, spans: np.ndarray | None) -> np.ndarray:
    """Which matches lie inside one of ``spans`` (all when None)."""
    if spans is None or not len(found.start):
        return np.ones(len(found.start), dtype=bool)
    if not len(spans):  # (an anchored read with no anchor: nothing was read)
        return np.zeros(len(found.start), dtype=bool)
    at = np.searchsorted(spans[:, 0], found.start, "right") - 1
    inside: NDArray[np.bool_] = (at >= 0) & (found.end <= spans[np.maximum(at, 0), 1])
    return inside


def _widths(query: Query, events: EventFrame | pa.Table, found: MatchTable, keep: np.ndarray) -> np.ndarray:
    """The spans of the kept matches: last ts − first ts (µs), or events from first to last for a window
    counted in events."""
    start, end = found.start[keep], found.end[keep]
    if isinstance(query.within, WithinEvents):
        events_from_first: NDArray[np.int64] = (end - start + 1).astype(_I64)
        return events_from_first
    ts = match_ts(events, found)
    return np.asarray([ts[b] - ts[a] for a, b in zip(start.tolist(), end.tolist(), strict=True)], dtype=_I64)
