"""The Flask app through ``app.test_client()``: the OpenAPI document, JSON errors, tokens and scopes, input
roots, size limits, all-or-nothing appends, builds — on real files, a real SQLite catalog and the
real running-example log."""


import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from openapi_spec_validator import validate as validate_openapi

from api import service
from api.auth import create_token, revoke_token
from api.schemas import openapi_path
from api.service import datasets as service_datasets
from api.state import service_state
from tests.api.flaskapp import OFF_MACHINE, assert_error, build, make_app

# --- the API description ------------------------------------------------------------------------------------


def test_health(client: FlaskClient) -> None:
    body = client.get("/v1/health").json
    assert body["status"] == "ok" and body["version"] and body["auth"] == "open-loopback"


def test_openapi_document_validates_and_lists_exactly_the_routes(app: Flask, client: FlaskClient) -> None:
    doc = client.get("/v1/openapi.json").json
    validate_openapi(doc)
    routes = {(openapi_path(rule.rule), method.lower())
              for rule in app.url_map.iter_rules() if rule.endpoint != "static"
              for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}}
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert documented == routes
    # docs/contract.md §5, every endpoint
    assert routes == {
        ("/v1/health", "get"), ("/v1/datasets", "get"), ("/v1/datasets/{name}", "get"),
        ("/v1/datasets/{name}", "delete"), ("/v1/datasets/{name}/events", "post"),
        ("/v1/datasets/{name}/retention", "put"),
        ("/v1/datasets/{name}/builds", "post"), ("/v1/jobs/{job_id}", "get"),
        ("/v1/datasets/{name}/query", "post"), ("/v1/openapi.json", "get"), ("/v1/inputs", "get"),
        ("/v1/datasets/{name}/density", "get"), ("/", "get"), ("/console/{asset}", "get"),
        ("/v1/datasets/{name}/watches", "post"), ("/v1/datasets/{name}/watches", "get"),
        ("/v1/datasets/{name}/watches/{watch_id}", "get"), ("/v1/datasets/{name}/watches/{watch_id}", "delete"),
        ("/v1/datasets/{name}/watches/{watch_id}/stream", "get"),
    }


def test_inputs_lists_what_a_build_may_name(client: FlaskClient, app: Flask, home: Path) -> None:
    (home / "inputs" / "sub").mkdir()
    (home / "inputs" / "sub" / "mine.jsonl").write_text('{"type": "A", "ts": 1}\n')
    (home / "inputs" / ".hidden.jsonl").write_text('{"type": "A", "ts": 1}\n')
    listed = client.get("/v1/inputs").json["inputs"]
    assert "running-example.xes" in listed and "sub/mine.jsonl" in listed and ".hidden.jsonl" not in listed
    roots = service_state(app).input_roots
    assert all(service.resolve_inputs([spec], roots) for spec in listed)  # each one a build may name
    assert_error(client.get("/v1/inputs", environ_base=OFF_MACHINE), 403, "forbidden")


