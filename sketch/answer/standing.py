"""Standing queries: a query's matches delivered once each, in the order they become certain.

A match is **certain** at a :class:`~exact.engine.certainty.Moment` the engine names
(:mod:`exact.engine.certainty`; docs/semantics.md §5.5): when its last event is stored, for most shapes, or
when its window closes — by a later event, or by a watermark (the writer's word that event time has reached a
time) — for a trailing ``NOT``, a trailing Kleene run under the next-match strategies, and a robust match
found only by backtracking.  Moments are a function of the stream alone, so they are the same in every
process and after a restart.

Matches are delivered by moment, and among one moment's matches in answer order; a :class:`Cursor` ``@q:k``
(``@q~D:k`` for a moment between two events) says "every match certain before that moment, and the first
``k`` of those certain at it, were delivered".  Resuming from a cursor gives the rest, none twice and none
lost: the matches certain at a moment never change once it has passed.  A standing query needs ``WITHIN``.

The history and the live stream are one walk: the first events whose windows can still hold a match
certain after the cursor, in chunks, each evaluated by the exact engine over the events its windows can
reach in the snapshot.  On the stored prefix, a match certain at its last event is already what it will be
on the whole stream, and a closed window has all its events, so the matches certain now are exactly those
the prefix shows.  A partitioned query reads only the partitions that can hold a match certain after the
cursor: those with an event since it, or with a window that closed since it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from exact.arrays import distinct_ints
from exact.engine import answer, evaluate_table
from exact.engine.certainty import AT_EVENT, Certain, Moment, certainty, greedy_query, moments, window_closed
from exact.engine.matchtable import match_times
from exact.engine.ordering import partition_codes
from exact.errors import QuerySemanticError
from exact.frame import EventFrame
from exact.query.ast import Query, Return, Strategy, WithinEvents, WithinTime
from exact.query.language import to_json
from exact.query.normalize import normalize
from exact.store import EventStore, Snapshot
from sketch.answer.cases import case_lookup
from sketch.answer.event_sources import StoreSource, TableSource, needed_columns, read_types

#: first events evaluated together (the read is this many events plus the window's reach)
CHUNK = 1 << 16

_DIGITS = r"[0-9]{1,19}"
_CURSOR = re.compile(rf"@({_DIGITS})(?:~(-?{_DIGITS}))?:({_DIGITS})(?:/({_DIGITS}):({_DIGITS}))?", re.ASCII)
#: the form cursors had before moments: FIRST_SEQ:DELIVERED (matches were delivered by first event)
_FIRST_EVENT_CURSOR = re.compile(rf"({_DIGITS}):({_DIGITS})", re.ASCII)
_I64 = np.int64


@dataclass(frozen=True)
class Cursor:
    """A position in a standing query's deliveries (see the module docstring).

    ``floor`` is a cursor of the form before moments, ``(first_seq, delivered)``: every match whose first
    event is before ``first_seq``, and the first ``delivered`` of those starting at it, were delivered.  A
    watch made before moments resumes with it until every match it covers is behind the moment."""

    moment: Moment
    skip: int = 0
    floor: tuple[int, int] | None = None

    def text(self) -> str:
        at = f"@{self.moment.seq}" + ("" if self.moment.after is None else f"~{self.moment.after}")
        return f"{at}:{self.skip}" + ("" if self.floor is None else f"/{self.floor[0]}:{self.floor[1]}")

    def order(self) -> tuple[tuple[int, int], int]:
        """Cursors in delivery order (a match's cursor is the one just after it)."""
        return self.moment.key(), self.skip

    @classmethod
    def parse(cls, text: str, where: str = "cursor") -> Cursor:
        raw = text.strip() if isinstance(text, str) else ""
        found = _CURSOR.fullmatch(raw)
        if found:
            after = None if found.group(2) is None else int(found.group(2))
            if after is not None and not -(1 << 63) < after < (1 << 63):
                found = None
            else:
                floor = None if found.group(4) is None else (int(found.group(4)), int(found.group(5)))
                return cls(Moment(int(found.group(1)), after), int(found.group(3)), floor)
        old = _FIRST_EVENT_CURSOR.fullmatch(raw)
        if old:  # a cursor of the first-event form: matches certain from its first event on, less those it said
            first, skip = int(old.group(1)), int(old.group(2))
            return cls(Moment(first), 0, (first, skip))
        shown = raw if len(raw) <= 80 else raw[:77] + "..."
        raise QuerySemanticError(f"{where} {shown!r} is not a cursor: expected @SEQ:DELIVERED or "
                                 "@SEQ~TIME:DELIVERED, e.g. '@1200:0' (the id of the last event a stream sent)",
                                 where=where)

    @classmethod
    def start(cls) -> Cursor:
        """Before every match."""
        return cls(Moment(0))


def check_standing(query: Query) -> Query:
    """``query`` as a standing query keeps it (its matches, whatever its RETURN); a query without ``WITHIN``
    is refused: its windows never close, so a match that waits for its window would never be certain."""
    if query.within is None:
        raise QuerySemanticError("a standing query needs WITHIN: a match that waits for its window is "
                                 "delivered once the window has closed, and without WITHIN no window ever does",
                                 where="query")
    return dataclasses.replace(query, returns=Return.MATCHES)


def now_of(snap: Snapshot) -> Moment:
    """The moment a snapshot stands at: its last event stored, and event time past it if a watermark says so."""
    return Moment(snap.events - 1, snap.event_time)


def after_now(snap: Snapshot) -> Cursor:
    """The cursor just after every match certain in ``snap`` (a new watch's ``from: now``)."""
    if not snap.events:
        return Cursor.start()
    if snap.event_time is not None:
        return Cursor(Moment(snap.events - 1, snap.event_time + 1))
    assert snap.last_ts is not None
    # no window closes between the last event and its own ts: the first moment still to come is at it or later
    return Cursor(Moment(snap.events - 1, snap.last_ts))


class Standing:
    """One standing query on one store (see the module docstring)."""

    def __init__(self, store: EventStore, query: Query) -> None:
        self.store = store
        self.query = check_standing(query)
        self.rule = certainty(self.query)
        self.columns = needed_columns(self.query)
        self.text = json.dumps(to_json(self.query), sort_keys=True)
        #: each positive variable's place in the pattern (answer order compares bindings in it)
        self.rank = {v.name: i for i, v in enumerate(self.query.positive_variables())}
        plan = normalize(self.query)
        #: a read may leave out the events no variable binds (under partition contiguity the partition's
        #: neighbours tell contiguity, so its reads keep every event)
        self.types = None if self.query.strategy is Strategy.PARTITION_CONTIGUITY else read_types(
            self.query, plan, positional=True)
        #: the attributes every match's events share (PARTITION BY and the equality closure), by which a read
        #: may keep only some partitions: not under strict contiguity, where another partition's event breaks
        #: a run
        self.partition = () if self.query.strategy is Strategy.STRICT_CONTIGUITY else plan.partition_attrs

    # --------------------------------------------------------------------------------------- positions
    def now(self, snap: Snapshot) -> Moment:
        return now_of(snap)

    def after_now(self, snap: Snapshot) -> Cursor:
        return after_now(snap)

    def from_time(self, snap: Snapshot, micros: int) -> Cursor:
        """The cursor before every match certain at event time ``micros`` or later."""
        first, _ = StoreSource(self.store, snap).seq_span(micros, micros)
        return Cursor.start() if first == 0 else Cursor(Moment(first - 1, micros))

    def first_open(self, source: StoreSource, moment: Moment) -> int:
        """The first first event whose window closes at ``moment`` or later: every match certain at or after
        ``moment`` starts there or later (a window's matches are certain by its close)."""
        within = self.query.within
        if isinstance(within, WithinEvents):
            return max(0, moment.seq - within.count + 1)
        assert isinstance(within, WithinTime)
        if moment.seq < 0 or moment.seq >= source.events_total:
            return max(0, min(moment.seq, source.events_total))
        at = int(source.ts_of(np.asarray([moment.seq], dtype=_I64))[0])
        threshold = at if moment.after is None else max(at, moment.after)
        first, _ = source.seq_span(threshold - within.micros, threshold - within.micros)
        return first

    def closed(self, snap: Snapshot, first_seq: int) -> bool:
        """Has the window of first event ``first_seq`` closed in ``snap``?"""
        if first_seq >= snap.events:
            return False
        ts = StoreSource(self.store, snap).ts_of(np.asarray([first_seq], dtype=_I64))
        return bool(window_closed(self.query, np.asarray([first_seq], dtype=_I64), ts, snap.events,
                                  snap.last_ts, snap.event_time)[0])

    # ----------------------------------------------------------------------------------------- matches
    def certain(self, snap: Snapshot, cursor: Cursor) -> Iterator[tuple[Cursor, dict[str, Any]]]:
        """The matches certain in ``snap`` after ``cursor``, in delivery order, each with the cursor just
        after it, as the JSON answer's objects."""
        if not snap.events:
            return
        source = StoreSource(self.store, snap)
        now = now_of(snap).key()
        since = cursor.moment.key()
        first = self.first_open(source, cursor.moment)
        held: list[_Held] = []
        while first < snap.events:
            last = min(snap.events, first + CHUNK) - 1
            key = ("chunk", str(self.store.root), snap.parts[0].file if snap.parts else "", self.text, snap.version,
                   snap.events, snap.event_time, first, last, since)
            found = _shared(key, functools.partial(self._chunk, source, snap, first, last, cursor))
            ranks = _floor_ranks(found, cursor.floor, self.rank)
            held += [_Held(moment, _answer_order(match, self.rank), match, ranks.get(id(match), 0))
                     for moment, match in found if since <= moment <= now]
            # a later chunk's matches are certain at its first event or later: the moments before are complete
            yield from self._release(held, cursor, Moment(last + 1).key())
            first = last + 1
        yield from self._release(held, cursor, None)

    def drain(self, snap: Snapshot, cursor: Cursor) -> tuple[list[tuple[Cursor, dict[str, Any]]], Cursor]:
        """Every match certain in ``snap`` after ``cursor`` (:meth:`certain`), and the cursor after all of
        them and after every moment ``snap`` has reached — where the next drain starts."""
        got = list(self.certain(snap, cursor))
        return got, self.advance(snap, got[-1][0] if got else cursor)

    def advance(self, snap: Snapshot, cursor: Cursor) -> Cursor:
        """``cursor``, once every match certain in ``snap`` after it was delivered: just after ``snap``'s
        moment (a first-event cursor is dropped once every match it covers is certain)."""
        end = after_now(snap)
        if end.order() <= cursor.order():
            return cursor
        floor = cursor.floor
        if floor is not None and self.closed(snap, floor[0]):
            floor = None
        return dataclasses.replace(end, floor=floor)

    @staticmethod
    def _release(held: list[_Held], cursor: Cursor, bound: tuple[int, int] | None
                 ) -> Iterator[tuple[Cursor, dict[str, Any]]]:
        """Deliver (and drop from ``held``) the matches of every moment before ``bound`` (None: all), in
        order, numbered within their moment; those ``cursor`` says were delivered are passed over."""
        ready = sorted((h for h in held if bound is None or h.moment < bound), key=lambda h: (h.moment, h.order))
        held[:] = [] if bound is None else [h for h in held if h.moment >= bound]
        floor = cursor.floor
        k, previous = 0, None
        for h in ready:
            k = k + 1 if h.moment == previous else 1
            previous = h.moment
            after = Cursor(Moment(h.moment[0], None if h.moment[1] == AT_EVENT else h.moment[1]), k, floor)
            if after.order() <= cursor.order():
                continue  # delivered before
            if floor is not None and (int(h.match["start_seq"]) < floor[0] or 0 < h.floor_rank <= floor[1]):
                continue  # the first-event cursor said it was delivered
            yield after, h.match

    def _chunk(self, source: StoreSource, snap: Snapshot, first: int, last: int, cursor: Cursor
               ) -> list[tuple[tuple[int, int], dict[str, Any]]]:
        """The matches of first events ``first … last`` certain in ``snap``, each with its moment's key."""
        hi = self._reach(source, last)
        frame, _ = source.read_frame([(first, hi)], self.columns, self.types)
        frame = self._partitions_after(frame, snap, cursor, first)
        if not len(frame.seq):
            return []
        counts = source.type_counts()
        found = evaluate_table(self.query, frame, starts=(first, last), type_counts=counts)
        if not len(found):
            return []
        if self.rule is Certain.AT_LAST_EVENT:
            at_last = np.ones(len(found), dtype=bool)
        elif self.rule is Certain.AT_WINDOW_CLOSE:
            at_last = np.zeros(len(found), dtype=bool)
        else:  # robust: the matches greedy evaluation chooses too are certain at their last event
            greedy = evaluate_table(greedy_query(self.query), frame, starts=(first, last), type_counts=counts)
            chosen = set(greedy.matches())
            at_last = np.zeros(len(found), dtype=bool)
            at_last[found.answer_order()] = [m in chosen for m in found.matches()]
        start_ts = frame.ts[np.searchsorted(frame.seq, found.start)]
        certain = at_last | window_closed(self.query, found.start, start_ts, snap.events, snap.last_ts,
                                          snap.event_time)
        if not certain.any():
            return []
        found = found.take(certain)
        at_last, start_ts = at_last[certain], start_ts[certain]
        seq, after = moments(self.query, found.start, found.end, at_last,
                             functools.partial(_lookup, found.start, start_ts),
                             functools.partial(_last_at_or_before, source))
        order = found.answer_order()
        ordered = found.matches()
        moment_of = {(m.start_seq, m.end_seq, _binding_key(m)): (int(q), int(a))
                     for m, q, a in zip(ordered, seq[order].tolist(), after[order].tolist(), strict=True)}
        body = answer(self.query, found, match_times(frame, found), case_of=case_lookup(self.query,
                                                                                       TableSource(frame.table)))
        return [(moment_of[(m["start_seq"], m["end_seq"], _dict_key(m["bindings"]))], m) for m in body["matches"]]

    def _reach(self, source: StoreSource, last: int) -> int:
        """The last seq the windows of first events up to ``last`` can look at (in the snapshot)."""
        within = self.query.within
        if isinstance(within, WithinEvents):
            return min(source.events_total - 1, last + within.count - 1)
        assert isinstance(within, WithinTime)
        ts = int(source.ts_of(np.asarray([last], dtype=_I64))[0])
        _, hi = source.seq_span(ts, ts + within.micros)
        return max(hi, last)

    def _partitions_after(self, frame: EventFrame, snap: Snapshot, cursor: Cursor, first: int) -> EventFrame:
        """``frame`` less the partitions that cannot hold a match certain after ``cursor``: a match certain
        at its last event has an event at or after the cursor's, one certain at its window's close has a
        first event whose window has closed."""
        if not self.partition or cursor.moment.seq <= first or not len(frame.seq):
            return frame
        codes = partition_codes(frame, self.partition)
        recent = frame.seq >= cursor.moment.seq
        closing = window_closed(self.query, frame.seq, frame.ts, snap.events, snap.last_ts, snap.event_time)
        wanted = distinct_ints(codes[recent | closing])
        keep = np.isin(codes, wanted[wanted >= 0])
        return frame.take(keep)


@dataclass
class _Held:
    """A certain match waiting for the moments before its own to be complete."""

    moment: tuple[int, int]
    order: tuple[Any, ...]
    match: dict[str, Any]
    #: its rank among the matches of a first-event cursor's first event (0: another first event)
    floor_rank: int


def _floor_ranks(found: list[tuple[tuple[int, int], dict[str, Any]]], floor: tuple[int, int] | None,
                 rank: dict[str, int]) -> dict[int, int]:
    """The rank, in answer order, of each match whose first event is ``floor``'s (by object id)."""
    if floor is None:
        return {}
    mine = sorted((m for _, m in found if int(m["start_seq"]) == floor[0]), key=lambda m: _answer_order(m, rank))
    return {id(m): i + 1 for i, m in enumerate(mine)}


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    order = np.argsort(keys, kind="stable")
    return values[order][np.searchsorted(keys[order], wanted)]


def _last_at_or_before(source: StoreSource, times: np.ndarray) -> np.ndarray:
    """Per time, the last stored seq whose ts is at most it (-1: none) — read in place around the times."""
    times = np.asarray(times, dtype=_I64)
    if not len(times):
        return np.zeros(0, dtype=_I64)
    lo, hi = int(times.min()), int(times.max())
    span = source.store.seqs_within(np.asarray([lo]), np.asarray([hi + 1]), source.snapshot)[0]
    a = max(0, int(span[0]) - 1)
    b = min(source.events_total - 1, int(span[1]) + 1)
    frame, _ = source.read_frame([(a, b)], ["seq", "ts", "type"]) if a <= b else (None, 0)
    if frame is None or not len(frame.seq):
        return np.full(len(times), a - 1, dtype=_I64)
    at = np.searchsorted(frame.ts, times, "right")
    out = np.where(at > 0, frame.seq[np.maximum(at - 1, 0)], a - 1)
    return out.astype(_I64)


def _binding_key(match: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(sorted((name, tuple(seqs)) for name, seqs in match.bindings))


def _dict_key(bindings: dict[str, list[int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(sorted((name, tuple(seqs)) for name, seqs in bindings.items()))


def _answer_order(match: dict[str, Any], rank: dict[str, int]) -> tuple[Any, ...]:
    """A match's place in answer order (first seq, last seq, then its bindings variable by variable in pattern
    order — ``rank`` gives each variable's place — name, then seqs)."""
    bound = sorted(match["bindings"].items(), key=lambda kv: rank[kv[0]])
    return int(match["start_seq"]), int(match["end_seq"]), tuple((name, tuple(seqs)) for name, seqs in bound)


# The matches of a chunk in one snapshot never change: the streams of one standing query (many clients of one
# watch, or of one query) compute each once and share it.
_SHARED: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_PENDING: dict[tuple[Any, ...], threading.Event] = {}
_LOCK = threading.Lock()
_T = TypeVar("_T")
#: ranges kept (the live ones are small: the events of one append)
_SHARED_MOST = 256


def _shared(key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
    """``compute()`` once per ``key`` among the threads of this process (others wait for it), kept a while."""
    with _LOCK:
        if key in _SHARED:
            _SHARED.move_to_end(key)
            kept: _T = _SHARED[key]
            return kept
        pending = _PENDING.get(key)
        owner = pending is None
        if owner:
            pending = _PENDING[key] = threading.Event()
    assert pending is not None
    if not owner:
        pending.wait()
        with _LOCK:
            done: _T | None = _SHARED.get(key)
        return done if done is not None else compute()  # (its owner failed: compute it here)
    try:
        value = compute()
        with _LOCK:
            _SHARED[key] = value
            while len(_SHARED) > _SHARED_MOST:
                _SHARED.popitem(last=False)
        return value
    finally:
        with _LOCK:
            _PENDING.pop(key, None)
        pending.set()
