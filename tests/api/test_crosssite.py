"""What a page in the user's browser, a rebound DNS name, a proxy or a careless client can do to a running
server — over real HTTP on loopback (docs/contract.md §5.5 cross-site safety; docs/operations.md §Guarantees).

Requests are sent raw (``http.client``), exactly as a browser or ``curl`` would send them, so that nothing
in an SDK adds the headers the rules look for.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from api.auth import create_token
from api.client import Client
from api.state import service_state
from exact.events import to_records
from exact.store import EventStore, dataset_dir, store_dir
from tests.helpers import serve

EVIL = "http://evil.example"


def send(url: str, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, Any, Any]:
    """One raw request; returns (status, decoded JSON body or None, response headers)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host="Host" in headers, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None), response.headers
    finally:
        conn.close()


def events_of(home: Path, name: str) -> list[dict[str, Any]]:
    return to_records(EventStore.open(store_dir(dataset_dir(name, home))).read_table())


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[tuple[str, Path]]:
    """A token-less server with the running example built, allowing one extra origin."""
    home = tmp_path_factory.mktemp("xsite") / "home"
    with serve(home, shared_data, ALLOWED_ORIGINS="https://console.example:8443") as (url, _app):
        client = Client(url)
        assert client.wait(client.build("run", ["running-example.xes"], engine="local")["job_id"],
                           timeout=120)["state"] == "succeeded"
        yield url, home


def test_a_cross_site_form_post_cannot_rebuild_or_append(open_server: tuple[str, Path]) -> None:
    url, home = open_server
    before = events_of(home, "run")
    build = json.dumps({"inputs": ["running-example.xes"], "format": "text", "engine": "local",
                        "replace": True}).encode()
    # the attack of the issue: a simple (no-preflight) request from a foreign page
    status, body, _ = send(url, "POST", "/v1/datasets/run/builds", build, Content_Type="text/plain",
                           Origin=EVIL)
    assert status == 403 and body["error"]["code"] == "forbidden"
    assert "evil.example" in body["error"]["message"]
    # the same body without an Origin (curl, a form post some browsers send without one): wrong media type
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, body, _ = send(url, "POST", "/v1/datasets/run/builds", build, Content_Type=kind)
        assert status == 415 and body["error"]["code"] == "unsupported_media_type", kind
    status, body, _ = send(url, "POST", "/v1/datasets/run/builds", build)  # no Content-Type at all
    assert status == 415
    event = b'[{"type": "x", "ts": "2030-01-01T00:00:00Z"}]'
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        status, _, _ = send(url, "POST", "/v1/datasets/run/events", event, Content_Type=kind)
        assert status == 415
    status, _, _ = send(url, "POST", "/v1/datasets/run/events", event, Content_Type="application/json",
                        Origin=EVIL)
    assert status == 403
    assert events_of(home, "run") == before
    # a query (a read) from a foreign origin is refused too, and its preflight is
    status, _, headers = send(url, "OPTIONS", "/v1/datasets/run/query", Origin=EVIL,
                              Access_Control_Request_Method="POST")
    assert status == 403 and "Access-Control-Allow-Origin" not in headers


def test_the_own_origin_and_listed_origins_may_call(open_server: tuple[str, Path]) -> None:
    url, _ = open_server
    query = json.dumps({"query": "PATTERN SEQ('check ticket' c, decide d) PARTITION BY case"}).encode()
    status, body, headers = send(url, "POST", "/v1/datasets/run/query", query,
                                 Content_Type="application/json; charset=utf-8", Origin=url)
    assert status == 200 and body["count"] > 0
    assert "Access-Control-Allow-Origin" not in headers  # same origin needs no CORS
    listed = "https://console.example:8443"
    status, _, headers = send(url, "OPTIONS", "/v1/datasets/run/query", Origin=listed,
                              Access_Control_Request_Method="POST",
                              Access_Control_Request_Headers="content-type")
    assert status == 204 and headers["Access-Control-Allow-Origin"] == listed
    assert "Content-Type" in headers["Access-Control-Allow-Headers"]
    status, body, headers = send(url, "POST", "/v1/datasets/run/query", query,
                                 Content_Type="application/json", Origin=listed)
    assert status == 200 and headers["Access-Control-Allow-Origin"] == listed and "Origin" in headers["Vary"]
    status, _, _ = send(url, "GET", "/v1/datasets", Origin="null")  # a sandboxed frame, a file:// page
    assert status == 403


def test_a_rebound_dns_name_gets_nothing_from_an_open_server(open_server: tuple[str, Path]) -> None:
    url, _ = open_server
    port = urlsplit(url).port
    for host in ("rebind.evil.example", f"rebind.evil.example:{port}", "10.0.0.1", "0.0.0.0"):
        status, body, _ = send(url, "GET", "/v1/datasets", Host=host)
        assert status == 421 and body["error"]["code"] == "misdirected_request", host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "127.1.2.3"):
        status, _, _ = send(url, "GET", "/v1/datasets", Host=host)
        assert status == 200, host


def test_every_forwarding_header_counts_as_a_proxy(open_server: tuple[str, Path]) -> None:
    url, _ = open_server
    for header in ("X-Real-IP", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "True-Client-IP", "Via"):
        status, body, _ = send(url, "GET", "/v1/datasets", **{header.replace("-", "_"): "203.0.113.7"})
        assert status == 403 and body["error"]["code"] == "forbidden", header


