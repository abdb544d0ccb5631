"""The server holds, against a real ``seqsketch serve`` on a loopback port (gunicorn with the asyncio front):
malformed or slow requests get a JSON 4xx and hold no thread, open streams cost the API nothing, a closed
stream gives its slot back at once, a stop ends every stream with ``end`` within a second, limits answer
503/429 with Retry-After, watches belong to the token that made them and end with its revocation, and the
loose edges found by probing are answered as documented."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api import service
from api.client import BadRequestError, Client, NotFoundError, QueryError
from tests.helpers import seqsketch_serve

QUERY = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case WITHIN 10 days "
         "STRATEGY skip_till_any_match")


def raw(url: str, data: bytes, *, wait: float = 5.0, read_all: bool = True,
        half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` as it is on a new connection (``half_close``: then say nothing more will come); the
    answer's status, headers and body (status 0: none)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
                if not read_all and b"\r\n\r\n" in got and _whole_first_answer(got):
                    break
        except TimeoutError:
            pass
    if not got:
        return 0, {}, b""
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if ": " in line)}
    if "content-length" in headers:
        body = body[:int(headers["content-length"])]  # (the first answer's: more may follow, pipelined)
    return int(lines[0].split(" ")[1]), headers, body


def _whole_first_answer(got: bytes) -> bool:
    """Whether ``got`` holds the first answer's head and, when it names a length, its whole body (a head and
    its body may come in separate reads)."""
    head, _, body = got.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value.strip())
    return True


class Stream:
    """One raw SSE connection to a watch's stream, read on a thread."""

    def __init__(self, url: str, path: str, headers: dict[str, str] | None = None) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
        self.text = b""
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.text += chunk
        except OSError:
            pass
        self.closed.set()

    def wait_for(self, needle: bytes, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.text and time.monotonic() < deadline:
            time.sleep(0.02)
        return needle in self.text

    @property
    def status(self) -> int:
        line = self.text.split(b"\r\n", 1)[0]
        return int(line.split(b" ")[1]) if line.startswith(b"HTTP/") else 0

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    path = tmp_path_factory.mktemp("front-home")
    service.build_from_inputs(path, "running", [str(shared_data / "running-example.xes")], engine="local")
    return path


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[str]:
    with seqsketch_serve(home, env={"SEQSKETCH_MAX_REQUEST_BYTES": "65536"}) as (url, _):
        yield url


REQUEST = b"POST /v1/datasets/running/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
QUERYING = b"POST /v1/datasets/running/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(("data", "status"), [
    (REQUEST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400),  # a bad chunk size
    (REQUEST + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n", 400),  # a missing CRLF
    (REQUEST + b"Transfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n", 400),  # a negative size
    (REQUEST + b"Transfer-Encoding: chunked\r\n\r\n3;x=\x01\r\nabc\r\n0\r\n\r\n", 400),  # a control byte
    (REQUEST + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nbad trailer\r\n\r\n", 400),
    (REQUEST + b"Transfer-Encoding: chunked\r\n\r\nfffffffffffff\r\nabc", 413),  # a chunk past the limit
    (QUERYING + b"Content-Length: 999999999\r\n\r\n{", 413),
    (REQUEST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400),
    (REQUEST + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
    (b"GET /v1/" + b"a" * 20000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414),
    (b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Y: " + b"z" * 20000 + b"\r\n\r\n", 431),
    (b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: x\r\n\r\n", 400),
    (b"GET /v1/health HTTP/1.0\r\n\r\n", 400),  # no Host
    (b"GET /v1/health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"G(T /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (REQUEST + b"Transfer-Encoding: gzip\r\n\r\nabc", 400),
])
def test_malformed_framing_is_a_json_4xx_and_writes_nothing(server: str, data: bytes, status: int) -> None:
    before = Client(server).info("running")["events"]
    got, headers, body = raw(server, data)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] and error["message"]
    assert Client(server).info("running")["events"] == before


def test_a_slow_body_is_408_and_holds_no_thread(home: Path) -> None:
    with seqsketch_serve(home, env={"SEQSKETCH_REQUEST_BODY_IDLE_S": "1"}) as (url, _):
        status, _, body = raw(url, QUERYING + b"Content-Length: 100\r\n\r\n123456789", wait=10)
        assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"


def test_streams_and_slow_bodies_leave_the_api_answering(server: str) -> None:
    """200 open streams and 16 slow bodies (more than the server has threads) hold no request thread: the
    health check answers in well under a second throughout, queries answer, and every stream gets a match
    appended meanwhile."""
    client = Client(server, timeout=30)
    watch = client.create_watch("running", QUERY)
    path = f"/v1/datasets/running/watches/{watch['id']}/stream"
    streams = [Stream(server, path) for _ in range(200)]
    slow = []
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", int(server.rsplit(":", 1)[1])))
        s.sendall(QUERYING + b"Content-Length: 100\r\n\r\n{\"que")
        slow.append(s)
    try:
        assert all(s.wait_for(b"event: progress") for s in streams)
        for _ in range(20):
            started = time.monotonic()
            assert client.health()["status"] == "ok"
            assert time.monotonic() - started < 1.0
        answer = client.query("running", "PATTERN SEQ('register request' r, 'decide' d) PARTITION BY case")
        assert answer.count and answer.count > 0
        client.append("running", [{"type": "register request", "ts": "2011-02-01T09:00:00Z", "case": "front"},
                                  {"type": "pay compensation", "ts": "2011-02-01T10:00:00Z", "case": "front"}])
        assert all(s.wait_for(b'"case": "front"') for s in streams)
    finally:
        for s in streams:
            s.close()
        for sock in slow:
            sock.close()


def test_limits_answer_503_and_429_and_a_closed_stream_gives_its_slot_back(home: Path) -> None:
    env = {"SEQSKETCH_MAX_STREAMS_PER_TOKEN": "2"}
    with seqsketch_serve(home, env=env, workers=1) as (url, _):
        watch = Client(url).create_watch("running", QUERY)
        path = f"/v1/datasets/running/watches/{watch['id']}/stream"
        first, second = Stream(url, path), Stream(url, path)
        assert first.wait_for(b"event: progress") and second.wait_for(b"event: progress")
        status, headers, body = raw(url, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(),
                                    read_all=False, wait=3)
        assert status == 429 and headers["retry-after"] and json.loads(body.split(b"\r\n")[0] if body.startswith(
            b"{") else body)["error"]["code"] == "too_many_streams"
        first.close()
        deadline = time.monotonic() + 2.0  # the closed stream is noticed at once: its slot is free again
        while True:
            third = Stream(url, path)
            if third.wait_for(b"HTTP/1.1", 2) and third.status == 200:
                break
            third.close()
            assert time.monotonic() < deadline, "the closed stream kept its slot"
            time.sleep(0.1)
        assert third.wait_for(b"event: progress")
        third.close()
        second.close()
    with seqsketch_serve(home, env={"SEQSKETCH_MAX_STREAMS": "1"}, workers=1) as (url, _):
        watch = Client(url).create_watch("running", QUERY)
        path = f"/v1/datasets/running/watches/{watch['id']}/stream"
        one = Stream(url, path)
        assert one.wait_for(b"event: progress")
        status, headers, _ = raw(url, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(), read_all=False)
        assert status == 503 and headers["retry-after"]
        one.close()


def test_a_stop_ends_every_stream_with_an_end_event_within_a_second(home: Path) -> None:
    with seqsketch_serve(home) as (url, process):
        watch = Client(url).create_watch("running", QUERY)
        path = f"/v1/datasets/running/watches/{watch['id']}/stream"
        streams = [Stream(url, path) for _ in range(5)]
        assert all(s.wait_for(b"event: progress") for s in streams)
        process.terminate()
        started = time.monotonic()
        assert all(s.wait_for(b"event: end", timeout=1.0) for s in streams), [s.text[-200:] for s in streams]
        assert time.monotonic() - started < 1.5
        assert all(b'"resume": true' in s.text for s in streams)
        process.wait(timeout=20)


def test_watches_belong_to_their_token_and_end_with_its_revocation(home: Path) -> None:
    from api.auth import create_token, revoke_token
    from api.catalog import open_catalog

    catalog = open_catalog(f"sqlite:///{(home / 'catalog.db').as_posix()}")
    try:
        secrets = {name: create_token(catalog, f"{name}-owner", scope)[1]
                   for name, scope in (("a", "read"), ("b", "read"), ("w", "write"))}
        with seqsketch_serve(home) as (url, _):
            a, b, w = (Client(url, secrets[k]) for k in "abw")
            watch = a.create_watch("running", QUERY)
            assert watch["owner"] == "a-owner"
            for other in (b,):
                assert other.watches("running") == []
                with pytest.raises(NotFoundError):
                    other._request("GET", f"/datasets/running/watches/{watch['id']}")
                with pytest.raises(NotFoundError):
                    other.delete_watch("running", watch["id"])
                with pytest.raises(NotFoundError):
                    next(iter(other.watch("running", watch_id=watch["id"])))
            assert watch["id"] in [x["id"] for x in w.watches("running")]  # (with other tests' watches)
            assert [x["id"] for x in a.watches("running")] == [watch["id"]]
            path = f"/v1/datasets/running/watches/{watch['id']}/stream"
            stream = Stream(url, path, {"Authorization": f"Bearer {secrets['a']}"})
            assert stream.wait_for(b"event: progress")
            revoke_token(catalog, "a-owner")
            started = time.monotonic()
            assert stream.wait_for(b"event: end", timeout=1.5)
            assert b"was revoked" in stream.text and time.monotonic() - started < 1.5
            assert stream.closed.wait(2)
            w.delete_watch("running", watch["id"])  # a write token may
    finally:
        for name in ("b-owner", "w-owner"):
            revoke_token(catalog, name)
        catalog.dispose()


def test_the_loose_edges_are_refused_as_documented(server: str) -> None:
    client = Client(server)
    before = client.info("running")["events"]
    for bad, where in ((float("nan"), "record 0"), (float("inf"), "record 0")):
        with pytest.raises(BadRequestError, match="not a finite number") as err:
            client.append("running", [{"type": "x", "ts": "2011-03-01T00:00:00Z", "v": bad}])
        assert where in str(err.value)
    status, _, body = raw(server, REQUEST + b"Content-Length: 50\r\n\r\n"
                          + b'[{"type": "x", "ts": 1300000000, "v": 1e309}]     ')
    assert status == 400 and b"not a finite number" in body
    status, _, body = raw(server, REQUEST + b"Content-Length: 10040\r\n\r\n"
                          + b'[{"type": "x", "ts": 1300000000, "v": ' + b"9" * 10000 + b"}]")
    assert status == 400 and b"set_int_max_str_digits" not in body and b"digits" in body
    with pytest.raises(QueryError, match="outside the signed 64-bit range") as err:
        client.query("running", "PATTERN SEQ(A a) WHERE a.x > " + "9" * 10000)
    assert "set_int_max_str_digits" not in str(err.value)
    assert client.info("running")["events"] == before
    watch = client.create_watch("running", QUERY)
    status, _, body = raw(server, f"GET /v1/datasets/running/watches/{watch['id']}/stream?cursor=%D9%A3:0 "
                                  "HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(), read_all=False)
    assert status == 400 and b"not a cursor" in body  # (an Arabic-Indic digit is not a digit here)
    with pytest.raises(QueryError, match="expected 'now', 'start' or an ISO 8601 time"):
        client.create_watch("running", QUERY, start="-1")
    client.delete_watch("running", watch["id"])


def test_a_dataset_deleted_takes_its_watches(tmp_path: Path, shared_data: Path) -> None:
    service.build_from_inputs(tmp_path, "gone", [str(shared_data / "running-example.xes")], engine="local")
    with seqsketch_serve(tmp_path) as (url, _):
        client = Client(url)
        watch = client.create_watch("gone", QUERY)
        stream = Stream(url, f"/v1/datasets/gone/watches/{watch['id']}/stream")
        assert stream.wait_for(b"event: progress")
        client.delete("gone")
        assert stream.wait_for(b"event: end", timeout=2)
        with pytest.raises(NotFoundError):
            client.watches("gone")
        with pytest.raises(NotFoundError):
            client._request("GET", f"/datasets/gone/watches/{watch['id']}")

