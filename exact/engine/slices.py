"""The kernels' calls over a query's windows, slice by slice (:meth:`exact.engine.driver._Evaluation._windows`).

Each call runs the windows from where the last one stopped until its work passes ``SLICE_STEPS``; between
calls the clock is read (the query's time limit), a part of several looks whether another part failed
(:mod:`exact.engine.parallel`), the matches the kernels kept are taken out (and filtered: OR alternatives,
negation), and a window whose own work outgrew its bound is run again with more.  ``RETURN exists`` stops at
the first match and ``RETURN matches`` under a limit once more than ``limit`` are found.  :class:`Budget` is
a query's limits as the slices keep them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

import exact.engine.kernels as K
from exact.engine.matchtable import MatchTable, merge_spans
from exact.engine.parallel import Cancelled
from exact.errors import QueryLimitError
from exact.query.ast import Return

if TYPE_CHECKING:
    from exact.query.normalize import Plan

_I64 = np.int64
#: Kernel work between two looks at the clock, and the first bound on one window's work (a window over it is
#: run again with more).
SLICE_STEPS = 50_000
WINDOW_STEPS = 200_000


@dataclass(frozen=True)
class Budget:
    """A query's limits: the monotonic time it must be answered by (None: no limit).

    ``window_steps`` is the first bound on one window's work (a window past it is run again with four
    times the bound, after a look at the clock); ``stop_early`` gives up as soon as that next run, at the
    pace of the last, would end past the deadline — for searches whose answer is only a hint (explain),
    not for a query's own answer, which runs until its deadline.  ``slice_steps`` is the work between two
    looks at the clock (a search with a budget of a few milliseconds looks more often)."""

    deadline: float | None = None
    timeout_ms: int | None = None
    window_steps: int = WINDOW_STEPS
    stop_early: bool = False
    slice_steps: int | None = None  # (None: SLICE_STEPS)

    @classmethod
    def of_ms(cls, timeout_ms: int | None) -> Budget:
        if not timeout_ms:
            return cls()
        return cls(time.monotonic() + timeout_ms / 1000.0, timeout_ms)

    def check(self, ahead: float = 0.0) -> None:
        """Raise :class:`QueryLimitError` when the deadline has passed (or will have, ``ahead`` seconds
        from now)."""
        if self.deadline is not None and time.monotonic() + ahead > self.deadline:
            raise QueryLimitError(f"the query took longer than the limit of {self.timeout_ms} ms; narrow it "
                                  "(WITHIN, BETWEEN, PARTITION BY) or use mode 'approximate'")


class Evaluation(Protocol):
    """What the slices ask of the evaluation they run for (:class:`exact.engine.driver._Evaluation`)."""

    names: tuple[str, ...]
    plan: Plan

    def merge_alternatives(self, table: MatchTable) -> MatchTable: ...

    def negation(self, table: MatchTable) -> np.ndarray: ...

    def cut(self, table: MatchTable, returns: Return, limit: int | None) -> MatchTable: ...


class Slicing(NamedTuple):
    """How the windows' kernel calls run and what they keep."""

    returns: Return
    limit: int | None
    post: bool  # matches filtered after the kernels (OR alternatives, negation): every one kept
    mode: int  # the kernels' RETURN code
    keep: int  # matches the kernels keep
    stop_after: int | None  # RETURN matches under a limit: stop once more than this many are found


