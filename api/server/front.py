"""The HTTP front of ``seqsketch serve``: every connection on an asyncio event loop, parsed strictly by h11.

A request is read whole before the application sees it — its head within :attr:`Limits.head_s` of the
connection's first byte (or of the last answer, on a kept-alive connection), its body under the route's size
limit and within :attr:`Limits.body_idle_s` between two pieces — so a slow or stalled client holds a
coroutine, never a thread.  What the front refuses it answers itself, in the service's JSON error shape,
and closes the connection:

======  =================================================================================================
status  when
======  =================================================================================================
400     malformed framing: a bad request line or header, a bad chunk (size, CRLF, extension, trailer), a
        ``Content-Length`` that disagrees with itself, no ``Host``, an HTTP version other than 1.0 / 1.1
408     the head or the body did not arrive in time
413     ``Content-Length``, or the sizes a chunked body declares, past the route's limit
414     a request line past :attr:`Limits.head_bytes`
431     a head past :attr:`Limits.head_bytes`
======  =================================================================================================

The application (the Flask app, WSGI) runs on a thread pool with the body in memory.  A watch's stream is
handed back: the route checks the request and leaves a :class:`~api.streaming.StreamSpec` in the
environ (:mod:`api.streaming`), and the front then serves the stream on the loop
(:mod:`api.server.streams`), so an open stream costs a coroutine and a socket.  Answers are written as the
application makes them, a piece at a time.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import h11

from api.streaming import STREAM_KEY, STREAMS_KEY

_APPEND_PATH = re.compile(r"/v1/datasets/[^/]+/events/?")
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 414: b"URI Too Long",
            431: b"Request Header Fields Too Large", 500: b"Internal Server Error"}


@dataclass(frozen=True)
class Limits:
    """How long and how much the front waits for and takes (``seqsketch serve`` sets them)."""

    #: a request's head must arrive within this long of its first byte (s)
    head_s: float = 10.0
    #: a kept-alive connection with no new request for this long is closed (s)
    keepalive_s: float = 5.0
    #: at most this long between two pieces of a body (s)
    body_idle_s: float = 10.0
    #: a whole body within this long of its head (s)
    body_s: float = 120.0
    #: request line and headers together
    head_bytes: int = 16 * 1024
    #: an append's body (``POST /v1/datasets/{name}/events``)
    append_bytes: int = 64 * 1024 * 1024
    #: any other request's body
    request_bytes: int = 1024 * 1024
    #: how long a client may take to read a piece of an answer (s)
    write_s: float = 60.0

    def body_limit(self, method: str, path: str) -> int:
        if method == "POST" and _APPEND_PATH.fullmatch(path):
            return self.append_bytes
        return self.request_bytes


class Refused(Exception):
    """A request the front answers itself: status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _said(err: Exception) -> str:
    """h11's reason, its bytes shown as text and cut short."""
    text = re.sub(r"bytearray\((b'.*?')\)", r"\1", str(err))
    return text if len(text) <= 200 else text[:197] + "..."


