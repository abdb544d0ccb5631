"""Fuzzing a real ``seqsketch serve`` on a loopback port, bounded in time, while it holds 200 open watch
streams and 16 slow request bodies: requests schemathesis generates from the server's own OpenAPI document
(data that fits and data that does not) and requests with their HTTP framing mutated byte by byte.

Every answer is below 500 and a 4xx is the JSON error shape; a refused request writes nothing (the store's
files and the catalog are as before); and the health check, probed every 50 ms on its own connection
throughout, answers within a second every time."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from api import service
from api.client import Client
from tests.generators import scaled
from tests.helpers import seqsketch_serve
from tests.system.test_server_front import Stream, raw

QUERY = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case WITHIN 10 days "
         "STRATEGY skip_till_any_match")
#: the whole fuzzing run stops drawing after this long (s); what ran is checked
BUDGET_S = 60.0


class Load:
    """200 open streams, 16 slow bodies (sent again as each is answered) and a health probe, on threads."""

    def __init__(self, url: str, stream_path: str) -> None:
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.streams = [Stream(url, stream_path) for _ in range(200)]
        self.stop = threading.Event()
        self.health_ms: list[float] = []
        self.health_errors: list[str] = []
        self.threads = [threading.Thread(target=self._probe, daemon=True)]
        self.threads += [threading.Thread(target=self._slow, daemon=True) for _ in range(16)]
        for t in self.threads:
            t.start()

    def _probe(self) -> None:
        client = Client(self.url, retries=0, timeout=5)
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                client.health()
                self.health_ms.append(1000 * (time.perf_counter() - started))
            except Exception as err:  # (counted: the health check must always answer)
                self.health_errors.append(repr(err))
            self.stop.wait(0.05)

    def _slow(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                    s.sendall(b"POST /v1/datasets/running/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"qu")
                    while not self.stop.is_set() and s.recv(4096):
                        pass  # (the 408 comes after the body's idle time; then another)
            except OSError:
                self.stop.wait(0.1)

    def close(self) -> None:
        self.stop.set()
        for s in self.streams:
            s.close()
        for t in self.threads:
            t.join(timeout=35)


def fingerprint(home: Path) -> tuple[Any, ...]:
    """What a refused request must not change: every dataset file, the catalog's datasets and versions."""
    from api.catalog import open_catalog

    root = home / "datasets"
    files = [(str(p.relative_to(root)), hashlib.sha256(p.read_bytes()).hexdigest())
             for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".lock")]
    catalog = open_catalog(f"sqlite:///{(home / 'catalog.db').as_posix()}")
    try:
        rows = catalog.list_datasets(include_deleted=True)
        return tuple(files), repr(rows), repr([catalog.index_versions(r["name"]) for r in rows])
    finally:
        catalog.dispose()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[tuple[str, Path, Load]]:
    home = tmp_path_factory.mktemp("fuzz-server-home")
    (home / "inputs").mkdir()
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")], engine="local")
    env = {"SEQSKETCH_MAX_REQUEST_BYTES": "65536", "SEQSKETCH_MAX_APPEND_BYTES": "262144",
           "SEQSKETCH_QUERY_TIMEOUT_MS": "5000", "SEQSKETCH_REQUEST_BODY_IDLE_S": "2",
           "SEQSKETCH_INPUT_ROOTS": str(home / "inputs")}
    with seqsketch_serve(home, env=env) as (url, _):
        watch = Client(url).create_watch("running", QUERY)
        load = Load(url, f"/v1/datasets/running/watches/{watch['id']}/stream")
        assert all(s.wait_for(b"event: progress", 30) for s in load.streams)
        try:
            yield url, home, load
        finally:
            load.close()


def check(url: str, home: Path, where: str, status: int, body: bytes, before: tuple[Any, ...]) -> None:
    assert status < 500, f"{where} → {status}: {body[:300]!r}"
    if status >= 400:
        error = json.loads(body)["error"]
        assert error["code"] and error["message"], where
        assert fingerprint(home) == before, f"{where} → {status}: a refused request changed the store"


FUZZ = scaled(60, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
              least=40, derandomize=True)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_generated_requests_never_get_a_5xx(served: tuple[str, Path, Load], mode: GenerationMode) -> None:
    url, home, load = served
    schema = schemathesis.openapi.from_url(url + "/v1/openapi.json")
    strategy = schema.as_strategy(generation_mode=mode)
    started = time.monotonic()
    seen: set[tuple[str, str]] = set()

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        if time.monotonic() - started > BUDGET_S:
            return
        case = data.draw(strategy, label="case")
        before = fingerprint(home)
        response = case.call(base_url=url, timeout=30)
        check(url, home, f"{case.method} {case.formatted_path}", response.status_code, response.content, before)
        seen.add((case.method, case.path))

    run()
    assert len(seen) >= 6, f"too few operations exercised: {sorted(seen)}"
    assert not load.health_errors and load.health_ms and max(load.health_ms) < 1000, (
        load.health_errors[:3], max(load.health_ms, default=None))


VALID = [
    b"POST /v1/datasets/running/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n2f\r\n[{\"type\": \"fz\", \"ts\": \"2031-01-01T00:00:00Z\"}]\r\n0\r\n\r\n",
    b"POST /v1/datasets/running/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 49\r\n\r\n{\"query\": \"PATTERN SEQ(A a, B b)\", \"mode\": \"exact\"}",
    b"GET /v1/datasets/running?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n",
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid request with a few bytes replaced, inserted or removed, or cut short."""
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        if len(data) < 2:
            break
        at = draw(st.integers(1, len(data) - 1))
        kind = draw(st.sampled_from(("replace", "insert", "delete", "cut")))
        byte = draw(st.sampled_from([0, 1, 9, 10, 13, 32, 45, 58, 59, 127, 255, 48, 70, 102, 0x7B]))
        if kind == "replace":
            data[at] = byte
        elif kind == "insert":
            data[at:at] = bytes([byte]) * draw(st.integers(1, 3))
        elif kind == "delete":
            del data[at]
        else:
            del data[at:]
    return bytes(data)


@settings(scaled(150, HealthCheck.function_scoped_fixture, HealthCheck.too_slow, least=60, derandomize=True))
@given(data=mutated())
def test_mutated_framing_never_gets_a_5xx(served: tuple[str, Path, Load], data: bytes) -> None:
    url, home, load = served
    before = fingerprint(home)
    status, _, body = raw(url, data, wait=4, half_close=True)  # (a request cut short ends there)
    assert status != 0, f"no answer to {data[:80]!r}"
    if status >= 400 and not body.startswith(b"{"):
        body = body.split(b"\r\n", 1)[-1]  # (a chunked error answer: its one chunk)
    check(url, home, repr(data[:80]), status, body if status >= 400 else b"", before)
    assert not load.health_errors and max(load.health_ms) < 1000
