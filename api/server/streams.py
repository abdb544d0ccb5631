"""Watch streams served from the event loop: a stream costs a coroutine and a socket, never a thread.

A route checks a stream's request (the token, the watch, its cursor), takes a slot
(:class:`api.streaming.StreamSlots`: a limit per server and per token, refused with ``503``/``429`` and
``Retry-After``, never a wait) and leaves a :class:`api.streaming.StreamSpec` for the front.
:meth:`Streams.serve` then writes the stream: it catches up on a thread of its own (the history,
:func:`api.service.follower.catch_up`), then takes the live matches of the query's hub on the loop, woken by
the hub (:meth:`~api.service.follower.Hub.subscribe`).  It ends at once when the client closes its side,
with an ``end`` event within a second when the server stops (``resume: true``: the client reconnects from
its cursor), and when the stream's token is revoked or its watch deleted (:meth:`Streams.watch_revocations`
looks every half second, once for all the streams of a process).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from api.service.follower import Joined, StreamEvent, catch_up, hub_for, leave_hub
from api.service.sse import HEARTBEAT, HEARTBEAT_SECONDS, end_text, event_text, preamble
from api.streaming import StreamSpec
from exact.errors import SeqsketchError
from sketch.answer.standing import Cursor

if TYPE_CHECKING:
    from api.catalog import Catalog
    from api.server.front import Connection

#: how often the revocation of streams' tokens, and the deletion of their watches, is looked at (s)
REVOKE_EVERY_S = 0.5


@dataclass(eq=False)
class _Open:
    """An open stream: its spec, and whether (and why) it must end now."""

    spec: StreamSpec
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""
    resume: bool = False

    def end(self, reason: str, *, resume: bool = False) -> None:
        if not self.ended.is_set():
            self.reason, self.resume = reason, resume
            self.ended.set()


class Streams:
    """The open streams of one worker process: served, ended together when the server stops, ended one by
    one when their token is revoked or their watch deleted."""

    def __init__(self, catalog: Catalog, *, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self.catalog = catalog
        self.heartbeat = heartbeat
        self.open: set[_Open] = set()
        self.stopping = False

    def end_all(self, reason: str) -> None:
        """Every stream ends now with ``reason``; clients reconnect from their cursors elsewhere or later."""
        self.stopping = True
        for stream in list(self.open):
            stream.end(reason, resume=True)

    async def watch_revocations(self, executor: Any) -> None:
        """Every :data:`REVOKE_EVERY_S`: end the streams whose token was revoked or whose watch is gone."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(REVOKE_EVERY_S)
            streams = list(self.open)
            if not streams:
                continue
            tokens = {s.spec.token for s in streams if s.spec.token is not None}
            watches = {str(s.spec.watch["id"]) for s in streams}
            try:
                revoked, gone = await loop.run_in_executor(executor, self._look, tokens, watches)
            except Exception:  # the catalog unreachable for a moment: look again
                continue
            for stream in streams:
                if stream.spec.token in revoked:
                    stream.end(f"the token {stream.spec.token!r} was revoked")
                elif str(stream.spec.watch["id"]) in gone:
                    stream.end(f"the watch {stream.spec.watch['id']} was deleted")

    def _look(self, tokens: set[str], watches: set[str]) -> tuple[set[str], set[str]]:
        revoked = self.catalog.revoked_tokens(tokens) if tokens else set()
        return revoked, watches - self.catalog.existing_watches(watches)

    async def serve(self, conn: Connection, spec: StreamSpec, headers: list[tuple[str, str]]) -> None:
        """Write ``spec``'s stream on ``conn`` until it ends (see the module docstring)."""
        stream = _Open(spec)
        self.open.add(stream)
        gone = asyncio.ensure_future(conn.client_gone())
        try:
            if self.stopping:
                stream.end("the server is stopping; reconnect to resume from your cursor", resume=True)
            conn.start_stream(200, headers)
            await conn.send(preamble(str(spec.watch["id"]), spec.cursor))
            await _Writer(conn, stream, gone, self.heartbeat).run()
        except (ConnectionError, TimeoutError, OSError):
            pass
        finally:
            gone.cancel()
            self.open.discard(stream)
            spec.done()
            await conn.end_stream()


