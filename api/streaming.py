"""What a route hands the HTTP front for a watch's stream: the handover keys, the stream's spec, and the
slots that bound how many streams are open — per server and per token — shared by a server's worker
processes.

Under ``seqsketch serve`` the front (:mod:`api.server`) marks each request's environ with
:data:`STREAMS_KEY`; a stream route then checks the request, takes a slot and leaves a :class:`StreamSpec`
under :data:`STREAM_KEY`, and the front serves the stream on its event loop.  Elsewhere (the development
server, a test client) the route streams from a generator itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exact.errors import SeqsketchError
from sketch.answer.standing import Cursor

#: ``environ`` key under which a route hands a watch's stream to the front
STREAM_KEY = "seqsketch.stream"
#: ``environ`` key saying that the front serves streams itself (a route then hands them over)
STREAMS_KEY = "seqsketch.async_streams"


class TooManyStreams(SeqsketchError):
    """A stream refused: the server (503) or the token (429) holds as many as it may."""

    code = "too_many_streams"
    http_status = 503

    def __init__(self, message: str, *, status: int = 503, retry_after: int = 5) -> None:
        super().__init__(message, where="stream")
        self.http_status = status
        #: headers the answer carries
        self.headers = {"Retry-After": str(retry_after)}


class StreamSlots:
    """Open streams, counted against ``total`` per server and ``per_token`` per token.  ``shared``: the
    counts live in memory the server's worker processes share (made before they are forked)."""

    SLOTS = 512  # tokens with open streams at once

    def __init__(self, total: int, per_token: int, *, shared: bool = False) -> None:
        self.total = total
        self.per_token = per_token
        self._lock: Any = multiprocessing.get_context("fork").Lock() if shared else threading.Lock()
        self._open: Any = multiprocessing.RawValue(ctypes.c_int64, 0) if shared else _Count()
        self._keys: Any = multiprocessing.RawArray(ctypes.c_int64, self.SLOTS) if shared else [0] * self.SLOTS
        self._counts: Any = multiprocessing.RawArray(ctypes.c_int64, self.SLOTS) if shared else [0] * self.SLOTS

    @staticmethod
    def _key(token: str | None) -> int:
        digest = hashlib.blake2b((token or "").encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little", signed=True) or 1

    def acquire(self, token: str | None) -> None:
        """Take a slot for a stream of ``token`` (None: an open server's caller), or refuse it."""
        key = self._key(token)
        with self._lock:
            if self._open.value >= self.total:
                raise TooManyStreams(f"this server holds {self.total} open streams, its limit "
                                     "(SEQSKETCH_MAX_STREAMS); try again later")
            free = -1
            for i in range(self.SLOTS):
                if self._keys[i] == key and self._counts[i] > 0:
                    if self._counts[i] >= self.per_token:
                        raise TooManyStreams(f"this token holds {self.per_token} open streams, its limit "
                                             "(SEQSKETCH_MAX_STREAMS_PER_TOKEN); close one or try again later",
                                             status=429)
                    self._counts[i] += 1
                    self._open.value += 1
                    return
                if free < 0 and self._counts[i] == 0:
                    free = i
            if free < 0:
                raise TooManyStreams("this server holds streams of too many tokens; try again later")
            self._keys[free], self._counts[free] = key, 1
            self._open.value += 1

    def release(self, token: str | None) -> None:
        key = self._key(token)
        with self._lock:
            for i in range(self.SLOTS):
                if self._keys[i] == key and self._counts[i] > 0:
                    self._counts[i] -= 1
                    self._open.value -= 1
                    return

    @property
    def open(self) -> int:
        return int(self._open.value)


class _Count:
    value = 0


@dataclass
class StreamSpec:
    """A stream a route checked and handed to the front: what to follow, from where, for whom."""

    home: Path
    dataset: str
    watch: dict[str, Any]
    cursor: Cursor
    #: the token the stream was opened with (None: an open server's caller)
    token: str | None
    #: gives the slot back
    release: Callable[[], None]
    _released: bool = field(default=False, repr=False)

    def done(self) -> None:
        """The stream ended: its slot is given back (once)."""
        if not self._released:
            self._released = True
            self.release()