def error_bytes(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class ChunkSizes:
    """The sizes a chunked body declares, read alongside h11 (which reports data, not the sizes): a chunk
    that claims more than the limit is refused before its bytes come."""

    def __init__(self) -> None:
        self.line = bytearray()
        self.remaining = 0  # data bytes (and its CRLF) of the current chunk still to pass
        self.declared = 0
        self.done = False
        #: what is wrong with the framing, where h11 lets it pass
        self.bad = ""

    def feed(self, data: bytes) -> int:
        """Take the next bytes of the body; returns the total size declared so far."""
        at = 0
        while at < len(data) and not self.done:
            if self.remaining:
                step = min(self.remaining, len(data) - at)
                self.remaining -= step
                at += step
                continue
            end = data.find(b"\n", at)
            if end < 0:
                self.line += data[at:]
                if len(self.line) > 4096:  # (h11 refuses such a line itself)
                    self.done = True
                break
            self.line += data[at:end]
            at = end + 1
            head, _, extension = bytes(self.line).rstrip(b"\r").partition(b";")
            self.line.clear()
            if any(b < 0x20 and b != 0x09 or b == 0x7F for b in extension):
                self.bad = "a chunk extension holds a control character"
                self.done = True
                break
            text = head.strip()
            if not text:
                continue  # the CRLF after a chunk's data
            try:
                size = int(text, 16)
            except ValueError:
                self.done = True  # (h11 refuses it)
                break
            if size == 0:
                self.done = True  # trailers follow; h11 reads them
                break
            self.declared += size
            self.remaining = size + 2
        return self.declared


@dataclass
class Request:
    """A request read whole."""

    method: str
    target: bytes
    version: str
    headers: list[tuple[bytes, bytes]]
    body: bytes


class Connection:
    """One client connection: requests read, answered, and kept alive while the client wants."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: Limits,
                 app: Callable[..., Iterable[bytes]], executor: Executor, *, server_name: str, server_port: int,
                 serve_stream: Callable[[Connection, Any, list[tuple[str, str]]], Any] | None = None,
                 closing: asyncio.Event | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.app = app
        self.executor = executor
        self.server_name = server_name
        self.server_port = server_port
        self.serve_stream = serve_stream
        self.closing = closing or asyncio.Event()
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.head_bytes)
        peer = writer.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else ("", 0)
        #: an answer is being made (a graceful stop waits for it)
        self.busy = False
        #: requests answered on this connection
        self.answered = 0

    # --------------------------------------------------------------------------------------------- reading
    async def _receive(self, timeout: float) -> bool:
        """Read more bytes into h11 within ``timeout``; False when the client closed its side."""
        data = await asyncio.wait_for(self.reader.read(65536), timeout)
        self.h11.receive_data(data)
        return bool(data)

    async def _head(self) -> Request | None:
        """The next request's head (None when the client closed the connection between requests, stayed
        silent past the keep-alive time, or the server is stopping and nothing of a request came yet)."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None  # set once the first byte of this request came
        idle_until = loop.time() + (self.limits.keepalive_s if self.answered else self.limits.head_s)
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as err:
                raise self._malformed(err) from None
            if isinstance(event, h11.Request):
                # (h11 bounds a head only while it waits for more of it: one that came whole is measured here)
                if len(event.target) > self.limits.head_bytes:
                    raise Refused(414, "uri_too_long",
                                  f"the request target is longer than {self.limits.head_bytes} bytes")
                if sum(len(k) + len(v) + 4 for k, v in event.headers) > self.limits.head_bytes:
                    raise Refused(431, "request_header_fields_too_large",
                                  f"the request's headers are longer than {self.limits.head_bytes} bytes")
                return Request(event.method.decode("ascii", "replace"), event.target,
                               event.http_version.decode("ascii", "replace"), list(event.headers), b"")
            if isinstance(event, h11.ConnectionClosed):
                return None
            if event is not h11.NEED_DATA:
                raise Refused(400, "bad_request", "malformed HTTP request")
            if deadline is None:
                if self.closing.is_set() or loop.time() >= idle_until:
                    return None  # (an idle connection, closed quietly)
                wait = min(0.25, idle_until - loop.time())  # (a stop is noticed between two waits)
            else:
                wait = deadline - loop.time()
            try:
                got = await self._receive(max(0.0, wait))
            except TimeoutError:
                if deadline is None:
                    continue
                raise Refused(408, "request_timeout",
                              f"the request's head did not arrive within {self.limits.head_s:g} s") from None
            if got and deadline is None:
                deadline = loop.time() + self.limits.head_s

    def _malformed(self, err: h11.RemoteProtocolError) -> Refused:
        buffered = self.h11.trailing_data[0]
        line = buffered.split(b"\n", 1)[0]
        if len(line) >= self.limits.head_bytes or (b"\n" not in buffered and
                                                    len(buffered) >= self.limits.head_bytes):
            return Refused(414, "uri_too_long", f"the request line is longer than {self.limits.head_bytes} bytes")
        if len(buffered) >= self.limits.head_bytes:
            return Refused(431, "request_header_fields_too_large",
                           f"the request's head is longer than {self.limits.head_bytes} bytes")
        return Refused(400, "bad_request", f"malformed HTTP request: {_said(err)}")

    async def _body(self, request: Request) -> bytes:
        """The request's body, under its route's limit and in time."""
        path = request.target.split(b"?", 1)[0].decode("latin-1")
        limit = self.limits.body_limit(request.method, urllib.parse.unquote(path))
        headers = {k.lower(): v for k, v in request.headers}
        length = headers.get(b"content-length")
        if length is not None and int(length) > limit:
            raise Refused(413, "payload_too_large", f"the request body ({int(length):,} bytes) is over the "
                          f"limit of {limit:,} bytes")
        sizes = ChunkSizes() if b"chunked" in headers.get(b"transfer-encoding", b"").lower() else None
        if sizes is not None and sizes.feed(self.h11.trailing_data[0]) > limit:
            raise Refused(413, "payload_too_large", f"the chunked request body declares more than the limit of "
                          f"{limit:,} bytes")
        if sizes is not None and sizes.bad:
            raise Refused(400, "bad_request", f"malformed request body: {sizes.bad}")
        if self.h11.they_are_waiting_for_100_continue:
            self.writer.write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.body_s
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as err:
                raise Refused(400, "bad_request", f"malformed request body: {_said(err)}") from None
            if event is h11.NEED_DATA:
                wait = min(self.limits.body_idle_s, deadline - loop.time())
                try:
                    data = await asyncio.wait_for(self.reader.read(65536), max(0.0, wait))
                except TimeoutError:
                    raise Refused(408, "request_timeout", "the request's body did not arrive in time (at most "
                                  f"{self.limits.body_idle_s:g} s between pieces, {self.limits.body_s:g} s "
                                  "in all)") from None
                if sizes is not None and sizes.feed(data) > limit:
                    raise Refused(413, "payload_too_large", f"the chunked request body declares more than the "
                                  f"limit of {limit:,} bytes")
                if sizes is not None and sizes.bad:
                    raise Refused(400, "bad_request", f"malformed request body: {sizes.bad}")
                self.h11.receive_data(data)
                if not data and self.h11.their_state is not h11.DONE:
                    raise Refused(400, "bad_request", "the connection closed before the request body ended")
                continue
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise Refused(413, "payload_too_large", f"the request body is over the limit of {limit:,} "
                                  "bytes")
                parts.append(bytes(event.data))
                continue
            if isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            raise Refused(400, "bad_request", "malformed request body")

    # --------------------------------------------------------------------------------------------- serving
    async def serve(self) -> None:
        """Requests until the client or the server closes the connection."""
        try:
            while True:
                try:
                    request = await self._head()
                    if request is None:
                        return
                    self.busy = True
                    self._check(request)
                    request.body = await self._body(request)
                except Refused as refused:
                    await self._refuse(refused)
                    return
                keep = await self._answer(request)
                self.answered += 1
                self.busy = False
                if not keep or self.closing.is_set() or self.h11.our_state is h11.MUST_CLOSE:
                    return
                try:
                    self.h11.start_next_cycle()
                except h11.LocalProtocolError:
                    return
        except (ConnectionError, TimeoutError, h11.LocalProtocolError):
            return
        finally:
            self.busy = False
            await self._close()

    def _check(self, request: Request) -> None:
        if request.version not in ("1.0", "1.1"):
            raise Refused(400, "bad_request", f"HTTP/{request.version} is not served; use HTTP/1.1")
        names = {k.lower() for k, v in request.headers if k.lower() != b"host" or v.strip()}
        if b"host" not in names:
            raise Refused(400, "bad_request", "the request has no Host header")
        if b"content-length" in names and b"transfer-encoding" in names:  # (the shape of request smuggling)
            raise Refused(400, "bad_request", "a request may not carry both Content-Length and Transfer-Encoding")

    async def _refuse(self, refused: Refused) -> None:
        body = error_bytes(refused.code, refused.message)
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                   ("Connection", "close")]
        try:
            if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                self.writer.write(self.h11.send(h11.Response(status_code=refused.status, headers=headers,
                                                             reason=_REASONS.get(refused.status, b"Error"))))
                self.writer.write(self.h11.send(h11.Data(data=body)))
                self.writer.write(self.h11.send(h11.EndOfMessage()))
            else:  # (h11 no longer takes a response: write one of our own)
                head = f"HTTP/1.1 {refused.status} Refused\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
                self.writer.write(head.encode() + b"\r\n" + body)
            await asyncio.wait_for(self.writer.drain(), self.limits.write_s)
        except (ConnectionError, TimeoutError, h11.LocalProtocolError):
            pass

    async def _close(self) -> None:
        try:
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
        except (ConnectionError, TimeoutError, OSError):
            pass

    async def _answer(self, request: Request) -> bool:
        """Run the application for ``request`` and write its answer; False: close the connection after."""
        environ = self._environ(request)
        loop = asyncio.get_running_loop()
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., None]:
            if exc_info and started.get("sent"):
                raise exc_info[1].with_traceback(exc_info[2])
            started["status"], started["headers"] = status, headers
            return lambda _data: None  # (the legacy write callable: unused by Flask)

        def first() -> tuple[Iterator[bytes] | None, list[bytes]]:
            """Run the application up to its first two pieces: an answer of one piece (most are) is then
            whole — and closed here, in this one trip to the pool (no iterator is left: None)."""
            body = self.app(environ, start_response)
            chunks = iter(body)
            started["close"] = getattr(body, "close", None)
            pieces: list[bytes] = []
            for _ in range(1 if environ.get(STREAM_KEY) is not None else 2):
                piece = next(chunks, None)
                if piece is None:
                    closer = started.pop("close")
                    if closer is not None:
                        closer()
                    return None, pieces
                pieces.append(piece)
            return chunks, pieces

        try:
            chunks, pieces = await loop.run_in_executor(self.executor, first)
        except Exception:  # (the app answers its own errors; this is the front's last word)
            await self._refuse(Refused(500, "internal", "internal server error; see the server log"))
            return False
        close: Callable[[], None] | None = started.get("close")
        spec = environ.get(STREAM_KEY)
        code, _, reason = str(started["status"]).partition(" ")
        status = int(code)
        headers = [(k, v) for k, v in started["headers"] if k.lower() not in ("connection", "transfer-encoding")]
        try:
            if spec is not None and self.serve_stream is not None:
                if close is not None:
                    await loop.run_in_executor(self.executor, close)
                    close = None
                stream_headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                await self.serve_stream(self, spec, stream_headers)  # (its own 200 OK, chunked)
                return False
            self.writer.write(self.h11.send(h11.Response(status_code=status, headers=headers,
                                                         reason=reason.encode("latin-1", "replace"))))
            for made in pieces:
                if made:
                    self.writer.write(self.h11.send(h11.Data(data=made)))
            if chunks is not None:
                await asyncio.wait_for(self.writer.drain(), self.limits.write_s)
            while chunks is not None:  # (more pieces may follow)
                piece = await loop.run_in_executor(self.executor, _next_piece, chunks)
                if piece is None:
                    break
                if piece:
                    self.writer.write(self.h11.send(h11.Data(data=piece)))
                    await asyncio.wait_for(self.writer.drain(), self.limits.write_s)
            self.writer.write(self.h11.send(h11.EndOfMessage()))
            await asyncio.wait_for(self.writer.drain(), self.limits.write_s)
        finally:
            if close is not None:
                await loop.run_in_executor(self.executor, close)
        return True

    def _environ(self, request: Request) -> dict[str, Any]:
        path, _, query = request.target.partition(b"?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": urllib.parse.unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query.decode("latin-1"),
            "SERVER_NAME": self.server_name,
            "SERVER_PORT": str(self.server_port),
            "SERVER_PROTOCOL": f"HTTP/{request.version}",
            "REMOTE_ADDR": self.peer[0],
            "REMOTE_PORT": str(self.peer[1]),
            "REQUEST_URI": request.target.decode("latin-1"),
            "RAW_URI": request.target.decode("latin-1"),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(request.body),
            "wsgi.input_terminated": True,
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "CONTENT_LENGTH": str(len(request.body)),
            STREAMS_KEY: self.serve_stream is not None,
        }
        for name, value in request.headers:
            key = name.decode("latin-1").upper()
            if "_" in key:
                continue  # (X_Forwarded_For would read as X-Forwarded-For: such headers are dropped)
            key = key.replace("-", "_")
            text = value.decode("latin-1")
            if key == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = text
                continue
            if key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
                continue  # (the body is read whole: its length is what was read)
            key = "HTTP_" + key
            environ[key] = f"{environ[key]},{text}" if key in environ else text
        return environ

    # ---------------------------------------------------------------------------------- a stream's writes
    def start_stream(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.writer.write(self.h11.send(h11.Response(status_code=status, headers=headers, reason=b"OK")))

    async def send(self, text: str) -> None:
        self.writer.write(self.h11.send(h11.Data(data=text.encode("utf-8"))))
        await asyncio.wait_for(self.writer.drain(), self.limits.write_s)

    async def end_stream(self) -> None:
        try:
            self.writer.write(self.h11.send(h11.EndOfMessage()))
            await asyncio.wait_for(self.writer.drain(), self.limits.write_s)
        except (ConnectionError, TimeoutError, h11.LocalProtocolError):
            pass

    async def client_gone(self) -> None:
        """Return when the client closes its side of the connection (a stream's client sends nothing)."""
        while True:
            data = await self.reader.read(4096)
            if not data:
                return


def _next_piece(chunks: Iterator[bytes]) -> bytes | None:
    """An answer's next piece, or None at its end."""
    return next(chunks, None)