class _Writer:
    """One stream's loop: catch up on a thread, then the hub's matches, until an end."""

    def __init__(self, conn: Connection, stream: _Open, gone: asyncio.Future[Any], heartbeat: float) -> None:
        self.conn = conn
        self.stream = stream
        self.spec = stream.spec
        self.gone = gone
        self.heartbeat = heartbeat
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.last_write = time.monotonic()

    def _wake_soon(self) -> None:
        self.loop.call_soon_threadsafe(self.wake.set)

    async def _say(self, text: str) -> None:
        await self.conn.send(text)
        self.last_write = time.monotonic()

    def _over(self) -> bool:
        return self.gone.done() or self.stream.ended.is_set()

    async def run(self) -> None:
        spec = self.spec
        query, lineage = str(spec.watch["query"]), spec.watch.get("lineage")
        cursor, told = spec.cursor, False
        stop = threading.Event()
        try:
            while not self._over():
                hub = await self.loop.run_in_executor(None, hub_for, spec.home, spec.dataset, query)
                hub.subscribe(self._wake_soon)
                try:
                    joined, cursor, told, finished = await self._catch_up(hub, cursor, told, stop, lineage)
                    if finished or joined is None:
                        return
                    cursor, finished = await self._live(hub, joined, cursor)
                    if finished:
                        return
                finally:
                    hub.unsubscribe(self._wake_soon)
                    leave_hub(hub)
        except SeqsketchError as err:  # (the dataset went away between two looks)
            self.stream.end(str(err))
        finally:
            stop.set()
            if self.stream.ended.is_set() and not self.gone.done():
                await self._say(end_text(self.stream.reason, resume=self.stream.resume))

    async def _catch_up(self, hub: Any, cursor: Cursor, told: bool, stop: threading.Event, lineage: str | None
                        ) -> tuple[Joined | None, Cursor, bool, bool]:
        """The stream on its own until it joins ``hub``: events pass through a queue from a thread.  Returns
        where it joined (None: it did not), its cursor, whether the history was told, and whether the
        stream is over."""
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1024)
        done = object()
        spec = self.spec

        def put(item: Any) -> None:
            if not stop.is_set():
                asyncio.run_coroutine_threadsafe(queue.put(item), self.loop).result()

        def produce() -> None:
            try:
                for event in catch_up(spec.home, spec.dataset, str(spec.watch["query"]), cursor, hub, told=told,
                                      stop=stop, lineage=lineage):
                    put(event)
            except Exception as err:  # (the stream ends; the client may reconnect)
                put(err)
            finally:
                put(done)

        thread = threading.Thread(target=produce, name="seqsketch-stream-history", daemon=True)
        thread.start()
        joined: Joined | None = None
        try:
            while True:
                event = await self._next(queue)
                if event is None:
                    return None, cursor, told, True  # the stream is over (client gone, ended)
                if event is done:
                    return joined, cursor, told, joined is None
                if isinstance(event, Exception):
                    if isinstance(event, SeqsketchError):
                        self.stream.end(str(event))
                    else:
                        self.stream.end("the stream failed; reconnect to resume", resume=True)
                    return None, cursor, told, True
                if isinstance(event, Joined):
                    joined = event
                    continue
                kind, after, data = event
                if kind is StreamEvent.IDLE:
                    await self._heartbeat()
                    continue
                told = told or kind is StreamEvent.PROGRESS
                await self._say(event_text(kind, after, data))
                if kind in (StreamEvent.MATCH, StreamEvent.RETIRED):
                    cursor = after
                if kind is StreamEvent.END:
                    return None, cursor, told, True
        finally:
            stop.set()
            while not queue.empty():  # (a producer waiting to put is let go)
                queue.get_nowait()

    async def _next(self, queue: asyncio.Queue[Any]) -> Any:
        """The next queued event, or None when the stream is over first (a heartbeat between)."""
        while True:
            getting = asyncio.ensure_future(queue.get())
            ended = asyncio.ensure_future(self.stream.ended.wait())
            finished, _ = await asyncio.wait({getting, ended, self.gone}, timeout=self.heartbeat,
                                             return_when=asyncio.FIRST_COMPLETED)
            ended.cancel()
            if getting in finished:
                return getting.result()
            getting.cancel()
            if self._over():
                return None
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        if time.monotonic() - self.last_write >= self.heartbeat:
            await self._say(HEARTBEAT)

    async def _live(self, hub: Any, joined: Joined, cursor: Cursor) -> tuple[Cursor, bool]:
        """The hub's matches after the stream's cursor, until the stream is over (True) or must catch up
        on its own again (False)."""
        pending = joined.pending
        cursor = max(cursor, joined.upto, key=Cursor.order)
        while True:
            for item in pending:
                if not Joined.unseen(item, cursor):
                    continue
                await self._say(event_text(item.kind, item.after, item.data))
                if item.kind is StreamEvent.END:
                    return cursor, True  # (the dataset went away: said, and over)
                cursor = item.after
            if self._over():
                return cursor, True
            self.wake.clear()
            pending, rejoin = hub.after(joined)
            if rejoin:
                return cursor, False
            if pending:
                continue
            waker = asyncio.ensure_future(self.wake.wait())
            ended = asyncio.ensure_future(self.stream.ended.wait())
            await asyncio.wait({waker, ended, self.gone}, timeout=self.heartbeat,
                               return_when=asyncio.FIRST_COMPLETED)
            waker.cancel()
            ended.cancel()
            await self._heartbeat()