def test_density_counts_the_events_over_time(client: FlaskClient, running: str, home: Path) -> None:
    from exact.events import to_records
    from exact.store import EventStore, dataset_dir, store_dir

    body = client.get(f"/v1/datasets/{running}/density").json
    info = client.get(f"/v1/datasets/{running}").json
    assert (body["start_ts"], body["end_ts"]) == (info["start_ts"], info["end_ts"])
    assert body["bins"] == len(body["counts"]) > 0 and sum(body["counts"]) == info["events"]
    ts = [e["ts"] for e in to_records(EventStore.open(store_dir(dataset_dir(running, home))).read_table())]
    micros = [int(t.timestamp() * 1_000_000) if hasattr(t, "timestamp") else int(t) for t in ts]
    first, last = min(micros), max(micros)
    expected = [0] * body["bins"]
    for t in micros:  # the definition: equal spans of [first, last], the last one closed
        expected[min(body["bins"] - 1, (t - first) * body["bins"] // (last - first + 1))] += 1
    assert body["counts"] == expected
    assert_error(client.get("/v1/datasets/ghost/density"), 404, "not_found")


def test_openapi_request_schemas_are_the_ones_that_validate(client: FlaskClient, running: str) -> None:
    """A body the document's QueryRequest schema rejects is rejected by the server, and vice versa."""
    from jsonschema import Draft202012Validator

    doc = client.get("/v1/openapi.json").json
    schema = Draft202012Validator(doc["components"]["schemas"]["QueryRequest"])
    for body in ({"query": "PATTERN a", "mode": "nearly"}, {"query": "PATTERN a", "limit": -1},
                 {"query": "PATTERN a", "colour": "red"}, {"mode": "exact"}, {"query": 3}):
        assert not schema.is_valid(body)
        assert_error(client.post(f"/v1/datasets/{running}/query", json=body), 400, "bad_request")


# --- errors -------------------------------------------------------------------------------------------------


def test_json_errors_for_unknown_routes_methods_and_bodies(client: FlaskClient, running: str) -> None:
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")
    assert_error(client.put("/v1/health"), 405, "method_not_allowed")
    err = assert_error(client.post(f"/v1/datasets/{running}/query", data='{"query": "PATTERN a",\n  mode}',
                                   content_type="application/json"), 400, "bad_request")
    assert err["position"] == {"line": 2, "column": 3}
    bad_limit = {"query": "PATTERN a", "limit": "x"}
    err = assert_error(client.post(f"/v1/datasets/{running}/query", json=bad_limit), 400, "bad_request")
    assert "'limit'" in err["message"]
    assert_error(client.get("/v1/datasets/Bad.Name"), 400, "bad_request")
    assert_error(client.get("/v1/datasets/absent"), 404, "not_found")
    assert_error(client.get("/v1/jobs/0123456789abcdef"), 404, "not_found")


def test_internal_errors_are_500_without_details(client: FlaskClient, running: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(home: Path, name: str) -> dict[str, Any]:
        raise RuntimeError("secret internals at /srv/private")

    # a fault injected into the real service, where describing a served dataset looks the name up
    monkeypatch.setattr("api.service.served.dataset_info", broken)
    response = client.get(f"/v1/datasets/{running}")
    err = assert_error(response, 500, "internal")
    text = response.get_data(as_text=True)
    assert "secret" not in text and "Traceback" not in text and "/srv" not in text
    assert "position" not in err


# --- tokens and scopes -------------------------------------------------------------------------------------


def test_open_server_answers_loopback_only(client: FlaskClient) -> None:
    assert client.get("/v1/datasets").status_code == 200
    err = assert_error(client.get("/v1/datasets", environ_base=OFF_MACHINE), 403, "forbidden")
    assert "token" in err["message"]
    assert client.get("/v1/health", environ_base=OFF_MACHINE).status_code == 200  # liveness stays public
    # through a proxy on the same machine the peer is loopback, but the client is not
    proxied = client.get("/v1/datasets", headers={"X-Forwarded-For": "198.51.100.7"})
    assert_error(proxied, 403, "forbidden")


def test_tokens_and_scopes(app: Flask, client: FlaskClient, running: str) -> None:
    catalog = service_state(app).catalog
    _, reader = create_token(catalog, "reader", "read")
    _, writer = create_token(catalog, "writer", "write")
    event = [{"type": "late", "ts": "2030-01-01T00:00:00Z"}]

    def auth(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    assert client.get("/v1/health").json["auth"] == "tokens"
    assert_error(client.get("/v1/datasets"), 401, "unauthorized")
    basic = {"Authorization": f"Basic {reader}"}
    assert_error(client.get("/v1/datasets", headers=basic), 401, "unauthorized")
    assert_error(client.get("/v1/datasets", headers=auth(reader + "x")), 401, "unauthorized")
    assert client.get("/v1/datasets", headers=auth(reader), environ_base=OFF_MACHINE).status_code == 200
    assert client.get(f"/v1/datasets/{running}", headers=auth(reader)).status_code == 200
    err = assert_error(client.post(f"/v1/datasets/{running}/events", json=event, headers=auth(reader)),
                       403, "forbidden")
    assert "'read'" in err["message"] and "'write'" in err["message"]
    assert_error(client.delete(f"/v1/datasets/{running}", headers=auth(reader)), 403, "forbidden")
    assert_error(client.put(f"/v1/datasets/{running}/retention", json={"keep": "1 events"}, headers=auth(reader)),
                 403, "forbidden")  # (retiring deletes events: the write scope)
    assert_error(client.post("/v1/datasets/x/builds", json={"inputs": ["running-example.xes"]},
                             headers=auth(reader)), 403, "forbidden")
    ok = client.post(f"/v1/datasets/{running}/events", json=event, headers=auth(writer))
    assert ok.status_code == 200 and ok.json["appended"] == 1
    assert client.get(f"/v1/datasets/{running}", headers=auth(writer)).status_code == 200  # write ⊇ read
    revoke_token(catalog, "writer")
    assert_error(client.get("/v1/datasets", headers=auth(writer)), 401, "unauthorized")


def test_tokens_are_stored_only_as_sha256(app: Flask, home: Path) -> None:
    _, secret = create_token(service_state(app).catalog, "ops", "write")
    raw = (home / "catalog.db").read_bytes() + b"".join(
        p.read_bytes() for p in home.glob("catalog.db-*"))  # WAL files too
    assert secret.encode() not in raw
    with sqlite3.connect(home / "catalog.db") as conn:
        stored = conn.execute("SELECT secret_sha256 FROM tokens WHERE name = 'ops'").fetchone()[0]
    assert stored == hashlib.sha256(secret.encode()).hexdigest()


# --- builds and input roots ---------------------------------------------------------------------------------


def test_build_inputs_are_confined_to_the_input_roots(client: FlaskClient, home: Path,
                                                      tmp_path: Path) -> None:
    outside = tmp_path / "outside.csv"
    outside.write_text("type,ts\na,1\n")
    (home / "inputs" / "link.csv").symlink_to(outside)
    for spec in ("../../../../etc/passwd", "/etc/passwd", str(outside), "link.csv",
                 "sub/../../outside.csv"):
        err = assert_error(client.post("/v1/datasets/x/builds", json={"inputs": [spec]}), 403,
                           "input_not_allowed")
        assert repr(spec) in err["message"]
    err = assert_error(client.post("/v1/datasets/x/builds", json={"inputs": ["no-such-file.xes"]}), 400,
                       "bad_input")
    assert "no-such-file.xes" in err["message"]
    assert_error(client.post("/v1/datasets/x/builds", json={"inputs": []}), 400, "bad_request")
    assert_error(client.post("/v1/datasets/x/builds", json={"inputs": ["a"], "fpq": 2}), 400, "bad_request")
    assert client.get("/v1/datasets").json == {"datasets": []}


def test_build_of_an_input_root_file_by_absolute_path(app: Flask, client: FlaskClient, home: Path) -> None:
    data = home / "inputs" / "small.jsonl"
    lines = [json.dumps({"type": t, "ts": i, "k": i % 2}) + "\n" for i, t in enumerate("abcab")]
    data.write_text("".join(lines))
    job = build(app, client, "small", [str(data)])
    assert job["state"] == "succeeded" and job["progress"] == 1.0 and job["error"] is None
    assert job["started"] <= job["finished"]
    info = client.get("/v1/datasets/small").json
    assert info["events"] == 5 and info["types"] == {"a": 2, "b": 2, "c": 1} and info["state"] == "ready"
    assert info["index_version"] is not None


def test_build_refuses_an_existing_dataset_unless_replace(app: Flask, client: FlaskClient,
                                                          running: str) -> None:
    assert_error(client.post(f"/v1/datasets/{running}/builds", json={"inputs": ["running-example.xes"]}), 409,
                 "conflict")
    job = build(app, client, running, ["running-example.xes"], replace=True)
    assert job["state"] == "succeeded"
    assert client.get(f"/v1/datasets/{running}").json["events"] == 42


def test_a_failing_build_is_reported_and_leaves_nothing(app: Flask, client: FlaskClient, home: Path) -> None:
    (home / "inputs" / "broken.csv").write_text("type,ts\nA,2020-01-01T00:00:00Z\nB,not-a-time\n")
    job = build(app, client, "broken", ["broken.csv"])
    assert job["state"] == "failed" and job["error"]["code"] == "bad_input"
    assert "broken.csv" in job["error"]["message"] and "line 3" in job["error"]["message"]
    assert not (home / "datasets" / "broken").exists()
    listed = client.get("/v1/datasets").json["datasets"]
    assert [(d["name"], d["state"]) for d in listed] == [("broken", "failed")]
    # the name can be deleted and built again
    assert client.delete("/v1/datasets/broken").json == {"deleted": "broken"}
    assert client.get("/v1/datasets").json == {"datasets": []}


def test_datasets_built_by_the_cli_appear_in_the_catalog(app: Flask, client: FlaskClient, home: Path,
                                                         shared_data: Path) -> None:
    from api.service import build_from_inputs as build_dataset

    build_dataset(home, "from-cli", [str(shared_data / "running-example.xes")])
    listed = client.get("/v1/datasets").json["datasets"]
    assert [d["name"] for d in listed] == ["from-cli"] and listed[0]["events"] == 42
    row = service_state(app).catalog.get_dataset("from-cli")
    assert row is not None and row["state"] == "ready" and row["events"] == 42
    # appended behind the service's back: the next look brings the catalog up to date
    service.append_records(home, "from-cli", [{"type": "late", "ts": "2030-01-01T00:00:00Z"}])
    assert client.get("/v1/datasets/from-cli").json["events"] == 43
    assert service_state(app).catalog.get_dataset("from-cli")["events"] == 43


# --- appends ------------------------------------------------------------------------------------------------


def events_of(client: FlaskClient, name: str) -> int:
    return client.get(f"/v1/datasets/{name}").json["events"]


def test_append_json_array_and_ndjson(client: FlaskClient, running: str) -> None:
    batch = [{"type": "audit", "ts": "2011-02-01T00:00:00+01:00", "case": "7", "attrs": {"cost": 3}},
             {"type": "audit", "ts": 1296518400.5}]
    response = client.post(f"/v1/datasets/{running}/events", json=batch)
    assert response.status_code == 200
    assert response.json["appended"] == 2 and response.json["first_seq"] == 42
    assert response.json["last_seq"] == 43
    ndjson = '{"type": "close", "ts": "2011-03-01T00:00:00Z"}\n\n{"type": "close", "ts": "2011-03-01"}\n'
    response = client.post(f"/v1/datasets/{running}/events", data=ndjson, content_type="application/x-ndjson")
    assert response.json == {"appended": 2, "first_seq": 44, "last_seq": 45, "watermark": None}
    info = client.get(f"/v1/datasets/{running}").json
    assert info["events"] == 46 and info["types"]["audit"] == 2 and info["types"]["close"] == 2
    assert info["end_ts"].startswith("2011-03-01T00:00:00")


@pytest.mark.parametrize("batch, status, code, where", [
    ([{"type": "x", "ts": "2031-01-01"}, {"type": "x", "ts": "2001-01-01"}], 409, "conflict", "older"),
    ([{"type": "x", "ts": "2031-01-01"}, {"type": "x", "ts": "someday"}], 400, "bad_input", "record 1"),
    ([{"type": "x", "ts": "2031-01-01"}, {"ts": "2031-01-02"}], 400, "bad_request", "record 1"),
    ([{"type": "x", "ts": "2031-01-01", "seq": 9}], 400, "bad_request", "'seq'"),
    ([{"type": "x", "ts": "2031-01-01", "nested": {"a": 1}}], 400, "bad_request", "'nested'"),
    ([], 400, "bad_request", "no events"),
    ({"type": "x", "ts": "2031-01-01"}, 400, "bad_request", "array"),
])
def test_append_is_all_or_nothing(client: FlaskClient, running: str, batch: Any, status: int, code: str,
                                  where: str) -> None:
    err = assert_error(client.post(f"/v1/datasets/{running}/events", json=batch), status, code)
    assert where in err["message"]
    assert events_of(client, running) == 42


def test_append_ndjson_error_names_the_line(client: FlaskClient, running: str) -> None:
    body = '{"type": "x", "ts": "2031-01-01"}\n{"type": "x", "ts": }\n'
    err = assert_error(client.post(f"/v1/datasets/{running}/events", data=body,
                                   content_type="application/x-ndjson"), 400, "bad_request")
    assert err["position"]["line"] == 2
    assert events_of(client, running) == 42


def test_append_size_limit(home: Path, shared_data: Path) -> None:
    app = make_app(home, shared_data, MAX_APPEND_BYTES=400)
    client = app.test_client()
    job = build(app, client, "running", ["running-example.xes"])
    assert job["state"] == "succeeded"
    small = [{"type": "x", "ts": "2031-01-01"}]
    big = small * 20
    assert len(json.dumps(big)) > 400
    assert_error(client.post("/v1/datasets/running/events", json=big), 413, "payload_too_large")
    assert events_of(client, "running") == 42
    assert client.post("/v1/datasets/running/events", json=small).status_code == 200
    service_state(app).jobs.shutdown()  # type: ignore[union-attr]


def test_append_to_a_missing_dataset(client: FlaskClient) -> None:
    assert_error(client.post("/v1/datasets/ghost/events", json=[{"type": "x", "ts": 1}]), 404, "not_found")


def test_query_answers_are_logged(client: FlaskClient, app: Flask, running: str) -> None:
    body = {"query": "PATTERN 'register request' r", "mode": "exact"}
    answer = client.post(f"/v1/datasets/{running}/query", json=body).json
    info = client.get(f"/v1/datasets/{running}").json
    assert answer["count"] == info["types"]["register request"]
    logged = service_state(app).catalog.recent_queries(running)[0]
    assert (logged["query"], logged["mode"], logged["count"], logged["error_code"]) == (
        body["query"], "exact", answer["count"], None)
    assert logged["events_scanned"] == answer["stats"]["events_scanned"]


def test_build_progress_follows_the_inputs_read(tmp_path: Path) -> None:
    small, large = tmp_path / "a.csv", tmp_path / "b.csv"
    small.write_bytes(b"x" * 100)
    large.write_bytes(b"x" * 300)
    heard: list[tuple[float, str]] = []
    report = service_datasets._reading_progress([small, large], lambda f, m: heard.append((f, m)))
    report(small, 10)
    report(large, 1234)
    assert heard == [(0.0, "reading a.csv: 10 events"), (0.8 * 0.25, "reading b.csv: 1,234 events")]


def test_index_versions_are_recorded_with_their_files(app: Flask, client: FlaskClient, running: str,
                                                      home: Path) -> None:
    client.post(f"/v1/datasets/{running}/events", json=[{"type": "x", "ts": "2031-01-01"}])
    versions = service_state(app).catalog.index_versions(running)
    info = client.get(f"/v1/datasets/{running}").json
    assert [v["events"] for v in versions] == [42, 43]
    assert versions[-1]["number"] == info["index_version"] == info["index"]["version"]
    assert versions[-1]["digest"] == info["index"]["index_digest"]
    assert (home / "datasets" / running / versions[-1]["files"][0]).is_file()


def test_granularity_coarsens_approximate_intervals_without_losing_matches(app: Flask,
                                                                           client: FlaskClient) -> None:
    job = build(app, client, "fine", ["running-example.xes"], leaf_size=4)
    assert job["state"] == "succeeded"
    levels = client.get("/v1/datasets/fine").json["index"]["levels"]
    assert levels > 2
    query = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case "
             "STRATEGY skip_till_any_match")
    exact = client.post("/v1/datasets/fine/query", json={"query": query, "mode": "exact",
                                                         "granularity": 2}).json  # ignored here
    assert exact["count"] > 0
    widths = []
    for granularity in range(levels):
        answer = client.post("/v1/datasets/fine/query", json={"query": query, "mode": "approximate",
                                                              "granularity": granularity}).json
        assert answer["intervals"] and all(0 <= i["level"] < levels for i in answer["intervals"])
        widths.append(sum(i["end_seq"] - i["start_seq"] + 1 for i in answer["intervals"]))
        for match in exact["matches"]:  # no false negatives at any granularity
            assert any(i["start_seq"] <= match["start_seq"] and match["end_seq"] <= i["end_seq"]
                       for i in answer["intervals"])
    assert widths == sorted(widths) and widths[-1] > widths[0]  # coarser levels cover more


def test_retention_over_http_retires_old_parts_and_answers_say_where_history_starts(
        app: Flask, client: FlaskClient) -> None:
    """``PUT …/retention`` keeps a dataset's latest events: whole parts past it are retired at once, ``info``
    shows the policy and the retained range, answers carry ``stats.history_from``, and an approximate answer
    the decayed summary's word on the retired history; a policy that does not parse is a 400 naming it."""
    running = "small-leaves"
    assert build(app, client, running, ["running-example.xes"], engine="local", leaf_size=4)["state"] == "succeeded"
    for i in range(3):
        events = [{"type": "late", "ts": f"2030-01-0{i + 1}T00:00:0{j}Z"} for j in range(5)]
        assert client.post(f"/v1/datasets/{running}/events", json=events).status_code == 200
    err = assert_error(client.put(f"/v1/datasets/{running}/retention", json={"keep": "ninety days"}), 400,
                       "bad_input")
    assert "ninety days" in err["message"]
    info = client.put(f"/v1/datasets/{running}/retention", json={"keep": "7 events"}).json
    assert (info["retention"], info["retained_from"]) == ("7 events", 47)  # parts 42 + 5 + 5 + 5: two go
    assert sum(info["types"].values()) == 10 and info["decayed"]["units"] >= 1
    got = client.get(f"/v1/datasets/{running}")
    assert (got.json.get("start_ts") or "").startswith("2030-01-02"), (got.status_code, got.json)
    answer = client.post(f"/v1/datasets/{running}/query", json={"query": "PATTERN SEQ(late a, late b)"}).json
    assert answer["stats"]["history_from"]["seq"] == info["retained_from"] and answer["count"] > 0
    approx = client.post(f"/v1/datasets/{running}/query",
                         json={"query": "PATTERN SEQ('register request' r)", "mode": "approximate"}).json
    assert approx["exists"] is False and approx["retired"]["exists"] is True  # only in the retired history
    assert approx["retired"]["verifiable"] is False and "retired" in approx["explain"]
    kept = client.put(f"/v1/datasets/{running}/retention", json={"keep": None}).json
    assert kept["retention"] is None and kept["retained_from"] == info["retained_from"]  # nothing comes back
