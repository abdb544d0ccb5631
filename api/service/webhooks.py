"""Webhook delivery: each watch with a webhook has its matches posted to it, one request a match, in order.

A :class:`Deliverer` runs beside the build workers in the job runner (one per home: the runner's process, or
the app's thread under ``SEQSKETCH_JOB_RUNNER=thread``).  It looks at the catalog every second and keeps one
thread per webhook watch; a file lock per watch (``<home>/webhooks/<id>.lock``) makes sure that only one
process delivers it even when several runners share a home.  Each thread follows the watch's standing query
as its event stream does (:func:`api.service.follower.follow`), from the cursor after the last match
delivered (the watch's own ``cursor`` before the first), so a restart goes on where delivery stopped.  The
watches of a revoked token are not delivered (within a second of the revocation); where each delivery may
go is :mod:`api.service.webhook_policy`.

A delivery is ``POST`` of ``{"watch", "dataset", "cursor", "match"}`` (the match as in a JSON answer,
``cursor`` the stream's event id for it) with the headers ``X-Seqsketch-Watch``, ``X-Seqsketch-Delivery``
(the cursor: a receiver drops a repeat by it) and ``X-Seqsketch-Signature: sha256=<hex>``, the HMAC-SHA256 of
the body under the watch's secret.  A 2xx answer delivers it, and its cursor is recorded; anything else (an
error answer, a refused connection, a timeout) is retried after 0.25 s, then twice as long each time, up to
30 s, for as long as the watch exists.  A match is recorded after its receiver answered, so a crash between
the two delivers it once more (at least once; the delivery id tells repeats apart).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.service.datasets import dataset_exists
from api.service.follower import StreamEvent, follow
from api.service.webhook_policy import post
from exact import jsontext
from exact.errors import NotFound
from sketch.answer.standing import Cursor

if TYPE_CHECKING:
    from api.catalog import Catalog

log = logging.getLogger(__name__)

#: How often the deliverer looks for watches created, deleted or whose token was revoked (seconds).
LOOK_EVERY_S = 1.0
#: The first pause before a failed delivery is tried again, and the longest (seconds).
RETRY_FIRST_S = 0.25
RETRY_MOST_S = 30.0


def signature(secret: str, body: bytes) -> str:
    """The value of ``X-Seqsketch-Signature`` for ``body``: ``sha256=`` and the HMAC-SHA256 in hex."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Backoff:
    """Pauses between attempts: :data:`RETRY_FIRST_S`, then twice as long each time, up to
    :data:`RETRY_MOST_S`; :meth:`wait` returns True when ``stop`` was set meanwhile."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.pause = RETRY_FIRST_S

    def wait(self) -> bool:
        if self.stop.wait(self.pause):
            return True
        self.pause = min(2 * self.pause, RETRY_MOST_S)
        return False


class Deliverer:
    """Keeps one delivering thread per webhook watch of ``home``'s catalog (see the module docstring)."""

    def __init__(self, catalog: Catalog, home: Path, *, look_every: float = LOOK_EVERY_S,
                 send: Callable[[str, bytes, Mapping[str, str]], bool] = post) -> None:
        self.catalog = catalog
        self.home = home
        self.look_every = look_every
        self.send = send
        self._stop = threading.Event()
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        #: watches whose stream ended (their dataset deleted or rebuilt): not followed again
        self._ended: set[str] = set()
        self._main: threading.Thread | None = None

    def start(self) -> Deliverer:
        self._main = threading.Thread(target=self._run, name="seqsketch-webhooks", daemon=True)
        self._main.start()
        return self

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop looking, then stop every delivering thread (each at its next poll or retry pause)."""
        self._stop.set()
        if self._main is not None:
            self._main.join(timeout)
        for _, stop in list(self._threads.values()):
            stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except Exception:  # the catalog is unreachable for a moment: look again later
                log.exception("webhook delivery could not read the watches")
            self._stop.wait(self.look_every)

    def look(self) -> None:
        """Start a thread for each new webhook watch; stop those of deleted ones and of revoked tokens (the
        catalog lists only the watches whose owner may still use them)."""
        watches = {w["id"]: w for w in self.catalog.webhook_watches()}
        for watch_id, (thread, stop) in list(self._threads.items()):
            if watch_id not in watches or not thread.is_alive():
                stop.set()
                del self._threads[watch_id]
        self._ended &= set(watches)
        for watch_id, watch in watches.items():
            if self._stop.is_set():
                return
            if watch_id not in self._threads and watch_id not in self._ended:
                stop = threading.Event()
                thread = threading.Thread(target=self._deliver, args=(watch, stop), daemon=True,
                                          name=f"seqsketch-webhook-{watch_id[:8]}")
                self._threads[watch_id] = (thread, stop)
                thread.start()

    def _deliver(self, watch: Mapping[str, Any], stop: threading.Event) -> None:
        folder = self.home / "webhooks"
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{watch['id']}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        backoff = Backoff(stop)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process delivers this watch
            while not stop.is_set():
                try:
                    if self._follow(watch, stop) and (watch.get("lineage") is not None
                                                      or not dataset_exists(self.home, str(watch["dataset"]))):
                        # its dataset is gone, or built anew (the store's lineage tells: its seqs mean other
                        # events now): nothing more to deliver
                        self._ended.add(str(watch["id"]))
                        return
                except NotFound as err:
                    log.warning("webhook delivery of watch %s ended: %s", watch["id"], err)
                    self._ended.add(str(watch["id"]))
                    return
                except Exception:  # a moment's trouble (a replace under way, a read error): again, later
                    log.exception("webhook delivery of watch %s failed; trying again", watch["id"])
                watch = {**watch, **(self.catalog.get_watch(str(watch["dataset"]), str(watch["id"])) or {})}
                if backoff.wait():
                    return
        finally:
            os.close(fd)

    def _follow(self, watch: Mapping[str, Any], stop: threading.Event) -> bool:
        """Deliver the watch's matches until ``stop`` (False) or its stream ends (True)."""
        start = Cursor.parse(watch.get("delivered") or watch["cursor"])
        secret = str(watch["secret"])
        for kind, after, data in follow(self.home, watch["dataset"], watch["query"], start, stop=stop,
                                        lineage=watch.get("lineage")):
            if kind is StreamEvent.END:
                log.warning("webhook delivery of watch %s: %s", watch["id"], (data or {}).get("reason"))
                return True
            if kind not in (StreamEvent.MATCH, StreamEvent.RETIRED):
                continue
            said = "match" if kind is StreamEvent.MATCH else "retired"  # (a retired stretch is told, in order)
            body = jsontext.dumps({"watch": watch["id"], "dataset": watch["dataset"], "cursor": after.text(),
                                   said: data}, ensure_ascii=False).encode()
            headers = {"X-Seqsketch-Watch": str(watch["id"]), "X-Seqsketch-Delivery": after.text(),
                       "X-Seqsketch-Event": said, "X-Seqsketch-Signature": signature(secret, body)}
            backoff = Backoff(stop)
            while not self.send(str(watch["webhook"]), body, headers):
                if backoff.wait():
                    return False
            if not self.catalog.set_delivered(str(watch["id"]), after.text()):
                return False  # the watch was deleted
        return False
