"""Watches: standing queries kept in the catalog, and their matches followed as the stream grows.

:func:`follow` is the one loop every door uses (the HTTP event stream, ``seqsketch watch``): from a cursor it
delivers the certain matches of the history (:mod:`sketch.answer.standing`), says once that the history is
done, then waits for appends — through any door: it watches the store's committed snapshot — and delivers
each new match once its window closes.  :func:`sse_events` writes that as Server-Sent Events
(docs/contract.md §5.8).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.service.datasets import dataset_exists
from api.service.queries import check_attribute_kinds, parsed_query, query_text
from exact.engine.certainty import Moment
from exact.errors import InputError, NotFound, QuerySemanticError, SeqsketchError
from exact.events import parse_timestamp
from exact.query.ast import Query
from exact.store import EventStore, check_dataset_name, dataset_dir, store_dir
from sketch.answer.sources import StoreSource
from sketch.answer.standing import CHUNK, Cursor, Standing, after_now, check_standing

if TYPE_CHECKING:
    from api.catalog import Catalog

log = logging.getLogger(__name__)

WATCH_MODES = ("verified", "exact")
#: how often an open stream looks for appended events (seconds)
POLL_SECONDS = 0.05
#: a comment line this often keeps an idle stream's connection (and proxies) open
HEARTBEAT_SECONDS = 15.0


def _store(home: Path, name: str) -> EventStore:
    if not dataset_exists(home, check_dataset_name(name)):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    return EventStore.open(store_dir(dataset_dir(name, home)))


def start_cursor(home: Path, name: str, start: str | None) -> Cursor:
    """Where a new watch's stream starts: ``now`` (default: the matches that become certain after now),
    ``start`` (the whole history) or a time (ISO 8601: the matches certain at that event time or later)."""
    store = _store(home, name)
    snap = store.snapshot()
    if start in (None, "now"):
        return after_now(snap)
    if start == "start":
        return Cursor.start()
    try:
        micros = parse_timestamp(start)
    except (InputError, ValueError, TypeError):
        raise QuerySemanticError(f"from {start!r}: expected 'now', 'start' or an ISO 8601 time",
                                 where="from") from None
    if not snap.events:
        return Cursor.start()
    lo, _ = StoreSource(store, snap).seq_span(micros, micros)
    return Cursor.start() if lo == 0 else Cursor(Moment(lo - 1, micros))


def standing_query(home: Path, name: str, query: str | Mapping[str, Any] | Query) -> Query:
    """``query`` checked as a standing query on dataset ``name`` (parsed, its attribute kinds, WITHIN)."""
    parsed = parsed_query(query)
    check_attribute_kinds(query, parsed, _store(home, name).snapshot().attrs)
    return check_standing(parsed)


#: Hosts a webhook may name besides the loopback ones: comma-separated names (a deployment's setting).
WEBHOOK_HOSTS_ENV = "SEQSKETCH_WEBHOOK_HOSTS"


def check_webhook(address: str) -> str:
    """``address`` if a watch may post its matches there: ``http`` or ``https``, a host on this machine's
    loopback (an IP address in its loopback range, or ``localhost``) or named exactly in
    ``SEQSKETCH_WEBHOOK_HOSTS``; else a positioned error saying which."""
    if not isinstance(address, str) or len(address) > 2048:
        raise QuerySemanticError("webhook: expected an http(s) address of at most 2048 characters", where="webhook")
    try:
        parts = urllib.parse.urlsplit(address)
        host = (parts.hostname or "").lower()
    except ValueError:
        parts, host = None, ""
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise QuerySemanticError(f"webhook {address!r}: expected an http:// or https:// address with a host",
                                 where="webhook")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address
        loopback = host == "localhost"
    allowed = {h.strip().lower() for h in os.environ.get(WEBHOOK_HOSTS_ENV, "").split(",") if h.strip()}
    if not loopback and host not in allowed:
        raise QuerySemanticError(
            f"webhook {address!r}: host {host!r} is not allowed; a webhook posts to this machine's loopback "
            f"(127.0.0.1, ::1, localhost) or to a host the operator lists in {WEBHOOK_HOSTS_ENV}", where="webhook")
    return address


def create_watch(catalog: Catalog, home: Path, name: str, query: str | Mapping[str, Any], *,
                 mode: str = "verified", start: str | None = "now", token: str | None = None,
                 webhook: str | None = None) -> dict[str, Any]:
    """A new watch on dataset ``name``, kept in the catalog: its id, query, mode and starting cursor; with a
    ``webhook`` (an allowed address: :func:`check_webhook`) also the secret its
    deliveries are signed with — shown this once."""
    if mode not in WATCH_MODES:
        raise QuerySemanticError(f"unknown mode {mode!r} for a watch; choose one of {', '.join(WATCH_MODES)}",
                                 where="mode")
    standing_query(home, name, query)
    cursor = start_cursor(home, name, start)
    lineage = _store(home, name).snapshot().lineage
    if webhook is None:
        return catalog.create_watch(name, query_text(query), mode, cursor.text(), token=token, lineage=lineage)
    secret = secrets.token_hex(32)
    watch = catalog.create_watch(name, query_text(query), mode, cursor.text(), token=token,
                                 webhook=check_webhook(webhook), secret=secret, lineage=lineage)
    return {**watch, "secret": secret}


def get_watch(catalog: Catalog, name: str, watch_id: str) -> dict[str, Any]:
    watch = catalog.get_watch(name, watch_id)
    if watch is None:
        raise NotFound(f"dataset {name!r} has no watch {watch_id!r}", where=watch_id)
    return watch


def delete_watch(catalog: Catalog, name: str, watch_id: str) -> dict[str, Any]:
    if not catalog.delete_watch(name, watch_id):
        raise NotFound(f"dataset {name!r} has no watch {watch_id!r}", where=watch_id)
    return {"deleted": watch_id}


def follow(home: Path, name: str, query: str | Mapping[str, Any] | Query, cursor: Cursor, *,
           stop: threading.Event | None = None, poll: float = POLL_SECONDS, lineage: str | None = None
           ) -> Iterator[tuple[str, Cursor, dict[str, Any] | None]]:
    """The events of a standing query from ``cursor`` on: ``("match", cursor after it, match)``, each match
    as soon as it is certain (:mod:`sketch.answer.standing`); ``("behind", cursor, {behind_events, …})``
    before a catch-up of more events than one chunk; once ``("progress", cursor, {...})`` when the stored
    history is done, ``("idle", cursor, None)`` while it waits for appends or a watermark (each ``poll``
    seconds), and ``("end", cursor, {reason})`` if the dataset goes away.  Runs until ``stop`` is set (or the
    consumer stops iterating).  ``lineage``: the store's lineage the cursor was made on (a watch's); a store
    built anew since has another, and the stream ends."""
    standing = Standing(_store(home, name), standing_query(home, name, query))
    told = False
    seen: tuple[int, int | None] = (-1, None)
    while stop is None or not stop.is_set():
        try:
            snap = standing.store.snapshot()
        except (SeqsketchError, OSError):
            yield "end", cursor, {"reason": f"dataset {name!r} is gone"}
            return
        if lineage is None:
            lineage = snap.lineage  # (a follower started now: a rebuild while it runs ends it all the same)
        if snap.events < seen[0] or (snap.lineage is not None and snap.lineage != lineage):
            yield "end", cursor, {"reason": f"dataset {name!r} was rebuilt: its seqs mean other events now"}
            return
        if (snap.events, snap.event_time) != seen:
            seen = (snap.events, snap.event_time)
            behind = snap.events - 1 - cursor.moment.seq
            if behind > CHUNK:  # far behind (the history, or a stream resumed late): say so
                yield "behind", cursor, {"behind_events": behind, "cursor": cursor.text(),
                                         "frontier": snap.events}
            for after, match in standing.certain(snap, cursor):
                cursor = after
                yield "match", after, match
            cursor = standing.advance(snap, cursor)
            if not told:
                told = True
                yield "progress", cursor, {"history": "done", "cursor": cursor.text(), "events": snap.events}
        yield "idle", cursor, None
        time.sleep(poll)


class Said(dict[str, Any]):
    """A match (or an end) as a stream sends it, with its JSON text made once for every stream."""

    __slots__ = ("text",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(data)
        self.text = json.dumps(data, ensure_ascii=False)


#: A shared follower wakes its streams at least every this many matches (else when it has no more for now).
WAKE_EVERY = 256
#: A shared follower keeps at most this many of its latest matches for streams that join it.
SHARED_KEEP = 1 << 16
#: A shared follower with no stream for this long stops (seconds).
SHARED_IDLE_S = 30.0


class _Shared:
    """One follower of a standing query in this process, from where the stream was when it started, whose
    matches every caught-up stream of the same query takes (:func:`shared_follow`): the query is evaluated
    and the store polled once per append, not once per open stream."""

    def __init__(self, home: Path, name: str, query: str, key: tuple[str, str, str]) -> None:
        self.key = key
        store = _store(home, name)
        standing_query(home, name, query)
        start = after_now(store.snapshot())
        #: every match after ``floor`` is in ``items``
        self.floor = start
        #: the latest matches (and a last ``end``), numbered without gaps: ``(number, kind, after, data)``
        self.items: list[tuple[int, str, Cursor, dict[str, Any] | None]] = []
        self.next_number = 0
        self.readers = 0  # (changed under _SHARED_LOCK)
        self.ended = False
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(home, name, query, start), daemon=True,
                                       name=f"seqsketch-watch-{name}")
        self.thread.start()

    def _run(self, home: Path, name: str, query: str, start: Cursor) -> None:
        unread_since = time.monotonic()
        unsaid = 0  # matches kept since the streams were last woken
        try:
            for kind, after, data in follow(home, name, query, start, stop=self.stop):
                if kind in ("match", "end"):
                    said = Said(data) if data is not None else None  # (serialised once for every stream)
                    with self.changed:
                        self.items.append((self.next_number, kind, after, said))
                        self.next_number += 1
                        if len(self.items) > SHARED_KEEP + SHARED_KEEP // 8:  # (trimmed in steps, not per match)
                            dropped = [a for _, k, a, _ in self.items[: len(self.items) - SHARED_KEEP] if k == "match"]
                            del self.items[: len(self.items) - SHARED_KEEP]
                            if dropped and dropped[-1].order() > self.floor.order():
                                self.floor = dropped[-1]
                        unsaid += 1
                        # the streams are woken once per append's matches (when the follower next waits), not
                        # once per match: a hundred streams woken per match fought for the interpreter
                        if kind == "end" or unsaid >= WAKE_EVERY:
                            self.changed.notify_all()
                            unsaid = 0
                    if kind == "end":
                        return
                    continue
                if unsaid:
                    with self.changed:
                        self.changed.notify_all()
                    unsaid = 0
                if kind == "idle":
                    with _SHARED_LOCK:  # (a stream joins under it: the follower leaves only if none did)
                        if self.readers:
                            unread_since = time.monotonic()
                        elif time.monotonic() - unread_since > SHARED_IDLE_S:
                            self._leave()
                            return
        except Exception:  # its streams go on on their own (and make a new follower)
            log.exception("the shared follower of a standing query on %s stopped", name)
        finally:
            with _SHARED_LOCK:
                self._leave()

    def _leave(self) -> None:
        """Out of the registry, and ended (under ``_SHARED_LOCK``)."""
        if _SHARED.get(self.key) is self:
            del _SHARED[self.key]
        with self.changed:
            self.ended = True
            self.changed.notify_all()


_SHARED: dict[tuple[str, str, str], _Shared] = {}
_SHARED_LOCK = threading.Lock()


def _shared(home: Path, name: str, query: str) -> _Shared:
    """The query's follower in this process (made if there is none), with one more reader."""
    key = (str(home), name, query)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None or found.ended:
            found = _SHARED[key] = _Shared(home, name, query, key)
        found.readers += 1
        return found


