"""The service's limits, checked at the HTTP level on the real app with real files and a real catalog:

- per-request time (``QUERY_TIMEOUT_MS``): a query over it is answered on time with ``query_limit``;
- memory, counted as events a query may scan (``QUERY_MAX_EVENTS``): refused with ``query_limit``;
- result size (``QUERY_MAX_MATCHES``): the answer is cut and says ``truncated``; ``count`` stays whole when
  the search ended first, and is ``null`` when the limit stopped it (its first matches were certain);
- request size: appends over ``MAX_APPEND_BYTES`` and other requests over ``MAX_CONTENT_LENGTH`` are 413,
  with or without a Content-Length header, and leave the dataset unchanged.
"""

from __future__ import annotations

import gc
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.app import create_app
from api.state import service_state

N = 400  # alternating A, B: SEQ(A a, B b) under skip_till_any_match has N²/8 = 20,000 matches


def make_app(home: Path, **config: Any) -> Flask:
    inputs = home / "inputs"
    inputs.mkdir(exist_ok=True)
    return create_app({"SEQSKETCH_HOME": str(home),
                       "DATABASE_URL": f"sqlite:///{(home / 'catalog.db').as_posix()}",
                       "INPUT_ROOTS": [str(inputs)], **config})


def close(app: Flask) -> None:
    state = service_state(app)
    assert state.jobs is not None
    state.jobs.shutdown()
    state.catalog.dispose()


def build_ab(app: Flask, home: Path, name: str = "ab", n: int = N) -> None:
    (home / "inputs" / f"{name}.jsonl").write_text(
        "".join(json.dumps({"type": "AB"[i % 2], "ts": 1_600_000_000 + i}) + "\n" for i in range(n)))
    client = app.test_client()
    body = {"inputs": [f"{name}.jsonl"], "engine": "local"}
    response = client.post(f"/v1/datasets/{name}/builds", json=body)
    assert response.status_code == 202, response.json
    jobs = service_state(app).jobs
    assert jobs is not None
    jobs.wait(response.json["job_id"], timeout=120)
    assert client.get(f"/v1/datasets/{name}").json["events"] == n


@pytest.fixture
def limited(home: Path) -> Iterator[Flask]:
    """An app with small limits and the A/B dataset."""
    app = make_app(home, QUERY_MAX_MATCHES=5, MAX_APPEND_BYTES=20_000, MAX_CONTENT_LENGTH=4_000,
                   QUERY_TIMEOUT_MS=0)
    build_ab(app, home)
    yield app
    close(app)


def query(client: FlaskClient, text: str, **body: Any) -> Any:
    return client.post("/v1/datasets/ab/query", json={"query": text, **body})


def error_code(response: Any, status: int) -> str:
    assert response.status_code == status, response.get_data(as_text=True)
    assert set(response.json) == {"error"} and response.json["error"]["message"]
    return response.json["error"]["code"]


def store_state(home: Path, name: str = "ab") -> bytes:
    return (home / "datasets" / name / "store" / "manifest.json").read_bytes()


