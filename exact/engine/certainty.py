"""When a match is certain: the moment from which nothing still to come can change or remove it.

A standing query delivers each match at that moment (docs/semantics.md §5.5, where the argument is written
out per strategy and pattern shape).  Events arrive in ``ts`` order and are numbered in arrival order, so
what is still to come lies after the last stored event, and from a watermark ``W`` on, after ``W`` in time.

Two moments are possible for a match with first event ``s`` and last positive event ``e``:

* **its last event** — when ``e`` is stored, wherever the strategy's definition makes the match a function of
  the events up to ``e``: every match under ``skip_till_any_match`` and the contiguity strategies;
  under ``skip_till_next_match`` when the last element has no Kleene variable (Def. 6.1 looks only at the
  events before the match's next event; the maximality rule of A3 only at a trailing run); under
  ``robust_skip_till_next_match`` when greedy evaluation also chooses it (Thm. 6.1: every
  skip-till-next match is a robust one, and that choice is already final);
* **its window's close** — when no later event can fall into the window of ``s`` any more: a trailing
  ``NOT`` (its gap runs to the window's end), a trailing Kleene run under the next-match strategies (it may
  still grow, and the conditions on the finished run are decided only then), and a robust match found only
  by backtracking (Def. 6.2 lets a *complete* match of Γ disqualify it, and that match may end later).

A moment is a :class:`Moment` ``(seq, after)``: ``after`` is None for "when event ``seq`` was stored", else
an event time ``D`` (UTC µs) passed between event ``seq`` and the next one.  A time window ``WITHIN d`` of
``s`` closes when event time passes ``D = ts(s) + d``: at ``(g, D)`` with ``g`` the last event whose ts is at
most ``D`` — whether the next event or a watermark at or past ``D`` said so, it happened after ``g`` and
before ``g + 1``.  A window of ``n`` events closes when event ``s + n − 1`` is stored.  Moments are a pure
function of the stream, so a cursor that names one means the same after a restart, and they order the way
they happen: events by seq, and between two events, by event time.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from exact.query.ast import Absent, AnyOf, Element, Query, Strategy, WithinEvents, WithinTime

_I64 = np.int64
#: ``after`` of a moment that is an event's own (it orders before every event time passed after it)
AT_EVENT = np.iinfo(np.int64).min


@functools.total_ordering
@dataclass(frozen=True)
class Moment:
    """A point in a stream's time: event ``seq`` stored (``after`` None), or event time passing ``after``
    (UTC µs) after event ``seq`` and before the next one."""

    seq: int
    after: int | None = None

    def key(self) -> tuple[int, int]:
        return self.seq, AT_EVENT if self.after is None else self.after

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Moment):
            return NotImplemented
        return self.key() < other.key()


class Certain(str, Enum):
    """Which of the two moments a query's matches become certain at (see the module docstring)."""

    #: every match at its last event
    AT_LAST_EVENT = "last_event"
    #: every match at its window's close
    AT_WINDOW_CLOSE = "window_close"
    #: a match greedy evaluation also chooses at its last event, any other at its window's close
    GREEDY_AT_LAST_EVENT = "greedy_last_event"


def _has_kleene(element: Element) -> bool:
    return any(v.kleene for v in element.vars)


def certainty(query: Query) -> Certain:
    """When the matches of ``query`` are certain, from its strategy and the shape of its pattern."""
    if isinstance(query.pattern[-1], Absent):
        return Certain.AT_WINDOW_CLOSE  # a trailing NOT: its gap runs to the window's end
    strategy = query.strategy
    if strategy in (Strategy.SKIP_TILL_ANY_MATCH, Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY):
        return Certain.AT_LAST_EVENT  # a match is a function of its own events (and those between them)
    last = query.positive_elements()[-1]
    if _has_kleene(last):
        return Certain.AT_WINDOW_CLOSE  # a trailing run grows as long as the window lasts (A3)
    if strategy is Strategy.SKIP_TILL_NEXT_MATCH:
        return Certain.AT_LAST_EVENT
    if any(isinstance(e, AnyOf) for e in query.pattern):
        # an OR position bound by several alternatives is reported under the first one chosen; a later event
        # may have robust choose a binding under an earlier alternative, which renames the greedy match
        return Certain.AT_WINDOW_CLOSE
    return Certain.GREEDY_AT_LAST_EVENT


def greedy_query(query: Query) -> Query:
    """The query whose matches are the robust ones certain at their last event (GREEDY_AT_LAST_EVENT)."""
    return dataclasses.replace(query, strategy=Strategy.SKIP_TILL_NEXT_MATCH)


def why(query: Query) -> str:
    """In a sentence, when ``query``'s matches are delivered by a standing query."""
    rule = certainty(query)
    if rule is Certain.AT_LAST_EVENT:
        return "each match when its last event is stored: no later event can change it"
    if rule is Certain.GREEDY_AT_LAST_EVENT:
        return ("a match greedy evaluation also chooses when its last event is stored; one robust evaluation "
                "finds only by backtracking when its window closes (a later match could disqualify it)")
    if isinstance(query.pattern[-1], Absent):
        return "each match when its window closes: a forbidden event may still come in its trailing gap"
    if any(isinstance(e, AnyOf) for e in query.pattern) and query.strategy is Strategy.ROBUST_SKIP_TILL_NEXT_MATCH \
            and not _has_kleene(query.positive_elements()[-1]):
        return "each match when its window closes: under OR, a later event may rename a robust match"
    return "each match when its window closes: its trailing Kleene run may still grow"


def moments(query: Query, start: np.ndarray, end: np.ndarray, at_last: np.ndarray,
            ts_of_start: Callable[[np.ndarray], np.ndarray],
            last_at_or_before: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each match's moment as two columns ``(seq, after)`` (``after`` :data:`AT_EVENT` for an event's own).

    ``start``/``end`` are the matches' first and last seqs, ``at_last`` says which are certain at their last
    event (the others at their window's close); ``ts_of_start(seqs)`` gives first events' ts and
    ``last_at_or_before(times)`` the last seq whose ts is at most each time (-1: none), over every stored
    event — asked only for windows that have closed in the store."""
    seq = np.where(at_last, end, 0).astype(_I64)
    after = np.full(len(start), AT_EVENT, dtype=_I64)
    closing = np.flatnonzero(~at_last)
    if not len(closing):
        return seq, after
    within = query.within
    if isinstance(within, WithinEvents):
        seq[closing] = start[closing] + within.count - 1
        return seq, after
    assert isinstance(within, WithinTime)
    deadline = ts_of_start(start[closing]) + within.micros
    seq[closing] = last_at_or_before(deadline)
    after[closing] = deadline
    return seq, after


def window_closed(query: Query, start: np.ndarray, start_ts: np.ndarray, events: int, last_ts: int | None,
                  event_time: int | None) -> np.ndarray:
    """Whether the window of each first event (seq ``start``, ts ``start_ts``) has closed once ``events``
    events are stored, the last at ``last_ts``, and event time is known to have reached ``event_time``."""
    within = query.within
    if isinstance(within, WithinEvents):
        return start + within.count - 1 <= events - 1
    assert isinstance(within, WithinTime)
    deadline = start_ts + within.micros
    closed = deadline < last_ts if last_ts is not None else np.zeros(len(start), dtype=bool)
    if event_time is not None:
        closed = closed | (deadline <= event_time)
    return np.asarray(closed, dtype=bool)
