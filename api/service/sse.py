"""A standing query's stream as Server-Sent Events (docs/contract.md §5.8): the wire format, one place.

``event: match`` (``id:`` its cursor, ``data:`` the match as in a JSON answer), ``event: behind``, one
``event: progress``, ``event: retired`` (``id:`` the cursor it goes on from), ``event: end`` (its reason;
``resume: true`` when the client should reconnect from its cursor — the server is stopping), a
``: heartbeat`` comment while idle, and ``retry: 1000`` first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from api.service.follower import Said, StreamEvent, shared_follow
from exact import jsontext
from sketch.answer.standing import Cursor

#: a comment line this often keeps an idle stream's connection (and proxies) open
HEARTBEAT_SECONDS = 15.0
HEARTBEAT = ": heartbeat\n\n"


def preamble(watch_id: str, cursor: Cursor) -> str:
    """What a stream says first: how long a client waits before it reconnects, and where it starts."""
    return f"retry: 1000\n: watch {watch_id} from {cursor.text()}\n\n"


def event_text(kind: StreamEvent, after: Cursor, data: Mapping[str, Any] | None) -> str:
    """One event of the stream (a match carries its cursor as the event's id)."""
    text = data.text if isinstance(data, Said) else jsontext.dumps(data, ensure_ascii=False)
    head = f"id: {after.text()}\n" if kind in (StreamEvent.MATCH, StreamEvent.RETIRED) else ""
    return f"{head}event: {kind.value}\ndata: {text}\n\n"


def end_text(reason: str, *, resume: bool = False) -> str:
    """The stream's last event: why it ends, and whether the client should reconnect from its cursor."""
    body: dict[str, Any] = {"reason": reason}
    if resume:
        body["resume"] = True
    return f"event: {StreamEvent.END.value}\ndata: {jsontext.dumps(body, ensure_ascii=False)}\n\n"


def sse_events(home: Path, name: str, watch: Mapping[str, Any], cursor: Cursor, *,
               stop: threading.Event | None = None, heartbeat: float = HEARTBEAT_SECONDS) -> Iterator[str]:
    """A watch's stream as text, for a server that gives each open stream a thread of its own (the
    development server; ``seqsketch serve`` streams from its event loop instead: :mod:`api.server`)."""
    yield preamble(str(watch["id"]), cursor)
    last = time.monotonic()
    for kind, after, data in shared_follow(home, name, str(watch["query"]), cursor, stop=stop,
                                           lineage=watch.get("lineage")):
        if kind is StreamEvent.IDLE:
            if time.monotonic() - last >= heartbeat:
                last = time.monotonic()
                yield HEARTBEAT
            continue
        last = time.monotonic()
        yield event_text(kind, after, data)
        if kind is StreamEvent.END:
            return
