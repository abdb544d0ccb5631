"""Following a standing query as the stream grows: the loop every door uses, and one shared follower per query.

:func:`follow` delivers, from a cursor, the matches certain in the stored history
(:mod:`sketch.answer.standing`), says once that the history is done, then waits for appends and watermarks —
through any door: it watches the store's committed snapshot — and delivers each new match as soon as it is
certain.  Its events are :class:`StreamEvent` members with the cursor after them and their data.

A :class:`Hub` is one follower of a query in this process, started where the stream stands, whose matches
every caught-up stream of the same query takes: the query is evaluated once per append, not once per open
stream.  A stream follows on its own until it has caught up (:func:`catch_up`), then takes the hub's matches
after its cursor (:meth:`Hub.after`); if the hub no longer keeps what the stream has not taken, or stopped,
the stream catches up on its own again.  Blocking readers (:func:`shared_follow`) wait on the hub's condition;
the HTTP worker's event loop subscribes a waker instead (:meth:`Hub.subscribe`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from api.service.datasets import dataset_exists
from api.service.queries import check_attribute_kinds, parsed_query
from exact import jsontext
from exact.engine.certainty import Moment
from exact.errors import NotFound, SeqsketchError
from exact.query.ast import Query
from exact.store import EventStore, Snapshot, check_dataset_name, dataset_dir, store_dir
from exact.store.retention import policy_of
from sketch.answer.standing import CHUNK, Cursor, Standing, after_now, check_standing

log = logging.getLogger(__name__)

#: how often a follower looks for appended events and watermarks (seconds)
POLL_SECONDS = 0.05
#: A hub wakes its streams at least every this many matches (else when it has no more for now).
WAKE_EVERY = 256
#: A hub keeps at most this many of its latest matches for streams that join it.
SHARED_KEEP = 1 << 16
#: A hub with no stream for this long stops (seconds).
SHARED_IDLE_S = 30.0


class StreamEvent(str, Enum):
    """What a standing query's stream says (docs/contract.md §5.8)."""

    #: a match, certain now; its cursor is the one just after it
    MATCH = "match"
    #: the stream is far behind (more than one chunk of events): how far
    BEHIND = "behind"
    #: the stored history is done; live matches follow
    PROGRESS = "progress"
    #: nothing new for now (not sent: a stream's writer uses it to write heartbeats)
    IDLE = "idle"
    #: the cursor was behind the history retention retired: the stream goes on from the first retained
    #: event, and says so (matches that began before it are gone with their events)
    RETIRED = "retired"
    #: the stream ends, with the reason
    END = "end"


Followed = tuple[StreamEvent, Cursor, Mapping[str, Any] | None]


def kept_text(snap: Snapshot) -> str:
    """What a dataset's retention policy keeps, in words."""
    policy = policy_of(snap)
    return policy.text() if policy is not None else "a bounded history"


def store_of(home: Path, name: str) -> EventStore:
    if not dataset_exists(home, check_dataset_name(name)):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    return EventStore.open(store_dir(dataset_dir(name, home)))


def standing_query(home: Path, name: str, query: str | Mapping[str, Any] | Query) -> Query:
    """``query`` checked as a standing query on dataset ``name`` (parsed, its attribute kinds, WITHIN)."""
    parsed = parsed_query(query)
    check_attribute_kinds(query, parsed, store_of(home, name).snapshot().attrs)
    return check_standing(parsed)


def follow(home: Path, name: str, query: str | Mapping[str, Any] | Query, cursor: Cursor, *,
           stop: threading.Event | None = None, poll: float = POLL_SECONDS, lineage: str | None = None
           ) -> Iterator[Followed]:
    """The events of a standing query from ``cursor`` on: each match as soon as it is certain (with the
    cursor after it); ``BEHIND`` before a catch-up of more events than one chunk; once ``PROGRESS`` when the
    stored history is done; ``IDLE`` while it waits (each ``poll`` seconds); ``END`` if the dataset goes away
    or is built anew (``lineage``: the store's lineage the cursor was made on).  Runs until ``stop`` is set
    (or the consumer stops iterating)."""
    standing = Standing(store_of(home, name), standing_query(home, name, query))
    told = False
    seen: tuple[int, int | None] = (-1, None)
    while stop is None or not stop.is_set():
        try:
            snap = standing.store.snapshot()
        except (SeqsketchError, OSError):
            yield StreamEvent.END, cursor, {"reason": f"dataset {name!r} is gone"}
            return
        if lineage is None:
            lineage = snap.lineage  # (a follower started now: a rebuild while it runs ends it all the same)
        if snap.events < seen[0] or (snap.lineage is not None and snap.lineage != lineage):
            yield StreamEvent.END, cursor, {"reason": f"dataset {name!r} was rebuilt: its seqs mean other events now"}
            return
        if cursor.moment.seq < snap.retained_from:
            skipped = cursor
            cursor = Cursor(Moment(snap.retained_from))
            yield StreamEvent.RETIRED, cursor, {
                "reason": f"the events before seq {snap.retained_from} were retired (the dataset keeps "
                          f"{kept_text(snap)}); the matches certain before it are gone with them, and the stream "
                          "goes on from there",
                "retained_from": snap.retained_from, "from_cursor": skipped.text(), "cursor": cursor.text()}
        if (snap.events, snap.event_time) != seen:
            seen = (snap.events, snap.event_time)
            behind = snap.events - 1 - cursor.moment.seq
            if behind > CHUNK:  # far behind (the history, or a stream resumed late): say so
                yield StreamEvent.BEHIND, cursor, {"behind_events": behind, "cursor": cursor.text(),
                                                   "frontier": snap.events}
            for after, match in standing.certain(snap, cursor):
                cursor = after
                yield StreamEvent.MATCH, after, match
            cursor = standing.advance(snap, cursor)
            if not told:
                told = True
                yield StreamEvent.PROGRESS, cursor, {"history": "done", "cursor": cursor.text(),
                                                     "events": snap.events}
        yield StreamEvent.IDLE, cursor, None
        time.sleep(poll)


