"""End to end: the real server on a loopback port (Werkzeug in a thread, and ``seqsketch serve`` as a process)
driven by the SDK — build the real running-example log, append, query in every mode, errors, tokens, scopes.

Expected answers are computed here straight from the definitions over the stored events, never copied."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.auth import create_token
from api.client import (
    AuthError,
    BadRequestError,
    Client,
    ConflictError,
    JobFailedError,
    NotFoundError,
    QueryError,
)
from api.state import service_state
from exact.events import to_records
from exact.store import EventStore, dataset_dir, store_dir
from tests.helpers import serve


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[tuple[Client, Path]]:
    """One open (token-less) server with the running example built through the API."""
    home = tmp_path_factory.mktemp("e2e") / "home"
    with serve(home, shared_data) as (url, _app):
        client = Client(url)
        job = client.build("running", ["running-example.xes"], engine="local")
        assert job["state"] == "queued"
        done = client.wait(job["job_id"], timeout=120)
        assert done["state"] == "succeeded" and done["progress"] == 1.0
        yield client, home


def stored_events(home: Path, name: str) -> list[dict[str, Any]]:
    return to_records(EventStore.open(store_dir(dataset_dir(name, home))).read_table())


def pairs_in_case(events: list[dict[str, Any]], first: str, then: str) -> list[tuple[int, int]]:
    """``SEQ(first a, then b) PARTITION BY case`` under skip_till_any_match, from Def. 3.2: every pair."""
    return [(a["seq"], b["seq"]) for a, b in itertools.combinations(events, 2)
            if a["type"] == first and b["type"] == then and a["seq"] < b["seq"]
            and a["attrs"].get("case") is not None and a["attrs"].get("case") == b["attrs"].get("case")]


PAIR_QUERY = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case "
              "STRATEGY skip_till_any_match")


def test_build_info_and_listing(server: tuple[Client, Path]) -> None:
    client, home = server
    info = client.info("running")
    events = stored_events(home, "running")
    assert info["events"] == len(events) >= 42
    assert info["state"] == "ready" and info["index_version"] is not None
    assert "running" in [d["name"] for d in client.datasets()]
    assert client.health()["status"] == "ok"
    assert set(client.openapi()["paths"]) >= {"/v1/datasets/{name}/query", "/v1/jobs/{job_id}"}


def test_exact_queries_agree_with_the_definition(server: tuple[Client, Path]) -> None:
    client, home = server
    expected = pairs_in_case(stored_events(home, "running"), "register request", "pay compensation")
    assert expected  # the running example has compensated cases
    exact = client.query("running", PAIR_QUERY, mode="exact")
    assert exact.mode == "exact" and exact.count == len(expected) and exact.exists
    got = sorted((m["bindings"]["r"][0], m["bindings"]["p"][0]) for m in exact.matches)
    assert got == sorted(expected)
    assert exact.stats["total_ms"] >= 0 and exact.stats["events_total"] == client.info("running")["events"]
    none = client.query("running", "PATTERN SEQ('pay compensation' p, 'register request' r) "
                        "PARTITION BY case RETURN exists", mode="exact")
    assert none.exists is (bool(pairs_in_case(stored_events(home, "running"), "pay compensation",
                                              "register request")))


def test_verified_equals_exact(server: tuple[Client, Path]) -> None:
    client, _ = server
    verified = client.query("running", PAIR_QUERY, mode="verified")
    exact = client.query("running", PAIR_QUERY, mode="exact")
    assert verified.mode == "verified"
    assert verified.matches == exact.matches and verified.count == exact.count  # guarantee 1
    assert client.query("running", PAIR_QUERY).mode == "verified"  # the default mode


def test_approximate_has_no_false_negatives(server: tuple[Client, Path]) -> None:
    client, home = server
    approximate = client.query("running", PAIR_QUERY, mode="approximate")
    expected = pairs_in_case(stored_events(home, "running"), "register request", "pay compensation")
    assert approximate.exists and not approximate.matches
    for a, b in expected:  # guarantee 2: every match inside a candidate interval
        assert any(i["start_seq"] <= a and b <= i["end_seq"] for i in approximate.intervals)


def test_query_by_json_form_limit_and_bound_events(server: tuple[Client, Path]) -> None:
    from exact.query.language import parse, to_json

    client, home = server
    by_text = client.query("running", PAIR_QUERY, mode="exact")
    by_json = client.query("running", to_json(parse(PAIR_QUERY)), mode="exact")
    assert by_json.matches == by_text.matches
    capped = client.query("running", PAIR_QUERY, mode="exact", limit=1)
    assert len(capped.matches) == 1 and capped.truncated and by_text.count > 1
    with_events = client.query("running", PAIR_QUERY, mode="exact", include_events=True)
    by_seq = {e["seq"]: e for e in stored_events(home, "running")}
    for match in with_events.matches:
        seqs = sorted(s for b in match["bindings"].values() for s in b)
        assert [e["seq"] for e in match["events"]] == seqs
        assert [e["type"] for e in match["events"]] == [by_seq[s]["type"] for s in seqs]


def test_answers_as_columns_over_http(server: tuple[Client, Path]) -> None:
    """The Arrow stream, read by pyarrow straight off the socket, and JSON lines hold the JSON answer's rows;
    the SDK hands them over as Arrow and pandas; RETURN cases lists each case once, with its matches."""
    import json
    import urllib.request

    import pyarrow as pa

    client, home = server
    listed = client.query("running", PAIR_QUERY, mode="verified")
    expected = pairs_in_case(stored_events(home, "running"), "register request", "pay compensation")
    assert listed.count == len(expected) > 1
    body = json.dumps({"query": PAIR_QUERY}).encode()
    request = urllib.request.Request(client.base + "/datasets/running/query", data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/vnd.apache.arrow.stream"})
    with urllib.request.urlopen(request) as resp:
        assert resp.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
        table = pa.ipc.open_stream(resp).read_all()
    head = json.loads(table.schema.metadata[b"seqsketch.answer"])
    assert head["count"] == listed.count and head["rows"] == "matches"
    assert list(zip(table.column("r.seq").to_pylist(), table.column("p.seq").to_pylist(), strict=True)) == \
        sorted(expected)
    assert pa.types.is_timestamp(table.schema.field("r.ts").type)
    request = urllib.request.Request(client.base + "/datasets/running/query", data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/x-ndjson"})
    with urllib.request.urlopen(request) as resp:
        lines = [json.loads(line) for line in resp.read().decode().splitlines()]
    assert lines[0]["count"] == listed.count and lines[1:] == listed.matches
    by_arrow = client.query("running", PAIR_QUERY, format="arrow")
    assert by_arrow.matches == listed.matches and by_arrow.count == listed.count
    frame = by_arrow.to_pandas()
    assert list(frame["p.seq"]) == [b for _, b in sorted(expected)]
    assert list(listed.to_arrow().column("p.seq").to_pylist()) == list(frame["p.seq"])
    cases = client.query("running", PAIR_QUERY + " RETURN cases")
    case_of = {e["seq"]: e["attrs"]["case"] for e in stored_events(home, "running")}
    per_case: dict[str, int] = {}
    for a, _ in sorted(expected):
        per_case[case_of[a]] = per_case.get(case_of[a], 0) + 1
    assert [(c["case"], c["matches"]) for c in cases.cases] == list(per_case.items())
    assert cases.case_count == len(per_case) and cases.count == len(expected)
    as_arrow = client.query("running", PAIR_QUERY + " RETURN cases", format="arrow")
    assert as_arrow.cases == cases.cases and as_arrow.to_arrow().column("case").to_pylist() == list(per_case)


def test_summaries_over_http_as_json_arrow_and_pandas(server: tuple[Client, Path]) -> None:
    """A funnel, the next events, durations and counts by a field, through the real server and the SDK: JSON
    and Arrow say the same, and the funnel's numbers are the cases' own (counted here from the stored events,
    as the definition says: a case reaches a step when the SEQ up to it matches in the case)."""
    client, home = server
    events = stored_events(home, "running")
    steps = ["register request", "decide", "pay compensation"]
    by_case: dict[str, list[str]] = {}
    for e in sorted(events, key=lambda e: e["seq"]):
        by_case.setdefault(e["attrs"]["case"], []).append(e["type"])

    def furthest(types: list[str]) -> int:
        reached = 0
        for t in types:
            if reached < len(steps) and t == steps[reached]:
                reached += 1
        return reached

    reach = [furthest(t) for t in by_case.values()]
    text = ("PATTERN SEQ('register request' r, decide d, 'pay compensation' p) PARTITION BY case "
            "RETURN funnel")
    funnel = client.query("running", text)
    assert [s["reached"] for s in funnel.funnel] == [sum(1 for f in reach if f >= j) for j in (1, 2, 3)]
    assert [s["label"] for s in funnel.funnel] == ["r", "d", "p"] and funnel["units"] == "partitions"
    as_arrow = client.query("running", text, format="arrow")
    assert as_arrow["rows"] == "funnel" and as_arrow.funnel == funnel.funnel
    assert list(as_arrow.to_pandas()["reached"]) == [s["reached"] for s in funnel.funnel]
    following = client.query("running", "PATTERN SEQ(decide d) PARTITION BY case RETURN next 1", mode="exact")
    after = {}
    for types in by_case.values():
        for i, t in enumerate(types):
            if t == "decide":
                nxt = types[i + 1] if i + 1 < len(types) else None
                after[nxt] = after.get(nxt, 0) + 1
    assert {r["type"]: r["count"] for r in following.next} == after
    spans = client.query("running", PAIR_QUERY + " RETURN durations")
    assert spans.durations[-1]["whole"] and spans.durations[-1]["count"] == spans.count > 0
    assert list(spans.to_arrow().column("count").to_pylist()) == [d["count"] for d in spans.durations]
    grouped = client.query("running", PAIR_QUERY + " RETURN count BY p.type")
    assert grouped.groups == [{"value": "pay compensation", "count": grouped.count}]


def test_match_density_counts_every_match_not_only_those_listed(server: tuple[Client, Path]) -> None:
    """``density``: every match's first event, counted over the dataset's time range — also past a limit that
    stopped the listing."""
    from datetime import datetime

    client, home = server
    every = client.query("running", PAIR_QUERY, mode="exact")
    info = client.info("running")
    first = datetime.fromisoformat(info["start_ts"]).timestamp()
    last = datetime.fromisoformat(info["end_ts"]).timestamp()
    bins = 7
    expected = [0] * bins
    for m in every.matches:  # each first event's span, as the definition says (equal spans of the range)
        at = (datetime.fromisoformat(m["start_ts"]).timestamp() - first) / (last - first + 1e-6) * bins
        expected[min(int(at), bins - 1)] += 1
    for mode in ("verified", "exact"):
        capped = client.query("running", PAIR_QUERY, mode=mode, limit=1, density=bins)
        assert len(capped.matches) == 1 and capped.truncated
        density = capped["match_density"]
        assert density["bins"] == bins and density["matches"] == every.count
        assert density["counts"] == expected
    with pytest.raises(BadRequestError):
        client.query("running", PAIR_QUERY, density=0)


def test_append_then_query_sees_the_new_events(server: tuple[Client, Path]) -> None:
    client, home = server
    before = client.info("running")
    last_ts = before["end_ts"]
    result = client.append("running", [
        {"type": "register request", "ts": "2031-01-01T09:00:00Z", "case": "e2e"},
        {"type": "decide", "ts": "2031-01-01T10:00:00Z", "case": "e2e"},
        {"type": "pay compensation", "ts": "2031-01-01T11:00:00Z", "case": "e2e"},
    ])
    assert result == {"appended": 3, "first_seq": before["events"], "last_seq": before["events"] + 2,
                      "watermark": None}
    assert client.info("running")["events"] == before["events"] + 3
    expected = pairs_in_case(stored_events(home, "running"), "register request", "pay compensation")
    assert (result["first_seq"], result["last_seq"]) in expected
    assert client.query("running", PAIR_QUERY, mode="exact").count == len(expected)
    with pytest.raises(ConflictError, match="older") as info:
        client.append("running", [{"type": "decide", "ts": last_ts, "case": "late"}])
    assert info.value.status == 409
    assert client.info("running")["events"] == before["events"] + 3


def test_errors_surface_as_typed_exceptions(server: tuple[Client, Path]) -> None:
    client, home = server
    with pytest.raises(NotFoundError):
        client.info("ghost")
    with pytest.raises(NotFoundError):
        client.query("ghost", "PATTERN a")
    with pytest.raises(QueryError) as info:
        client.query("running", "PATTERN SEQ(a,\n  b c d)")
    assert info.value.code == "query_syntax" and info.value.position and info.value.position["line"] == 2
    with pytest.raises(BadRequestError):
        client.append("running", [])
    with pytest.raises(BadRequestError) as info:
        client.build("fresh", ["../../../etc/passwd"])
    assert info.value.code == "input_not_allowed" and info.value.status == 403
    (home / "inputs" / "empty.xes").write_text("")
    job = client.build("empty", ["empty.xes"])
    with pytest.raises(JobFailedError) as failed:
        client.wait(job["job_id"], timeout=60)
    assert failed.value.code == "bad_input" and "empty.xes" in failed.value.message


def test_per_query_match_limit_truncates(tmp_path: Path, shared_data: Path) -> None:
    with serve(tmp_path / "home", shared_data, QUERY_MAX_MATCHES=1) as (url, _):
        client = Client(url)
        client.wait(client.build("running", ["running-example.xes"])["job_id"], timeout=120)
        capped = client.query("running", PAIR_QUERY, mode="exact", limit=50)
        assert len(capped.matches) == 1 and capped.truncated and capped.count > 1


def test_tokens_and_scopes_over_http(tmp_path: Path, shared_data: Path) -> None:
    with serve(tmp_path / "home", shared_data) as (url, app):
        catalog = service_state(app).catalog
        _, read = create_token(catalog, "analyst", "read")
        _, write = create_token(catalog, "loader", "write")
        anonymous, reader, writer = Client(url), Client(url, token=read), Client(url, token=write)
        assert anonymous.health()["auth"] == "tokens"
        with pytest.raises(AuthError) as info:
            anonymous.datasets()
        assert info.value.status == 401 and info.value.code == "unauthorized"
        with pytest.raises(AuthError) as info:
            reader.build("running", ["running-example.xes"])
        assert info.value.status == 403 and info.value.code == "forbidden"
        writer.wait(writer.build("running", ["running-example.xes"])["job_id"], timeout=120)
        assert [d["name"] for d in reader.datasets()] == ["running"]
        assert reader.query("running", PAIR_QUERY, mode="exact").count >= 1
        with pytest.raises(AuthError):
            reader.append("running", [{"type": "x", "ts": "2031-01-01"}])
        assert writer.append("running", [{"type": "x", "ts": "2031-01-01"}])["appended"] == 1
        with pytest.raises(AuthError):
            Client(url, token=read + "tampered").datasets()
        with pytest.raises(AuthError):
            reader.delete("running")
        assert writer.delete("running") == {"deleted": "running"}
        logged = catalog.recent_queries()
        assert logged and logged[0]["token"] == "analyst" and logged[0]["mode"] == "exact"


def test_serve_without_tokens_refuses_to_listen_beyond_loopback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from api.cli import main

    monkeypatch.setenv("SEQSKETCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SEQSKETCH_DATABASE_URL", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no API tokens" in err and "seqsketch token create" in err


def test_seqsketch_serve_process(tmp_path: Path) -> None:
    """``seqsketch serve --port 0`` as a real process: it prints where it listens, and answers there."""
    env = {**os.environ, "SEQSKETCH_HOME": str(tmp_path / "home")}
    env.pop("SEQSKETCH_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", "0"], env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        found = None
        while found is None and len(seen) < 50:  # warnings of imported libraries may come first
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        assert found, "".join(seen)
        client = Client(f"http://127.0.0.1:{found.group(1)}")
        assert client.health()["status"] == "ok" and client.datasets() == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_build_over_http_gives_the_local_index(tmp_path: Path, shared_data: Path) -> None:
    """A build job on the Spark engine publishes the same tree (index_digest) as the in-process builder."""
    with serve(tmp_path / "home", shared_data) as (url, _):
        client = Client(url)
        client.wait(client.build("local", ["running-example.xes"], engine="local")["job_id"], timeout=120)
        job = client.wait(client.build("spark", ["running-example.xes"], engine="spark")["job_id"],
                          timeout=600)
        assert job["options"]["engine"] == "spark" and job["progress"] == 1.0
        local, spark = client.info("local"), client.info("spark")
        assert spark["events"] == local["events"]
        assert spark["index"]["index_digest"] == local["index"]["index_digest"]