def run_slices(ev: Evaluation, kernel: Callable[..., K.Arrays], events: K.Events, machine: K.Machine,
               program: K.RunProgram, starts: np.ndarray, how: Slicing, budget: Budget,
               cancel: threading.Event | None = None) -> MatchTable | None:
    """``kernel`` over the windows of ``starts`` (of the evaluation ``ev``), slice by slice (see the module
    docstring); None when a run's integer sum overflowed int64 (``out[INEXACT]``: the caller runs them again
    in Python).  ``cancel``: this is a part of several, which stops (:class:`~exact.engine.parallel.Cancelled`)
    once another part failed."""
    returns, limit, post, mode, keep, stop_after = how
    found = K.Found(np.zeros(K.OUT_FIELDS, dtype=_I64), np.zeros((16, 2), dtype=_I64),
                    np.zeros(16, dtype=_I64), np.zeros(17, dtype=_I64), np.zeros(16, dtype=_I64),
                    np.zeros(16, dtype=_I64))
    out = found.out
    abort = budget.window_steps
    first = 0
    chunks: list[MatchTable] = []
    done_kept = 0
    kept_after_post = 0
    stopped = False
    retried = False  # the last call aborted the window it is to start from
    while first < len(starts):
        budget.check()
        if cancel is not None and cancel.is_set():
            raise Cancelled
        called = time.monotonic()
        window = K.Windows(starts, first, mode, keep, budget.slice_steps or SLICE_STEPS, abort)
        found = K.Found(*kernel(events, machine, program, window, found))
        if out[K.INEXACT]:
            return None
        if out[K.ABORTED]:
            # one window's work outgrew the bound: the windows before it in this call are done (the
            # kernel undid the aborted one only), so go on from it; read the clock, then give it more —
            # four times as much, but, once a call held that window alone (its pace is then the
            # window's own), no more than that pace fits before the deadline: a window that needs more
            # cannot finish in time, and the query stops there instead of overrunning it
            aborted = int(out[K.NEXT])
            alone = aborted == first and retried
            first, retried = aborted, True
            spent = max(time.monotonic() - called, 1e-6)
            if budget.stop_early:
                budget.check(ahead=4 * spent)
            if budget.deadline is not None and alone:
                fits = int(abort * (budget.deadline - time.monotonic()) / spent)
                if fits <= abort:
                    budget.check(ahead=float("inf"))
                abort = min(abort * 4, fits)
            else:
                abort *= 4
            continue
        retried = False
        first = int(out[K.NEXT])
        if post:
            chunk = kept(ev.names, found, events.seq, done_kept)
            done_kept = int(out[K.KEPT])
            chunk = ev.merge_alternatives(chunk)
            chunk = chunk.take(ev.negation(chunk)) if ev.plan.negatives else chunk
            if len(chunk):
                chunks.append(chunk)
                kept_after_post += len(chunk)
            if returns == Return.EXISTS and kept_after_post:
                break
        elif mode == K.EXISTS and out[K.FOUND]:
            break
        if stop_after is not None and first < len(starts) and (
                kept_after_post if post else int(out[K.FOUND])) > stop_after:
            stopped = True
            break
    if post:
        table = concat(ev.names, chunks)
        if returns == Return.EXISTS and len(table):
            return exists_only(ev.names)
        table.count = None if stopped else len(table)
        table.spans = None if stopped else merge_spans(table.start, table.end)
        table.complete = not stopped
        return ev.cut(table, returns, limit)
    if mode == K.EXISTS:
        return exists_only(ev.names) if out[K.FOUND] else MatchTable(ev.names)
    table = kept(ev.names, found, events.seq, 0) if mode == K.MATCHES else MatchTable(ev.names)
    table.count = None if stopped else int(out[K.FOUND])
    iv = found.intervals[:int(out[K.INTERVALS])]
    # (windows of different partitions interleave in the stream: their spans are merged once more)
    table.spans = merge_spans(iv[:, 0], iv[:, 1]) if mode in (K.SPANS, K.MATCHES) and not stopped else None
    table.complete = not stopped
    return ev.cut(table, returns, limit) if mode == K.MATCHES else table


def kept(names: tuple[str, ...], found: K.Found, seq: np.ndarray, since: int) -> MatchTable:
    """The matches the kernels kept from number ``since`` on, as a table (seqs, rows in stream order)."""
    m = int(found.out[K.KEPT])
    off = found.m_off[since:m + 1] - found.m_off[since]
    rows = slice(int(found.m_off[since]), int(found.m_off[m]))
    pos = found.b_pos[rows]
    start = seq[found.m_start[since:m]]
    end = seq[pos[off[1:] - 1]] if m > since else start
    return MatchTable(names, start, end, off.astype(_I64), found.b_var[rows].copy(), seq[pos],
                      count=m - since)


def exists_only(names: tuple[str, ...]) -> MatchTable:
    """The answer to ``RETURN exists`` once a match is found: yes, the count unknown (the search stopped)."""
    return MatchTable(names, count=None, spans=None, complete=False, found_one=True)


def concat(names: tuple[str, ...], tables: Sequence[MatchTable]) -> MatchTable:
    if not tables:
        return MatchTable(names)
    offs, base = [], 0
    for t in tables:
        offs.append(t.off[:-1] + base)
        base += int(t.off[-1])
    off = np.concatenate(offs + [np.asarray([base], dtype=_I64)])
    return MatchTable(names, np.concatenate([t.start for t in tables]),
                      np.concatenate([t.end for t in tables]), off,
                      np.concatenate([t.var for t in tables]), np.concatenate([t.seq for t in tables]),
                      count=sum(len(t) for t in tables))