class Said(dict[str, Any]):
    """A match (or an end) as a stream sends it, with its JSON text made once for every stream."""

    __slots__ = ("text",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(data)
        self.text = jsontext.dumps(data, ensure_ascii=False)


@dataclass
class HubItem:
    """One of a hub's events, numbered without gaps."""

    number: int
    kind: StreamEvent
    after: Cursor
    data: Said | None


@dataclass
class Joined:
    """Where a stream that caught up joins its hub: it holds every match up to ``upto``; ``pending`` are the
    hub's items it has not taken (some may be at or before ``upto``), the last numbered ``seen``."""

    upto: Cursor
    pending: list[HubItem] = field(default_factory=list)
    seen: int = -1

    @staticmethod
    def unseen(item: HubItem, cursor: Cursor) -> bool:
        """Whether a stream at ``cursor`` (at or past where it joined) is still to send ``item``.  The hub
        may be behind that place when the stream joins, so matches it keeps at or before the cursor — the
        stream found them on its own — are passed over in every batch the stream takes, not only the first."""
        return not (item.kind is StreamEvent.MATCH and item.after.order() <= cursor.order())


class Hub:
    """One follower of a standing query in this process (see the module docstring)."""

    def __init__(self, home: Path, name: str, query: str, key: tuple[str, str, str]) -> None:
        self.key = key
        store = store_of(home, name)
        standing_query(home, name, query)
        start = after_now(store.snapshot())
        #: every match after ``floor`` is in ``items``
        self.floor = start
        #: the latest matches (and a last ``END``)
        self.items: list[HubItem] = []
        self.next_number = 0
        self.readers = 0  # (changed under _HUBS_LOCK)
        self.ended = False
        self.changed = threading.Condition()
        self._wakers: set[Callable[[], None]] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(home, name, query, start), daemon=True,
                                       name=f"seqsketch-watch-{name}")
        self.thread.start()

    # ------------------------------------------------------------------------------------------ readers
    def subscribe(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (from the hub's thread) whenever new items are kept or the hub ends."""
        with self.changed:
            self._wakers.add(wake)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        with self.changed:
            self._wakers.discard(wake)

    def join(self, upto: Cursor) -> Joined | None:
        """A stream caught up to ``upto`` joins here, or None when the hub no longer keeps what it needs."""
        with self.changed:
            if upto.floor is not None or upto.order() < self.floor.order() or self.ended:
                return None
            return Joined(upto, list(self.items), self.next_number - 1)

    def after(self, joined: Joined) -> tuple[list[HubItem], bool]:
        """The items after ``joined.seen`` (moving it on) and whether the stream must catch up on its own
        again (the hub dropped items it had not taken, or stopped without an end)."""
        with self.changed:
            first = self.items[0].number if self.items else self.next_number
            if joined.seen + 1 < first:
                return [], True
            fresh = self.items[joined.seen + 1 - first:]
            if fresh:
                joined.seen = fresh[-1].number
            return fresh, not fresh and self.ended

    def wait(self, joined: Joined, timeout: float) -> None:
        """Block until the hub has items after ``joined.seen``, or ``timeout`` passes."""
        with self.changed:
            if self.next_number - 1 == joined.seen and not self.ended:
                self.changed.wait(timeout)

    # --------------------------------------------------------------------------------------- the thread
    def _run(self, home: Path, name: str, query: str, start: Cursor) -> None:
        unread_since = time.monotonic()
        unsaid = 0  # matches kept since the streams were last woken
        try:
            for kind, after, data in follow(home, name, query, start, stop=self.stop):
                if kind in (StreamEvent.MATCH, StreamEvent.END):
                    said = Said(data) if data is not None else None  # (serialised once for every stream)
                    with self.changed:
                        self.items.append(HubItem(self.next_number, kind, after, said))
                        self.next_number += 1
                        if len(self.items) > SHARED_KEEP + SHARED_KEEP // 8:  # (trimmed in steps, not per match)
                            dropped = [i.after for i in self.items[: len(self.items) - SHARED_KEEP]
                                       if i.kind is StreamEvent.MATCH]
                            del self.items[: len(self.items) - SHARED_KEEP]
                            if dropped and dropped[-1].order() > self.floor.order():
                                self.floor = dropped[-1]
                        unsaid += 1
                        # the streams are woken once per append's matches (when the follower next waits), not
                        # once per match: a hundred streams woken per match fought for the interpreter
                        if kind is StreamEvent.END or unsaid >= WAKE_EVERY:
                            self._wake()
                            unsaid = 0
                    if kind is StreamEvent.END:
                        return
                    continue
                if unsaid:
                    with self.changed:
                        self._wake()
                    unsaid = 0
                if kind is StreamEvent.IDLE:
                    with _HUBS_LOCK:  # (a stream joins under it: the follower leaves only if none did)
                        if self.readers:
                            unread_since = time.monotonic()
                        elif time.monotonic() - unread_since > SHARED_IDLE_S:
                            self._leave()
                            return
        except Exception:  # its streams go on on their own (and make a new follower)
            log.exception("the shared follower of a standing query on %s stopped", name)
        finally:
            with _HUBS_LOCK:
                self._leave()

    def _wake(self) -> None:
        """(under ``changed``)"""
        self.changed.notify_all()
        for wake in list(self._wakers):
            wake()

    def _leave(self) -> None:
        """Out of the registry, and ended (under ``_HUBS_LOCK``)."""
        if _HUBS.get(self.key) is self:
            del _HUBS[self.key]
        with self.changed:
            self.ended = True
            self._wake()


_HUBS: dict[tuple[str, str, str], Hub] = {}
_HUBS_LOCK = threading.Lock()


def hub_for(home: Path, name: str, query: str) -> Hub:
    """The query's hub in this process (made if there is none), with one more reader (:func:`leave_hub`)."""
    key = (str(home), name, query)
    with _HUBS_LOCK:
        found = _HUBS.get(key)
        if found is None or found.ended:
            found = _HUBS[key] = Hub(home, name, query, key)
        found.readers += 1
        return found


def leave_hub(hub: Hub) -> None:
    with _HUBS_LOCK:
        hub.readers -= 1


def hubs_of(home: Path) -> list[Hub]:
    """The hubs following datasets of ``home`` in this process."""
    with _HUBS_LOCK:
        return [h for h in _HUBS.values() if h.key[0] == str(home)]


def catch_up(home: Path, name: str, query: str, cursor: Cursor, hub: Hub, *, told: bool,
             stop: threading.Event | None = None, poll: float = POLL_SECONDS, lineage: str | None = None
             ) -> Iterator[Followed | Joined]:
    """A stream on its own from ``cursor`` until it can join ``hub``: :func:`follow`'s events (``PROGRESS``
    and ``BEHIND`` only once, unless ``told`` already), then the :class:`Joined` place — or nothing more
    when the stream ended or was stopped."""
    for kind, after, data in follow(home, name, query, cursor, stop=stop, poll=poll, lineage=lineage):
        if kind is StreamEvent.IDLE:
            joined = hub.join(after)
            if joined is not None:
                yield joined
                return
        if kind in (StreamEvent.PROGRESS, StreamEvent.BEHIND) and told:
            continue
        told = told or kind is StreamEvent.PROGRESS
        yield kind, after, data
        if kind is StreamEvent.END:
            return


def shared_follow(home: Path, name: str, query: str, cursor: Cursor, *, stop: threading.Event | None = None,
                  poll: float = POLL_SECONDS, lineage: str | None = None) -> Iterator[Followed]:
    """:func:`follow`'s events, the live ones shared between the streams of one query in this process (see
    the module docstring), for a reader that blocks while it waits.

    The hub is made before the stream catches up, so it started at or before where the stream joins:
    nothing is missing and nothing repeats."""
    told = False
    while True:
        hub = hub_for(home, name, query)
        try:
            joined: Joined | None = None
            last = cursor
            for event in catch_up(home, name, query, cursor, hub, told=told, stop=stop, poll=poll,
                                  lineage=lineage):
                if isinstance(event, Joined):
                    joined = event
                    break
                kind, after, data = event
                told = told or kind is StreamEvent.PROGRESS
                yield kind, after, data
                if kind is StreamEvent.END:
                    return
                last = after
            if joined is None:
                return
            rejoin = False
            pending = joined.pending
            last = max(last, joined.upto, key=Cursor.order)
            while not rejoin:
                for item in pending:
                    if not Joined.unseen(item, last):
                        continue  # (the stream found it on its own)
                    yield item.kind, item.after, item.data
                    if item.kind is StreamEvent.END:
                        return
                    last = item.after
                if stop is not None and stop.is_set():
                    return
                hub.wait(joined, poll)
                pending, rejoin = hub.after(joined)
                if not rejoin and not pending:
                    yield StreamEvent.IDLE, last, None
            cursor = last
        finally:
            leave_hub(hub)