def test_invalid_unicode_anywhere_is_a_400_naming_the_field(open_server: tuple[str, Path]) -> None:
    url, home = open_server
    before = events_of(home, "run")
    cases = [
        ("/v1/datasets/run/query", b'{"query": "PATTERN SEQ(A a) \\ud800"}', "field 'query'"),
        ("/v1/datasets/run/query", b'{"query": {"version": 1, "pattern": [{"kind": "var", "vars": '
                                   b'[{"name": "a", "type": "\\udfff"}]}]}}', "field 'type'"),
        ("/v1/datasets/run/events", b'[{"type": "A\\ud800", "ts": "2030-01-01T00:00:00Z"}]', "record 0"),
        ("/v1/datasets/run/events", b'[{"type": "A", "ts": "2030-01-01T00:00:00Z", '
                                    b'"attrs": {"note": "x\\udc80"}}]', "field 'note'"),
        ("/v1/datasets/run/events", b'[{"type": "A", "ts": "2030-01-01T00:00:00Z", "\\ud800k": 1}]', "key"),
    ]
    for path, body, says in cases:
        status, answer, _ = send(url, "POST", path, body, Content_Type="application/json")
        assert status == 400 and answer["error"]["code"] == "bad_request", (body, answer)
        assert says in answer["error"]["message"] and "surrogate" in answer["error"]["message"]
    ndjson = (b'{"type": "A", "ts": "2030-01-01T00:00:00Z"}\n'
              b'{"type": "\\ud800", "ts": "2030-01-01T00:00:01Z"}\n')
    status, answer, _ = send(url, "POST", "/v1/datasets/run/events", ndjson,
                             Content_Type="application/x-ndjson")
    assert status == 400 and "record 1" in answer["error"]["message"]
    assert events_of(home, "run") == before


def test_numbers_are_the_type_the_contract_says(open_server: tuple[str, Path]) -> None:
    url, home = open_server
    query = "PATTERN SEQ('check ticket' c, decide d) PARTITION BY case"
    for bad in (2.0, 0, -1, True, "2"):
        status, answer, _ = send(url, "POST", "/v1/datasets/run/query",
                                 json.dumps({"query": query, "limit": bad}).encode(),
                                 Content_Type="application/json")
        assert status == 400 and "limit" in answer["error"]["message"], bad
    status, answer, _ = send(url, "POST", "/v1/datasets/run/query",
                             json.dumps({"query": query, "limit": 2}).encode(),
                             Content_Type="application/json")
    assert status == 200 and len(answer["matches"]) == 2 and answer["truncated"] is True
    before = events_of(home, "run")
    ts = "2030-01-01T00:00:00Z"
    refused = [
        ([{"type": "A", "ts": ts, "attrs": {"big": 2**70}}], "64-bit"),
        ([{"type": "A", "ts": ts, "case": 5}], "'case' as string"),  # the dataset's cases are strings
        ([{"type": "A", "ts": ts, "k": "x"}, {"type": "A", "ts": ts, "k": 5}], "one kind"),
        ([{"type": "A", "ts": ts, "k": True}, {"type": "A", "ts": ts, "k": 1}], "one kind"),
        ([{"type": "A", "ts": ts, "k": 0.5}, {"type": "A", "ts": ts, "k": 2**60}], "precision"),
    ]
    for batch, says in refused:
        status, answer, _ = send(url, "POST", "/v1/datasets/run/events", json.dumps(batch).encode(),
                                 Content_Type="application/json")
        assert status == 400 and says in answer["error"]["message"], (batch, answer)
    assert events_of(home, "run") == before


def test_attribute_types_stay_as_they_are_over_appends(tmp_path: Path, shared_data: Path) -> None:
    home = tmp_path / "home"
    with serve(home, shared_data) as (url, _app):
        client = Client(url)
        first = [{"type": "A", "ts": "2030-01-01T00:00:00Z", "n": 1, "x": 0.5, "s": "a", "b": True}]
        (home / "inputs" / "first.jsonl").write_text(json.dumps(first[0]) + "\n")
        assert client.wait(client.build("typed", ["first.jsonl"], engine="local")["job_id"],
                           timeout=120)["state"] == "succeeded"
        client.append("typed", [{"type": "B", "ts": "2030-01-02T00:00:00Z", "n": -(2**63), "x": 3, "s": "5",
                                 "b": False, "new": 2**53}])
        info = client.info("typed")
        assert info["attrs"] == {"n": "int64", "x": "double", "s": "string", "b": "bool", "new": "int64"}
        assert [e["attrs"] for e in events_of(home, "typed")][1] == \
            {"n": -(2**63), "x": 3.0, "s": "5", "b": False, "new": 2**53}


def test_the_query_log_survives_what_a_client_sends(tmp_path: Path, shared_data: Path) -> None:
    home = tmp_path / "home"
    with serve(home, shared_data) as (url, app):
        status, _, _ = send(url, "POST", "/v1/datasets/nosuch/query", b'{"query": "\\ud800"}',
                            Content_Type="application/json")
        assert status == 400
        secret = create_token(service_state(app).catalog, "reader", "read")[1]
        status, _, _ = send(url, "GET", "/v1/datasets", Host="rebind.evil.example",
                            Authorization=f"Bearer {secret}")
        assert status == 200  # with tokens a foreign Host name is answered: a token is needed anyway
