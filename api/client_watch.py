"""A watch's stream of matches as the SDK reads it (docs/contract.md §5.8): Server-Sent Events, reconnected
from the last event's id; made by :meth:`api.client.Client.watch`."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
from collections.abc import Iterator
from typing import Any, Protocol

from api.client_errors import ServiceUnavailableError
from api.client_results import JSON


class Streams(Protocol):
    """What a watch needs of its client (:class:`api.client.Client`): where the server is, how often and how
    patiently to retry, and a stream opened from a cursor."""

    base: str
    retries: int
    backoff: float

    def _open_stream(self, name: str, watch_id: str, cursor: str | None) -> Any: ...


class Watch:
    """A standing query's stream of matches (docs/contract.md §5.8): iterate for each match, as in a JSON
    answer, the history's first, then each new one as soon as it is certain.  A dropped connection is
    reopened from :attr:`cursor` (the id of the last event seen), so no match is lost or repeated; an error
    answer (the watch deleted, a bad cursor) raises.  :meth:`close` (or leaving the loop) stops it."""

    def __init__(self, client: Streams, name: str, watch_id: str, cursor: str | None = None) -> None:
        self.client = client
        self.name = name
        self.id = watch_id
        #: the id of the last event received (where a reconnection resumes); None before the first
        self.cursor = cursor
        #: has the server said that the stored history is done (the rest is live)?
        self.history_done = False
        #: what the server said each time the stream's cursor was behind history retention retired
        #: (``{reason, retained_from, from_cursor, cursor}``): the stream went on from ``cursor``
        self.retired: list[JSON] = []
        #: why the stream ended, when the server ended it (the dataset deleted, or built anew since the watch
        #: was made: its cursors mean other events there)
        self.end_reason: str | None = None
        self._response: Any = None
        self._closed = False

    def __repr__(self) -> str:
        return f"Watch({self.name!r}, {self.id!r}, cursor={self.cursor!r})"

    def __iter__(self) -> Iterator[JSON]:
        failures = 0
        while not self._closed:
            try:
                self._response = self.client._open_stream(self.name, self.id, self.cursor)
                failures = 0
                for event, data, event_id in _server_sent_events(self._response):
                    if event_id is not None:
                        self.cursor = event_id
                    if event == "match":
                        yield data
                    elif event == "progress":
                        self.history_done = True
                    elif event == "retired":
                        self.retired.append(data)
                    elif event == "end":
                        said = data if isinstance(data, dict) else {}
                        if said.get("resume"):  # the server is stopping: reconnect, from the cursor
                            failures += 1
                            time.sleep(min(5.0, self.client.backoff * (2 ** min(failures, 5))))
                            break
                        self.end_reason = said.get("reason")
                        return
            except Exception as err:
                if self._closed:  # closed from another thread while a read was waiting: its socket is gone
                    return
                retriable = (urllib.error.URLError, ConnectionError, TimeoutError, OSError, http.client.HTTPException)
                if isinstance(err, urllib.error.HTTPError) or not isinstance(err, retriable):
                    raise
                failures += 1
                if failures > max(1, self.client.retries) * 5:
                    message = f"the watch stream of {self.client.base} keeps failing: {err}"
                    raise ServiceUnavailableError("connection_error", message) from None
                time.sleep(min(5.0, self.client.backoff * (2 ** min(failures, 5))))
            finally:
                self._drop()

    def close(self) -> None:
        self._closed = True
        self._drop()

    def _drop(self) -> None:
        response, self._response = self._response, None
        if response is None:
            return
        # a read waiting on another thread returns only when its socket is shut down, not on close()
        sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            response.close()
        except (OSError, AttributeError, ValueError):
            pass


def _server_sent_events(response: Any) -> Iterator[tuple[str, Any, str | None]]:
    """``(event, data as JSON, id or None)`` of a text/event-stream response, comments skipped."""
    event, event_id = "message", None
    data: list[str] = []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data)), event_id
            event, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue
        field_name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field_name == "event":
            event = value
        elif field_name == "data":
            data.append(value)
        elif field_name == "id":
            event_id = value