def shared_follow(home: Path, name: str, query: str, cursor: Cursor, *, stop: threading.Event | None = None,
                  poll: float = POLL_SECONDS, lineage: str | None = None
                  ) -> Iterator[tuple[str, Cursor, dict[str, Any] | None]]:
    """:func:`follow`'s events, the live ones shared between the streams of one query in this process.

    A stream follows on its own from ``cursor`` until it has caught up with the stored stream (its first
    ``idle``): it then holds every match up to its cursor ``upto``.  From there it takes the shared
    follower's matches after ``upto`` — the follower started at or before ``upto`` (it is made first), so
    none is missing and none repeats.  A stream resumed from a first-event cursor (a watch made before
    moments) joins once it no longer needs it.  When the follower no
    longer keeps what the stream has not taken (it fell far behind), or the follower stopped, the stream
    goes on on its own from its last match and joins again (``progress`` and ``behind`` are said once)."""
    told = False
    while True:
        hub = _shared(home, name, query)
        try:
            upto: Cursor | None = None
            pending: list[tuple[int, str, Cursor, dict[str, Any] | None]] = []
            seen = -1
            last = cursor
            for kind, after, data in follow(home, name, query, cursor, stop=stop, poll=poll, lineage=lineage):
                if kind == "idle" and after.floor is None:
                    with hub.changed:  # (what it keeps and where it starts, seen at one moment)
                        if after.order() >= hub.floor.order() and not hub.ended:
                            upto, pending, seen = after, list(hub.items), hub.next_number - 1
                    if upto is not None:
                        break
                if kind in ("progress", "behind") and told:
                    continue
                told = told or kind == "progress"
                yield kind, after, data
                if kind == "end":
                    return
                last = after
            if upto is None:
                return
            rejoin = False
            while not rejoin:
                for _, kind, after, data in pending:
                    if kind == "match" and after.order() <= upto.order():
                        continue  # (the stream found it on its own)
                    yield kind, after, data
                    if kind == "end":
                        return
                    last = after
                if stop is not None and stop.is_set():
                    return
                with hub.changed:
                    if hub.next_number - 1 == seen and not hub.ended:
                        hub.changed.wait(poll)
                    first = hub.items[0][0] if hub.items else hub.next_number
                    pending = hub.items[seen + 1 - first:] if seen + 1 >= first else []
                    if seen + 1 < first:
                        rejoin = True  # dropped before this stream took them
                    elif pending:
                        seen = pending[-1][0]
                    elif hub.ended:
                        rejoin = True  # stopped without an end
                if not rejoin and not pending:
                    yield "idle", last, None
            cursor = last
        finally:
            with _SHARED_LOCK:
                hub.readers -= 1


def sse_events(home: Path, name: str, watch: Mapping[str, Any], cursor: Cursor, *,
               stop: threading.Event | None = None, heartbeat: float = HEARTBEAT_SECONDS) -> Iterator[str]:
    """:func:`follow` as Server-Sent Events: ``event: match`` (``id:`` its cursor, ``data:`` the match as in
    a JSON answer), ``event: behind``, one ``event: progress``, ``event: end``, and a ``: heartbeat`` comment
    while idle."""
    yield f"retry: 1000\n: watch {watch['id']} from {cursor.text()}\n\n"
    last = time.monotonic()
    for kind, after, data in shared_follow(home, name, watch["query"], cursor, stop=stop,
                                           lineage=watch.get("lineage")):
        if kind == "idle":
            if time.monotonic() - last >= heartbeat:
                last = time.monotonic()
                yield ": heartbeat\n\n"
            continue
        last = time.monotonic()
        text = data.text if isinstance(data, Said) else json.dumps(data, ensure_ascii=False)
        yield f"id: {after.text()}\nevent: {kind}\ndata: {text}\n\n"
        if kind == "end":
            return
