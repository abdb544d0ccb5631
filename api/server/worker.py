"""``seqsketch serve``'s request worker: gunicorn's process management around the asyncio front.

gunicorn's master forks the workers, restarts one that dies or falls silent, and stops them on a signal;
each worker runs :mod:`api.server.front` on an event loop over the listening sockets it inherited, the Flask
app on a pool of ``--threads`` threads, and the watch streams on the loop (:mod:`api.server.streams`).

A graceful stop (``SIGTERM``): the worker stops accepting, ends every open stream with an ``end`` event
(``resume: true``) at once, closes idle kept-alive connections, lets requests in progress finish within
``--graceful-timeout``, and exits.  ``SIGQUIT``/``SIGINT`` stop it at once.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gunicorn.workers.base import Worker

from api.server.front import Connection, Limits
from api.server.streams import Streams

#: how often the loop looks at the worker's state (its stop, the master), in seconds
TICK_S = 0.1


def limits_of(app: Any, keepalive: float) -> Limits:
    """The front's limits from the app's configuration and the server's keep-alive setting."""
    config = app.config
    return Limits(keepalive_s=float(keepalive), append_bytes=int(config["MAX_APPEND_BYTES"]),
                  request_bytes=int(config["MAX_CONTENT_LENGTH"] or Limits.request_bytes),
                  head_s=float(config["REQUEST_HEAD_S"]), body_idle_s=float(config["REQUEST_BODY_IDLE_S"]))


class AsyncWorker(Worker):
    """A gunicorn worker class (``worker_class``) serving the front on an event loop."""

    def run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        from api.state import service_state

        loop = asyncio.get_running_loop()
        app = self.wsgi
        state = service_state(app)
        executor = ThreadPoolExecutor(max_workers=max(1, int(self.cfg.threads)), thread_name_prefix="seqsketch-req")
        loop.set_default_executor(ThreadPoolExecutor(max_workers=8, thread_name_prefix="seqsketch-aux"))
        limits = limits_of(app, self.cfg.keepalive)
        streams = Streams(state.catalog)
        closing = asyncio.Event()
        connections: set[Connection] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("sockname")
            name, port = (str(sock[0]), int(sock[1])) if isinstance(sock, tuple) else ("localhost", 0)
            conn = Connection(reader, writer, limits, app, executor, server_name=name, server_port=port,
                              serve_stream=streams.serve, closing=closing)
            connections.add(conn)
            try:
                await conn.serve()
            finally:
                connections.discard(conn)

        servers = [await asyncio.start_server(handle, sock=listener.sock, backlog=self.cfg.backlog)
                   for listener in self.sockets]
        revocations = asyncio.ensure_future(streams.watch_revocations(executor))
        try:
            while self.alive:
                self.notify()
                if self.ppid != os.getppid():
                    self.log.info("parent changed, shutting down: %s", self)
                    break
                await asyncio.sleep(TICK_S)
        finally:
            for server in servers:
                server.close()
            closing.set()
            streams.end_all("the server is stopping; reconnect to resume from your cursor")
            deadline = loop.time() + float(self.cfg.graceful_timeout)
            while any(c.busy for c in connections) and loop.time() < deadline:
                self.notify()
                await asyncio.sleep(TICK_S)
            revocations.cancel()
            executor.shutdown(wait=False, cancel_futures=True)
