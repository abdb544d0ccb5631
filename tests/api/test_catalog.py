"""The catalog on a real SQLite database: datasets and their live index version, build jobs, tokens (hashed,
compared in constant time), the query log."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from sqlalchemy.exc import StatementError

from api.auth import authenticate, authorize, bearer_secret, create_token, has_active_tokens, revoke_token
from api.catalog import Catalog, DatasetState, JobState, Scope, Token, open_catalog
from api.service import publish_build
from exact.errors import Conflict, NotFound
from tests.generators import scaled


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    catalog = open_catalog(f"sqlite:///{(tmp_path / 'catalog.db').as_posix()}")
    yield catalog
    catalog.dispose()


def test_dataset_rows_and_the_live_index_version(catalog: Catalog) -> None:
    catalog.upsert_dataset("bpi", state=DatasetState.BUILDING)
    assert catalog.get_dataset("bpi")["state"] == "building"
    catalog.record_index_version("bpi", number=1, events=100, files=["tree-1.bin"], digest="a" * 64,
                                 config={"m": 512})
    catalog.record_index_version("bpi", number=2, events=150, files=["tree-2.bin"], digest="b" * 64,
                                 config={"m": 512})
    row = catalog.get_dataset("bpi")
    assert (row["state"], row["events"], row["index_version"]) == ("ready", 150, 2)
    assert [v["number"] for v in catalog.index_versions("bpi")] == [1, 2]
    # recording a version again updates it rather than duplicating it
    catalog.record_index_version("bpi", number=2, events=151, files=[], digest="c" * 64, config={})
    assert [v["events"] for v in catalog.index_versions("bpi")] == [100, 151]
    with pytest.raises(NotFound):
        catalog.record_index_version("nope", number=1, events=0, files=[], digest=None, config={})


def test_deleted_datasets_are_hidden_and_start_afresh_when_rebuilt(catalog: Catalog) -> None:
    catalog.upsert_dataset("d", state=DatasetState.READY, events=5)
    catalog.record_index_version("d", number=1, events=5, files=[], digest=None, config={})
    first = catalog.get_dataset("d")["created"]
    catalog.mark_deleted("d")
    assert catalog.list_datasets() == [] and len(catalog.list_datasets(include_deleted=True)) == 1
    assert catalog.index_versions("d") == []
    catalog.upsert_dataset("d", state=DatasetState.BUILDING)
    again = catalog.get_dataset("d")
    assert again["state"] == "building" and again["created"] > first and again["index_version"] is None


def test_publish_build_numbers_versions_from_the_info(catalog: Catalog) -> None:
    publish_build(catalog, "x", {"events": 3, "index": {"index_digest": "d1", "m": 64}})
    publish_build(catalog, "x", {"events": 3, "index": {"index_digest": "d1", "m": 64}})  # nothing new
    publish_build(catalog, "x", {"events": 4, "index": {"index_digest": "d2", "m": 64}})
    publish_build(catalog, "x", {"events": 9, "index_version": 7, "index": {"index_digest": "d3"}})
    versions = catalog.index_versions("x")
    assert [(v["number"], v["events"], v["digest"]) for v in versions] == [
        (1, 3, "d1"), (2, 4, "d2"), (7, 9, "d3")]
    assert versions[0]["config"] == {"m": 64}
    assert catalog.get_dataset("x")["index_version"] == 7


def test_job_lifecycle_and_recovery(catalog: Catalog) -> None:
    job = catalog.create_job("bpi", ["a.xes"], {"engine": "local"}, building=True)
    assert catalog.get_dataset("bpi")["state"] == "building"
    assert job["state"] == "queued" and job["progress"] == 0.0 and job["error"] is None
    assert catalog.active_job("bpi")["id"] == job["id"] and catalog.active_job("other") is None
    with pytest.raises(Conflict, match="in progress"):  # one active build per dataset, held by the database
        catalog.create_job("bpi", ["b.xes"], {})
    claimed = catalog.claim_job("runner-1")
    assert claimed is not None and claimed["id"] == job["id"] and claimed["state"] == "running"
    assert claimed["runner"] == "runner-1" and claimed["started"] is not None
    assert catalog.claim_job("runner-2") is None  # nothing else is queued
    catalog.update_job(job["id"], progress=0.5)
    assert catalog.get_job(job["id"])["progress"] == 0.5
    assert [j["id"] for j in catalog.running_jobs()] == [job["id"]]
    assert catalog.fail_jobs([job["id"], "missing"], "restart") == [job["id"]]
    failed = catalog.get_job(job["id"])
    assert failed["state"] == "failed" and failed["error"] == {"code": "interrupted", "message": "restart"}
    assert catalog.active_job("bpi") is None
    assert catalog.get_dataset("bpi")["state"] == "failed"  # its first build will never finish
    assert catalog.create_job("bpi", ["c.xes"], {})["state"] == "queued"  # a finished job blocks nothing
    with pytest.raises(NotFound):
        catalog.update_job("missing", state=JobState.FAILED)


def test_claims_take_each_queued_job_once_oldest_first(catalog: Catalog) -> None:
    """Runners claiming at once on threads (each claim its own transaction): every job is taken once."""
    import threading

    ids = [catalog.create_job(f"d{i}", [], {})["id"] for i in range(12)]
    taken: list[str] = []
    lock = threading.Lock()

    def claim(runner: str) -> None:
        while (job := catalog.claim_job(runner)) is not None:
            with lock:
                taken.append(job["id"])

    threads = [threading.Thread(target=claim, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted(ids) and len(taken) == len(set(taken))


def test_timestamps_are_utc_aware_and_naive_ones_refused(catalog: Catalog) -> None:
    job = catalog.create_job("d", [], {})
    stamp = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    catalog.update_job(job["id"], started=stamp)
    assert catalog.get_job(job["id"])["started"] == "2024-05-01T10:00:00+00:00"
    with pytest.raises(StatementError, match="naive datetime"):
        catalog.update_job(job["id"], started=dt.datetime(2024, 5, 1))


def test_query_log(catalog: Catalog) -> None:
    catalog.log_query(dataset="a", mode="exact", query="PATTERN x", ms=1.5, count=3)
    catalog.log_query(dataset="b", mode="verified", query="PATTERN y", ms=2.5, error_code="query_syntax",
                      token="ops")
    recent = catalog.recent_queries()
    assert [q["dataset"] for q in recent] == ["b", "a"]
    assert recent[0]["error_code"] == "query_syntax" and recent[0]["token"] == "ops"
    assert [q["query"] for q in catalog.recent_queries("a")] == ["PATTERN x"]


def test_tokens(catalog: Catalog) -> None:
    assert not has_active_tokens(catalog)
    info, secret = create_token(catalog, "ci", "read")
    assert info["scope"] == "read" and secret.startswith("ssk_") and len(secret) > 40
    with catalog.session() as s:
        stored = s.query(Token).one()
        assert secret not in (stored.secret_sha256, stored.name)
    assert authenticate(catalog, secret).name == "ci"
    assert authenticate(catalog, secret[:-1]) is None
    with pytest.raises(Conflict):
        create_token(catalog, "ci", "write")
    revoke_token(catalog, "ci")
    assert authenticate(catalog, secret) is None and not has_active_tokens(catalog)
    with pytest.raises(NotFound):
        revoke_token(catalog, "nobody")


def test_bearer_header_parsing() -> None:
    assert bearer_secret(None) is None and bearer_secret("") is None
    assert bearer_secret("Bearer abc") == "abc" and bearer_secret("bearer   abc ") == "abc"
    for bad in ("Basic abc", "Bearer", "abc"):
        with pytest.raises(Exception, match="Bearer <token>"):
            bearer_secret(bad)


def test_scopes() -> None:
    assert Scope.WRITE.grants(Scope.READ) and Scope.WRITE.grants(Scope.WRITE)
    assert Scope.READ.grants(Scope.READ) and not Scope.READ.grants(Scope.WRITE)


@scaled(25, HealthCheck.function_scoped_fixture)
@given(names=st.lists(st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), min_size=1, max_size=4,
                      unique=True),
       scopes=st.lists(st.sampled_from(["read", "write"]), min_size=4, max_size=4))
def test_each_secret_authenticates_as_its_own_token_only(catalog: Catalog, names: list[str],
                                                         scopes: list[str]) -> None:
    # One catalog for all examples: the tokens of earlier examples stay, and must never be confused.
    tag = uuid.uuid4().hex[:8]
    wanted = {f"{name}-{tag}": scope for name, scope in zip(names, scopes, strict=False)}
    secrets = {name: create_token(catalog, name, scope)[1] for name, scope in wanted.items()}
    for name, secret in secrets.items():
        who = authorize(catalog, f"Bearer {secret}", Scope.READ, "203.0.113.9")
        assert who.name == name and who.scope.value == wanted[name]
        assert authenticate(catalog, secret + "x") is None