# --- result size --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["exact", "verified"])
def test_matches_are_cut_at_the_server_limit(limited: Flask, mode: str) -> None:
    client = limited.test_client()
    answer = query(client, "PATTERN SEQ(A a, B b) WITHIN 10 EVENTS STRATEGY skip_till_any_match", mode=mode)
    assert answer.status_code == 200, answer.json
    body = answer.json
    expected = sum(min(5, (N - 1 - i) // 2 + 1) for i in range(0, N, 2))  # B's within 9 events after an A
    assert body["count"] == expected and body["truncated"] is True and len(body["matches"]) == 5
    # A client limit below the server's is honoured; one above it is capped.
    assert len(query(client, "PATTERN SEQ(A a, B b)", mode=mode, limit=2).json["matches"]) == 2
    capped = query(client, "PATTERN SEQ(A a, B b)", mode=mode, limit=1000).json
    assert len(capped["matches"]) == 5 and capped["truncated"] is True and capped["count"] == N // 2


@pytest.mark.parametrize("mode", ["exact", "verified"])
def test_a_limit_stops_the_search_once_its_matches_are_certain(home: Path, mode: str) -> None:
    """Over a stream long enough for the engine to look up between windows, a limit ends the search: the
    first matches in answer order, ``count: null``, ``truncated``; ``RETURN count`` still counts them all."""
    app = make_app(home, QUERY_TIMEOUT_MS=0)
    try:
        build_ab(app, home, "long", 40_000)
        client = app.test_client()
        text = "PATTERN SEQ(A a, B b) WITHIN 100 EVENTS STRATEGY skip_till_any_match"
        body = client.post("/v1/datasets/long/query", json={"query": text, "mode": mode, "limit": 5}).json
        assert body["count"] is None and body["truncated"] is True and body["exists"] is True
        assert [(m["start_seq"], m["end_seq"]) for m in body["matches"]] == [(0, 1), (0, 3), (0, 5), (0, 7), (0, 9)]
        counted = client.post("/v1/datasets/long/query",
                              json={"query": text + " RETURN count", "mode": mode}).json
        # each A is followed within 100 events by the B's at odd offsets up to 99 (fewer near the end)
        assert counted["count"] == sum(min(50, (40_000 - a) // 2) for a in range(0, 40_000, 2))
    finally:
        close(app)


def test_answers_within_the_limit_are_not_truncated(limited: Flask) -> None:
    # The first six events (ts 1_600_000_000 + 0..5): three adjacent A, B pairs.
    text = ("PATTERN SEQ(A a, B b) WITHIN 2 EVENTS "
            "BETWEEN '2020-09-13T12:26:40Z' AND '2020-09-13T12:26:45Z'")
    body = query(limited.test_client(), text, mode="exact").json
    assert body["count"] == 3 and body["truncated"] is False and len(body["matches"]) == 3


# --- time ---------------------------------------------------------------------------------------------------


def test_a_query_over_the_time_limit_is_answered_on_time(home: Path) -> None:
    # The limit is far below the heavy query's cost on any machine (every subset of the B's after each A:
    # no engine ends it) and far above the cheap one's.
    app = make_app(home, QUERY_TIMEOUT_MS=300)
    try:
        build_ab(app, home, "big", n=1400)
        client = app.test_client()
        # A cheap query answers under the limit (asked first, on an idle machine).  A full garbage
        # collection of everything the test run has kept alive so far takes 150-470 ms: made now, it does
        # not fall due inside the cheap query and time it out.
        gc.collect()
        cheap = client.post("/v1/datasets/big/query", json={"query": "PATTERN SEQ(A a, B b) WITHIN 2 EVENTS",
                                                            "mode": "exact", "limit": 1})
        assert cheap.status_code == 200, cheap.json
        # every subset of the B's after each A: no engine finishes it
        text = "PATTERN SEQ(A a, B+ b) STRATEGY skip_till_any_match RETURN count"
        others = set(threading.enumerate())  # workers other tests abandoned are not this one's
        started = time.perf_counter()
        response = client.post("/v1/datasets/big/query", json={"query": text, "mode": "exact"})
        elapsed = time.perf_counter() - started
        assert error_code(response, 400) == "query_limit"
        assert "300 ms" in response.json["error"]["message"]
        assert elapsed < 5.0, f"the limit of 0.3 s was answered after {elapsed:.1f} s"
        # ... and its work is stopped, not left running for the seconds it would have taken
        workers = [t for t in threading.enumerate() if t.name == "seqsketch-query" and t not in others]
        for worker in workers:
            worker.join(2.0)
        assert not any(worker.is_alive() for worker in workers)
        log = service_state(app).catalog.recent_queries("big")
        assert any(entry.get("error_code") == "query_limit" for entry in log)
    finally:
        close(app)


# --- events scanned (memory) --------------------------------------------------------------------------------


def test_exact_queries_over_the_scan_limit_are_refused_before_work(home: Path) -> None:
    app = make_app(home, QUERY_MAX_EVENTS=N - 1)
    try:
        build_ab(app, home)
        client = app.test_client()
        response = query(client, "PATTERN SEQ(A a, B b)", mode="exact")
        assert error_code(response, 400) == "query_limit"
        assert f"{N:,}" in response.json["error"]["message"]
        # a question the type counts decide reads nothing: it is answered
        decided = query(client, "PATTERN SEQ(A a, X x)", mode="exact")
        assert decided.status_code == 200 and decided.json["count"] == 0
        assert decided.json["stats"]["events_scanned"] == 0
    finally:
        close(app)


def test_verified_queries_scan_no_more_than_the_limit(home: Path) -> None:
    """With a scan limit, a verified answer either scanned at most that many events or was refused."""
    app = make_app(home, QUERY_MAX_EVENTS=50)
    try:
        build_ab(app, home)
        client = app.test_client()
        for text in ("PATTERN SEQ(A a, B b)", "PATTERN SEQ(A a, Z z)", "PATTERN Z z"):
            response = query(client, text, mode="verified")
            if response.status_code == 200:
                assert response.json["stats"]["events_scanned"] <= 50, (text, response.json["stats"])
            else:
                assert error_code(response, 400) == "query_limit"
        # An absent type is pruned by the index: nothing to scan, so it answers.
        absent = query(client, "PATTERN Z z", mode="verified")
        assert absent.status_code == 200 and absent.json["exists"] is False
    finally:
        close(app)


# --- request size -------------------------------------------------------------------------------------------


def events_body(count: int, start: int = 1_700_000_000) -> bytes:
    return json.dumps([{"type": "C", "ts": start + i, "pad": "x" * 40} for i in range(count)]).encode()


def test_append_size_limit(limited: Flask, home: Path) -> None:
    client = limited.test_client()
    before = store_state(home)
    big = events_body(400)
    assert len(big) > 20_000
    response = client.post("/v1/datasets/ab/events", data=big, content_type="application/json")
    assert error_code(response, 413) == "payload_too_large"
    ndjson = b"\n".join(json.dumps(e).encode() for e in json.loads(big))
    response = client.post("/v1/datasets/ab/events", data=ndjson, content_type="application/x-ndjson")
    assert error_code(response, 413) == "payload_too_large"
    assert store_state(home) == before
    small = events_body(100)
    assert 4_000 < len(small) < 20_000  # over the general limit: appends have their own
    ok = client.post("/v1/datasets/ab/events", data=small, content_type="application/json")
    assert ok.status_code == 200 and ok.json["appended"] == 100


def test_other_requests_size_limit(limited: Flask, home: Path) -> None:
    client = limited.test_client()
    text = "PATTERN SEQ(A a, B b) WHERE " + " AND ".join(f"a.x != {i}" for i in range(600))
    response = client.post("/v1/datasets/ab/query", json={"query": text})
    assert error_code(response, 413) == "payload_too_large"
    build = client.post("/v1/datasets/other/builds", json={"inputs": ["ab.jsonl"] * 400})
    assert error_code(build, 413) == "payload_too_large"
    assert not (home / "datasets" / "other").exists()


@pytest.mark.parametrize("path,limit", [("/v1/datasets/ab/events", 20_000), ("/v1/datasets/ab/query", 4_000)])
def test_bodies_without_content_length_are_limited_too(limited: Flask, home: Path, path: str,
                                                       limit: int) -> None:
    """A chunked body (no Content-Length) over the limit is refused, not read to the end."""
    before = store_state(home)
    body = events_body(600) if path.endswith("events") else json.dumps(
        {"query": "PATTERN A a WHERE " + " AND ".join(f"a.x != {i}" for i in range(2000))}).encode()
    assert len(body) > limit
    environ = {"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True,
               "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_TYPE": "application/json"}
    response = limited.test_client().post(path, environ_overrides=environ)
    assert error_code(response, 413) == "payload_too_large"
    assert store_state(home) == before


def test_a_chunked_ndjson_batch_cut_at_a_line_end_is_not_half_appended(limited: Flask, home: Path) -> None:
    """Cut at the limit exactly after a complete line, the first part is valid NDJSON on its own: it must
    still be refused whole, never appended as a shorter batch."""
    lines = [json.dumps({"type": "C", "ts": 1_700_000_000 + i}).encode() + b"\n" for i in range(1000)]
    head, used = [], 0
    for line in lines:
        if used + len(line) > 20_000:
            break
        head.append(line)
        used += len(line)
    head[-1] = head[-1][:-1] + b" " * (20_000 - used) + b"\n"  # pad the last line to end at the limit
    body = b"".join(head) + b"".join(lines[len(head):])
    assert len(b"".join(head)) == 20_000 and len(body) > 20_000
    before = store_state(home)
    environ = {"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True,
               "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_TYPE": "application/x-ndjson"}
    response = limited.test_client().post("/v1/datasets/ab/events", environ_overrides=environ)
    assert error_code(response, 413) == "payload_too_large"
    assert store_state(home) == before
    # The same body within a larger limit is appended whole.
    limited.config["MAX_APPEND_BYTES"] = 1_000_000
    environ["wsgi.input"] = io.BytesIO(body)
    response = limited.test_client().post("/v1/datasets/ab/events", environ_overrides=environ)
    assert response.status_code == 200 and response.json["appended"] == 1000
