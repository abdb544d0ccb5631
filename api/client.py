"""The seqsketch Python SDK: a thin, typed client of the HTTP API (docs/contract.md §5–6), standard library only.

>>> from api.client import Client
>>> c = Client("http://127.0.0.1:8080", token="ssk_…")
>>> job = c.build("bpi", ["bpic2012.xes.gz"], engine="local")
>>> c.wait(job["job_id"], timeout=600)["state"]
'succeeded'
>>> r = c.query("bpi", "PATTERN SEQ(A_SUBMITTED a, A_DECLINED d) PARTITION BY case WITHIN 1 h")
>>> r.exists, r.count, r.matches[0]["bindings"]

Every error answer becomes an exception carrying the server's error ``code``, ``message``, HTTP ``status`` and
query ``position`` (line, column) — :class:`QueryError` for query syntax/semantics/limits,
:class:`NotFoundError`, :class:`AuthError` (401/403), :class:`ConflictError`, :class:`BadRequestError`,
:class:`ServerError` — all subclasses of :class:`SeqsketchAPIError`.  Idempotent calls (reads and queries)
are retried a few times on connection errors; appends and builds never are, so nothing is done twice.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import select
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from api.client_errors import (
    AuthError,
    BadRequestError,
    ConflictError,
    JobFailedError,
    NotFoundError,
    PayloadTooLargeError,
    QueryError,
    SeqsketchAPIError,
    ServerError,
    ServiceUnavailableError,
    _error_answer,
    _error_of,
)
from api.client_results import JSON, QueryResult
from api.client_watch import Watch

__all__ = [
    "AuthError", "BadRequestError", "Client", "ConflictError", "JobFailedError", "NotFoundError",
    "PayloadTooLargeError", "QueryError", "QueryResult", "SeqsketchAPIError", "ServerError",
    "ServiceUnavailableError", "Watch",
]

#: the media type of an answer in Arrow form (docs/contract.md §3.6)
ARROW_STREAM = "application/vnd.apache.arrow.stream"


def _proxied(parts: urllib.parse.SplitResult) -> bool:
    """Whether the environment names a proxy for this address (then urllib takes the request)."""
    proxies = urllib.request.getproxies()
    return parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname or "")


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether a kept-alive connection's socket was closed by the server (it reads as ready, at its end)."""
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)  # naive = UTC, as everywhere in seqsketch
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    raise TypeError(f"cannot send a {type(value).__name__} as JSON: {value!r}")


def _query_payload(query: Any) -> str | JSON:
    """Text or the JSON form as given; an AST object is turned into its JSON form."""
    if isinstance(query, (str, dict)):
        return query
    from exact.query.language import (
        to_json,  # an AST from exact.query.ast: only then is the parser package needed
    )

    return to_json(query)


