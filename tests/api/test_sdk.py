"""The SDK's transport on real sockets: retries only for idempotent calls, typed errors per code, results."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from api.client import (
    AuthError,
    BadRequestError,
    Client,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    QueryError,
    QueryResult,
    SeqsketchAPIError,
    ServerError,
    ServiceUnavailableError,
)
from api.client_errors import error_for


class DroppingServer:
    """A loopback listener that accepts connections and closes them at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.recv(65536)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def dropping() -> Iterator[DroppingServer]:
    server = DroppingServer()
    yield server
    server.close()


def test_idempotent_calls_are_retried_after_connection_errors(dropping: DroppingServer) -> None:
    client = Client(dropping.url, retries=2, backoff=0.0, timeout=5)
    with pytest.raises(ServiceUnavailableError) as info:
        client.datasets()
    assert info.value.code == "connection_error" and dropping.url in info.value.message
    assert dropping.accepted == 3
    with pytest.raises(ServiceUnavailableError):
        client.query("d", "PATTERN a")  # a query changes nothing: retried too
    assert dropping.accepted == 6


def test_appends_and_builds_are_never_resent(dropping: DroppingServer) -> None:
    client = Client(dropping.url, retries=5, backoff=0.0, timeout=5)
    with pytest.raises(ServiceUnavailableError):
        client.append("d", [{"type": "a", "ts": 1}])
    with pytest.raises(ServiceUnavailableError):
        client.build("d", ["x.xes"])
    with pytest.raises(ServiceUnavailableError):
        client.delete("d")
    assert dropping.accepted == 3


def test_nothing_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServiceUnavailableError, match="cannot reach"):
        Client(f"http://127.0.0.1:{port}", retries=1, backoff=0.0).health()


@pytest.mark.parametrize("status, code, cls", [
    (400, "query_syntax", QueryError), (400, "query_semantic", QueryError),
    (400, "query_limit", QueryError), (400, "bad_request", BadRequestError),
    (400, "bad_input", BadRequestError), (401, "unauthorized", AuthError), (403, "forbidden", AuthError),
    (403, "input_not_allowed", BadRequestError), (404, "not_found", NotFoundError),
    (409, "conflict", ConflictError), (413, "payload_too_large", PayloadTooLargeError),
    (500, "internal", ServerError), (503, "catalog_out_of_date", ServiceUnavailableError),
])
def test_error_classes_follow_the_code_and_status(status: int, code: str, cls: type) -> None:
    err = error_for(status, {"error": {"code": code, "message": "m", "position": {"line": 1, "column": 9}}})
    assert type(err) is cls and isinstance(err, SeqsketchAPIError)
    assert (err.code, err.status, err.message, err.position) == (code, status, "m", {"line": 1, "column": 9})


def test_error_without_a_json_body() -> None:
    err = error_for(502, "<html>bad gateway</html>")
    assert isinstance(err, ServerError) and err.code == "http_502" and "bad gateway" in err.message


def test_query_result_accessors() -> None:
    raw = {"dataset": "d", "mode": "exact", "index_version": 2, "exists": True, "count": 2,
           "matches": [{"start_seq": 1, "end_seq": 3, "bindings": {"a": [1], "b": [3]}}],
           "intervals": [{"start_seq": 1, "end_seq": 3}], "truncated": True, "stats": {"total_ms": 1.0}}
    r = QueryResult(raw)
    assert (r.exists, r.count, r.truncated, r.mode, r.index_version) == (True, 2, True, "exact", 2)
    assert r.matches == raw["matches"] and r.intervals == raw["intervals"] and r.stats == {"total_ms": 1.0}
    assert r["dataset"] == "d"
    empty = QueryResult({"exists": False})
    assert (empty.exists, empty.count, empty.matches) == (False, None, [])
    assert (empty.intervals, empty.stats) == ([], {})


def test_query_result_summary_says_more_than_n_when_a_limit_stopped_the_search() -> None:
    match = {"start_seq": 1, "end_seq": 3, "bindings": {"a": [1]}}
    assert QueryResult({"exists": True, "count": 1, "matches": [match]}).summary() == "1 match"
    assert QueryResult({"exists": True, "count": 1200, "matches": [match] * 5,
                        "truncated": True}).summary() == "1,200 matches"
    stopped = QueryResult({"exists": True, "count": None, "matches": [match] * 5, "truncated": True})
    assert stopped.summary() == "more than 5 matches"
    assert QueryResult({"exists": True, "count": None}).summary() == "at least one match"  # RETURN exists
    assert QueryResult({"exists": False, "count": 0}).summary() == "0 matches"


def test_base_url_forms() -> None:
    assert Client("http://h:1").base == "http://h:1/v1"
    assert Client("http://h:1/v1/").base == "http://h:1/v1"
    assert "token=…" in repr(Client("http://h:1", token="secret")) and "secret" not in repr(
        Client("http://h:1", token="secret"))
