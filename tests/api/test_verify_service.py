"""The approximate and verified modes end to end: a stored dataset (the real running example, 42 events,
built with tiny leaves so that matches cross and share leaves), ``api.service.run_query`` and the
``seqsketch query`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api.service import run_query
from exact.engine import evaluate_table
from exact.engine.parallel import query_threads
from exact.errors import NotFound, QuerySemanticError
from exact.ingest import ingest
from exact.query.ast import Return
from exact.query.language import parse
from sketch.build import BuildOptions
from sketch.dataset import Dataset

QUERIES = [
    "PATTERN SEQ('register request' r, 'pay compensation' p) WITHIN 30 days",
    "PATTERN SEQ('register request' r, {'check ticket' c, 'examine casually' e}, decide d) PARTITION BY case",
    "PATTERN SEQ('register request' r, NOT('reject request' x), 'pay compensation' p) PARTITION BY case",
    "PATTERN SEQ('register request' r, 'examine thoroughly'+ t) WITHIN 10 EVENTS "
    "STRATEGY robust_skip_till_next_match",
    "PATTERN SEQ(decide d, OR('pay compensation' p, 'reject request' j)) WHERE d.case = p.case "
    "STRATEGY skip_till_any_match",
    "PATTERN SEQ('check ticket' c, 'examine casually' e) STRATEGY strict_contiguity",
    "PATTERN SEQ('register request' r, ANY+ a) PARTITION BY case WITHIN 3 EVENTS "
    "STRATEGY partition_contiguity RETURN intervals",
    "PATTERN SEQ(decide d, NOT('pay compensation' p)) WITHIN 2 days RETURN count",
]


#: SASE+ queries in the manner of the paper's Query 3 — a run's first event, each event against an aggregate
#: of the events before it, the finished run against the next element — most of them partitioned (the
#: partition-clustered index), under every strategy, with a NOT reading a run and a key read as a value
RUN_QUERIES = [
    "PATTERN SEQ(ANY+ a, decide d) WHERE a[1].type = 'register request' AND a[i].ts > avg(a[..i-1].ts) "
    "AND count(a) >= 3 AND d.Resource != a[last].Resource PARTITION BY case WITHIN 30 days",
    "PATTERN SEQ(ANY+ a, 'pay compensation' p) WHERE a[1].Costs = '50' AND min(a.Costs) = '100' "
    "AND count(a) >= 4 PARTITION BY case",
    "PATTERN SEQ('register request' r, ANY+ a) WHERE a[i].seq > max(a[..i-1].seq) AND count(a) <= 3 "
    "AND a[last].Resource != r.Resource PARTITION BY case WITHIN 10 EVENTS "
    "STRATEGY robust_skip_till_next_match",
    "PATTERN SEQ('check ticket'+ c, decide d) WHERE sum(c.seq) > 20 AND d.seq > c[last].seq WITHIN 5 days",
    "PATTERN SEQ('examine casually'+ e, NOT('reject request' x), decide d) WHERE x.Costs > min(e.Costs) "
    "PARTITION BY case STRATEGY skip_till_any_match RETURN count",
    "PATTERN SEQ(ANY+ a, decide d) WHERE count(a) = 3 AND a[1].type = 'register request' PARTITION BY case "
    "STRATEGY partition_contiguity",
    "PATTERN SEQ(ANY+ a, decide d) WHERE count(a) >= 2 AND a[1].type = 'check ticket' AND min(a.ts) < d.ts "
    "PARTITION BY case STRATEGY skip_till_any_match RETURN intervals",
    "PATTERN SEQ(ANY+ a, decide d) WHERE max(a.case) > '3' AND count(a) >= 2 PARTITION BY case",
]


@pytest.fixture
def running(home: Path, shared_data: Path) -> Path:
    stream = ingest([shared_data / "running-example.xes"])
    Dataset.build(home, "run", stream, BuildOptions(leaf_size=4))
    return home


@pytest.mark.parametrize("text", QUERIES)
def test_verified_answer_equals_exact_answer(running: Path, text: str) -> None:
    exact = run_query(running, "run", text, mode="exact")
    verified = run_query(running, "run", text, mode="verified")
    for key in ("exists", "count", "matches", "intervals", "truncated", "strategy"):
        assert verified.get(key) == exact.get(key), key
    assert verified["mode"] == "verified" and verified["index_version"] == 1
    stats = verified["stats"]
    assert set(stats) - {"candidate_groups", "plan"} == {"index", "approximate_ms", "verify_ms", "total_ms",
                                                 "nodes_probed", "candidate_intervals", "events_scanned",
                                                 "events_total", "threads"}
    assert stats["threads"] == query_threads() >= 1 and exact["stats"]["threads"] == stats["threads"]
    # on the partition index: its candidate cases' events read, or the store's when those are most of them
    assert stats["index"] in (("partition", "store") if "PARTITION BY case" in text and "strict" not in text
                              else ("stream",))
    assert (stats["index"] == "store") == ("more than" in stats.get("plan", "")), stats
    assert stats["events_total"] == 42 and stats["events_scanned"] <= 42


@pytest.mark.parametrize("text", RUN_QUERIES)
def test_verified_answer_equals_exact_answer_with_run_operands(running: Path, shared_data: Path,
                                                               text: str) -> None:
    """Run operands and aggregates through the service: verified = exact = the engine on the whole stream
    (a partitioned query goes through the partition-clustered index, which knows the key by numbers)."""
    exact = run_query(running, "run", text, mode="exact")
    verified = run_query(running, "run", text, mode="verified")
    for key in ("exists", "count", "matches", "intervals", "truncated", "strategy"):
        assert verified.get(key) == exact.get(key), key
    assert verified["stats"]["index"] in (("partition", "store") if "PARTITION BY case" in text else ("stream",))
    whole = evaluate_table(parse(text), ingest([shared_data / "running-example.xes"]), returns=Return.COUNT)
    assert exact["count"] == whole.count > 0


@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize("granularity", [None, 1, 2, 9])
def test_approximate_answer_covers_every_match(running: Path, text: str, granularity: int | None) -> None:
    exact = run_query(running, "run", text.replace(" RETURN intervals", "").replace(" RETURN count", ""),
                      mode="exact")
    approx = run_query(running, "run", text, mode="approximate", granularity=granularity)
    assert approx["mode"] == "approximate" and "matches" not in approx and "count" not in approx
    assert approx["exists"] is bool(approx["intervals"])
    assert 0.0 <= approx["expected_false_positive_rate"] < 1.0
    for iv in approx["intervals"]:
        assert iv["level"] <= (granularity or 0)
    for m in exact["matches"]:
        assert any(iv["start_seq"] <= m["start_seq"] and m["end_seq"] <= iv["end_seq"]
                   for iv in approx["intervals"])
    if not exact["exists"]:
        assert approx["exists"] in (True, False)  # false positives are allowed; false negatives are not
    assert approx["stats"]["candidate_intervals"] == len(approx["intervals"])


def test_no_answer_is_explained(running: Path) -> None:
    missing = run_query(running, "run", "PATTERN SEQ('register request', 'launch rocket') WITHIN 1 day",
                        mode="approximate")
    assert missing["exists"] is False and missing["intervals"] == []
    assert missing["explain"] == "launch rocket never occurs in the history"
    order = run_query(running, "run", "PATTERN SEQ('pay compensation', 'register request') WITHIN 1 h")
    assert order["exists"] is False and order["count"] == 0
    # with the stream's type counts the walk goes rarest first, so the reason names the window around the
    # rarer type: "register request never occurs within 1 h of pay compensation"
    assert order["explain"].startswith("register request never occurs")
    assert "pay compensation" in order["explain"] and "1 h" in order["explain"]
    chain = run_query(running, "run", "PATTERN SEQ('pay compensation', 'register request')",
                      mode="approximate")
    assert chain["explain"].startswith("register request never occurs after pay compensation; the last leaf")


def test_candidates_without_matches_are_explained(running: Path) -> None:
    text = "PATTERN SEQ('register request' r, decide d) WHERE r.case = d.case AND r.case = 'no such case'"
    verified = run_query(running, "run", text)
    assert verified["count"] == 0 and verified["stats"]["candidate_intervals"] >= 1
    assert "hold no exact match" in verified["explain"]


def test_bad_requests_are_refused_clearly(running: Path) -> None:
    with pytest.raises(NotFound, match="'nope'"):
        run_query(running, "nope", "PATTERN A", mode="verified")
    with pytest.raises(QuerySemanticError, match="granularity"):
        run_query(running, "run", "PATTERN A", mode="approximate", granularity=-1)
    with pytest.raises(QuerySemanticError, match="mode"):
        run_query(running, "run", "PATTERN A", mode="fuzzy")


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEQSKETCH_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "api.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])


def test_cli_query_modes(running: Path) -> None:
    text = QUERIES[0]
    approx = _cli(running, "query", "run", text, "--mode", "approximate", "--json")
    assert approx.returncode == 0, approx.stderr
    body = json.loads(approx.stdout)
    assert body["mode"] == "approximate" and body["intervals"] and "level" in body["intervals"][0]
    verified = _cli(running, "query", "run", text, "--limit", "2", "--json")
    assert verified.returncode == 0, verified.stderr
    body = json.loads(verified.stdout)
    assert body["mode"] == "verified" and len(body["matches"]) == 2 and body["truncated"] is True
    table = _cli(running, "query", "run", text, "--mode", "approximate")
    assert table.returncode == 0 and "LEVEL" in table.stdout and "candidate interval" in table.stdout
    missing = _cli(running, "query", "run", "PATTERN SEQ('launch rocket', decide)")
    assert missing.returncode == 0 and "launch rocket never occurs" in missing.stdout


def test_http_query_in_every_mode(running: Path, shared_data: Path) -> None:
    """POST /v1/datasets/{name}/query: the same answers through the HTTP service (granularity included)."""
    from api.app import create_app
    from api.state import service_state

    app = create_app({"SEQSKETCH_HOME": str(running),
                      "DATABASE_URL": f"sqlite:///{(running / 'catalog.db').as_posix()}",
                      "INPUT_ROOTS": [str(shared_data)]})
    try:
        client = app.test_client()
        text = QUERIES[1]
        answers = {}
        for mode in ("approximate", "verified", "exact"):
            response = client.post("/v1/datasets/run/query", json={"query": text, "mode": mode, "limit": 3,
                                                                   "granularity": 1})
            assert response.status_code == 200, response.get_data(as_text=True)
            answers[mode] = response.json
        assert answers["verified"]["matches"] == answers["exact"]["matches"]
        assert answers["verified"]["count"] == answers["exact"]["count"]
        assert all(iv["level"] <= 1 for iv in answers["approximate"]["intervals"])
        assert answers["approximate"]["exists"] is True
    finally:
        state = service_state(app)
        if state.jobs is not None:
            state.jobs.shutdown()
        state.catalog.dispose()


@pytest.mark.parametrize("text", QUERIES)
def test_approximate_exists_answers_yes_or_no_only(running: Path, text: str) -> None:
    """``RETURN exists`` asks for the yes/no: the approximate answer gives it (as the full approximate
    answer would) and no intervals, as the verified and exact answers of RETURN exists give no places."""
    base = text.replace(" RETURN intervals", "").replace(" RETURN count", "")
    full = run_query(running, "run", base, mode="approximate")
    only = run_query(running, "run", base + " RETURN exists", mode="approximate")
    assert only["exists"] is full["exists"] and "intervals" not in only and "matches" not in only
    assert only.get("explain") == full.get("explain")
    exact = run_query(running, "run", base + " RETURN exists", mode="exact")
    assert "intervals" not in exact and (only["exists"] or not exact["exists"])