class Client:
    """A client of one seqsketch server.

    ``url`` is the server's base URL (``http://host:port``; a trailing ``/v1`` is accepted), ``token`` a
    bearer token (``seqsketch token create``).  ``timeout`` bounds each HTTP request in seconds; ``retries``
    is how often an idempotent call is retried after a connection error (with a short growing pause).
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0, retries: int = 2,
                 backoff: float = 0.2) -> None:
        base = url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.base = base + "/v1"
        self.token = token
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff

    def __repr__(self) -> str:
        return f"Client({self.base!r}, token={'…' if self.token else None})"

    def close(self) -> None:
        """Close this thread's kept-alive connection to the server (the next request opens another)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport -----------------------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, body: Any = None, raw: bytes | None = None,
                 content_type: str = "application/json", idempotent: bool = False,
                 accept: str = "application/json") -> Any:
        data = raw if raw is not None else (
            None if body is None else json.dumps(body, default=_json_default).encode("utf-8"))
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = self.base + path
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            try:
                status, payload = self._send(method, url, data, headers)
            except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as err:
                if attempt + 1 < attempts:
                    time.sleep(self.backoff * (2 ** attempt))
                    continue
                reason = getattr(err, "reason", err)
                raise ServiceUnavailableError("connection_error",
                                              f"cannot reach {self.base}: {reason}") from None
            if status >= 400:
                raise _error_of(status, payload) from None
            if accept != "application/json":
                return payload
            return json.loads(payload) if payload else None
        raise AssertionError("unreachable")

    def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        """One request and its whole answer (status, body), on this thread's kept-alive connection to the
        server (a proxy the environment names for it is used as urllib uses it)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or _proxied(parts):
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as err:
                return err.code, err.read()
        conn = self._connection(parts)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except BaseException:
            self._local.conn = None
            conn.close()
            raise
        if resp.will_close:
            self._local.conn = None
            conn.close()
        return resp.status, payload

    def _connection(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        """This thread's connection to the server: kept alive between requests, opened again when the server
        closed it meanwhile (an idle connection the server let go reads as closed before it is used)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and (conn.sock is None or _closed_by_peer(conn.sock)):
            conn.close()
            conn = None
        if conn is None:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = kind(parts.hostname or "localhost", parts.port, timeout=self.timeout)
            local.conn = conn
        return conn

    @property
    def _local(self) -> threading.local:
        return self.__dict__.setdefault("_local_state", threading.local())

    @staticmethod
    def _name(name: str) -> str:
        return urllib.parse.quote(name, safe="")

    # --- the API -------------------------------------------------------------------------------------------

    def health(self) -> JSON:
        """``{"status": "ok", "version": …}``."""
        return self._request("GET", "/health", idempotent=True)

    def openapi(self) -> JSON:
        """The server's OpenAPI document."""
        return self._request("GET", "/openapi.json", idempotent=True)

    def datasets(self) -> list[JSON]:
        """Every dataset's description (as :meth:`info`), by name."""
        return list(self._request("GET", "/datasets", idempotent=True)["datasets"])

    def info(self, name: str) -> JSON:
        """A dataset's description: events, time range, types, store size, index (docs/contract.md §4.1 ``info``)."""
        return self._request("GET", f"/datasets/{self._name(name)}", idempotent=True)

    def density(self, name: str) -> JSON:
        """How dataset ``name``'s events spread over its time range (the console's density strip)."""
        return self._request("GET", f"/datasets/{self._name(name)}/density", idempotent=True)

    def delete(self, name: str) -> JSON:
        """Delete a dataset (events and index)."""
        return self._request("DELETE", f"/datasets/{self._name(name)}")

    # --- watches (standing queries) -------------------------------------------------------------------------

    def create_watch(self, name: str, query: Any, *, mode: str = "verified", start: str = "now",
                     webhook: str | None = None) -> JSON:
        """Keep a standing query on dataset ``name`` (it needs ``WITHIN``); ``start`` is ``now``, ``start``
        (the whole history) or an ISO 8601 time; ``webhook``: an address each match is also posted to.
        Returns the watch: ``id``, ``cursor``, ``stream`` … and with a webhook its ``secret`` (the key of the
        deliveries' signatures, shown this once)."""
        body = {"query": _query_payload(query), "mode": mode, "from": start}
        if webhook is not None:
            body["webhook"] = webhook
        return self._request("POST", f"/datasets/{self._name(name)}/watches", body=body)

    def watches(self, name: str) -> list[JSON]:
        return list(self._request("GET", f"/datasets/{self._name(name)}/watches", idempotent=True)["watches"])

    def delete_watch(self, name: str, watch_id: str) -> JSON:
        return self._request("DELETE", f"/datasets/{self._name(name)}/watches/{self._name(watch_id)}")

    def watch(self, name: str, query: Any = None, *, watch_id: str | None = None, mode: str = "verified",
              start: str = "now", cursor: str | None = None) -> Watch:
        """The matches of a standing query as they become certain: ``for m in client.watch(name, query): …``.

        Creates a watch for ``query`` (or follows watch ``watch_id``) and streams it from ``cursor`` (default:
        where the watch starts); reconnects after a dropped connection from the last event seen."""
        if watch_id is None:
            if query is None:
                raise ValueError("watch() needs a query or the id of a watch")
            watch_id = self.create_watch(name, query, mode=mode, start=start)["id"]
        return Watch(self, name, watch_id, cursor)

    def _open_stream(self, name: str, watch_id: str, cursor: str | None) -> Any:
        headers = {"Accept": "text/event-stream"}
        if cursor:
            headers["Last-Event-ID"] = cursor
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = f"{self.base}/datasets/{self._name(name)}/watches/{self._name(watch_id)}/stream"
        try:
            # the server sends a heartbeat every 15 s: a read that waits longer has lost the connection
            return urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                          timeout=max(self.timeout, 30.0))
        except urllib.error.HTTPError as err:
            raise _error_answer(err) from None

    def append(self, name: str, events: Iterable[Mapping[str, Any]], *, watermark: Any = None) -> JSON:
        """Append events — dicts with ``type``, ``ts`` (ISO-8601 text, ``datetime`` or epoch seconds) and
        ``attrs`` — all or nothing; with ``watermark`` (a time, as ``ts``), event time has reached it after
        them (no later event at or before it: windows close on it).  Returns ``{"appended", "first_seq",
        "last_seq", "watermark"}``."""
        return self._request("POST", self._events_path(name, watermark), body=list(events))

    def watermark(self, name: str, ts: Any) -> JSON:
        """Say that event time has reached ``ts`` (ISO-8601 text, ``datetime`` or epoch seconds) without an
        event: the windows that end before it close, and the standing queries deliver what that made
        certain.  A later event at or before ``ts``, or a watermark that goes back, is refused (409)."""
        return self._request("POST", self._events_path(name, ts), body=[])

    def append_ndjson(self, name: str, lines: bytes | str, *, watermark: Any = None) -> JSON:
        """Append events given as NDJSON text (one JSON object per line); ``watermark`` as :meth:`append`."""
        raw = lines.encode("utf-8") if isinstance(lines, str) else lines
        return self._request("POST", self._events_path(name, watermark), raw=raw,
                             content_type="application/x-ndjson")

    def _events_path(self, name: str, watermark: Any) -> str:
        path = f"/datasets/{self._name(name)}/events"
        if watermark is None:
            return path
        text = _json_default(watermark) if isinstance(watermark, dt.date) else str(watermark)
        return path + "?" + urllib.parse.urlencode({"watermark": text})

    def retain(self, name: str, keep: str | None) -> JSON:
        """Keep ``keep`` of the dataset's history (``"90 days"``, ``"12h"``, ``"1000000 events"``; None or
        ``"forever"``: all) and retire what is past it, at once and as the stream grows (write scope).
        Returns the dataset's description (``retention``, ``retained_from``, ``decayed``)."""
        return self._request("PUT", f"/datasets/{self._name(name)}/retention", body={"keep": keep})

    def build(self, name: str, inputs: Iterable[str], **options: Any) -> JSON:
        """Start a build from server-side ``inputs``; options as ``seqsketch build`` (``format``,
        ``type_field``, ``time_field``, ``engine``, ``leaf_size``, ``fpq``, ``memory``, ``replace``,
        ``index_attrs``: a list of attribute names, ``[]`` for none; ``keep``: a retention; ``store``: an
        object-storage location, ``s3://bucket/prefix``; ``footprint``: the dataset's budget on disk, in times
        its Parquet parts).
        Returns the job: ``{"job_id", "state", "url"}``."""
        body = {"inputs": list(inputs), **options}
        return self._request("POST", f"/datasets/{self._name(name)}/builds", body=body)

    def job(self, job_id: str) -> JSON:
        """A build job: ``state`` (queued|running|succeeded|failed), ``progress`` (0..1), ``error``."""
        return self._request("GET", f"/jobs/{self._name(job_id)}", idempotent=True)

    def wait(self, job_id: str, timeout: float = 600.0, *, poll: float = 0.2) -> JSON:
        """Poll a job until it finishes; returns it when it succeeded, raises :class:`JobFailedError` when it
        failed and :class:`TimeoutError` when ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        delay = poll
        while True:
            job = self.job(job_id)
            if job["state"] == "succeeded":
                return job
            if job["state"] == "failed":
                raise JobFailedError(job)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']} after {timeout:g} s "
                                   f"(progress {job.get('progress', 0):.0%})")
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 2.0)

    def query(self, name: str, query: Any, mode: str = "verified", limit: int | None = None, *,
              granularity: int | None = None, include_events: bool = False,
              timeout_ms: int | None = None, format: str = "json", density: int | None = None) -> QueryResult:
        """Answer ``query`` (text, its JSON form, or an ``exact.query.ast.Query``) on dataset ``name``.

        ``limit`` caps the matches returned (the server caps them too); ``timeout_ms`` asks for a tighter
        wall-time limit than the server's (a query over it fails with :class:`QueryError`, code
        ``query_limit``).  ``format="arrow"`` fetches the rows as an Arrow stream (``result.table``,
        ``to_arrow()``, ``to_pandas()``): no JSON object is made per match, here or on the server.
        ``density`` (bins) adds ``match_density``: where all matches lie, not only those listed."""
        if format not in ("json", "arrow"):
            raise ValueError(f"format must be 'json' or 'arrow', got {format!r}")
        body: JSON = {"query": _query_payload(query), "mode": mode}
        if limit is not None:
            body["limit"] = limit
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if granularity is not None:
            body["granularity"] = granularity
        if include_events:
            body["include_events"] = True
        if density is not None:
            body["density"] = density
        # A query changes nothing, so it is safe to resend after a dropped connection.
        if format == "arrow":
            import pyarrow as pa

            payload = self._request("POST", f"/datasets/{self._name(name)}/query", body=body, idempotent=True,
                                    accept=ARROW_STREAM)
            table = pa.ipc.open_stream(payload).read_all()
            head = json.loads((table.schema.metadata or {}).get(b"seqsketch.answer", b"{}"))
            return QueryResult(head, table.replace_schema_metadata(None))
        return QueryResult(self._request("POST", f"/datasets/{self._name(name)}/query", body=body,
                                         idempotent=True))
