"""The ACER-like questions on a dataset kept on object storage, beside the same dataset on local disk.

``python -m bench objectstore [--quick]`` (``SEQSKETCH_OBJECTSTORE_EVENTS`` sets the stream's length, default
10,000,000, 200,000 with ``--quick``; ``SEQSKETCH_OBJECTSTORE_QUERIES`` the questions, default 15 (5);
``SEQSKETCH_OBJECTSTORE_ROUNDS`` the timed runs of each, default 5 (3)).

The stream and questions are :mod:`bench.acer`'s.  The object store is the one the environment names
(``AWS_ENDPOINT_URL`` and credentials, ``SEQSKETCH_OBJECTSTORE_BUCKET``), else a SeaweedFS started on loopback
for the run (the launcher the tests use).  The same events are built twice, in one run: to a home's disk and
to the bucket (``Dataset.build(..., store=…)``).  Then, answers checked equal first (every question's verified
answer on the bucket equals the local one):

- **cold**: a second home holds only the location (a server that has not served the dataset); each question's
  first answer there, with the bytes it fetched — beside the local dataset's first answer in the same state
  of the process (trees, seek files and footers opened afresh; the operating system's page cache is not
  dropped);
- **warm**: the median of ``rounds`` answers on the local dataset and on the second home's replica.

Ratios are bucket over local (≤ 1.2 warm, ≤ 3 cold and ≤ 1.3 for the build are the goals).  With
``SEQSKETCH_OBJECTSTORE_SPARK`` (default on, off with ``--quick``) the same stream, written as Parquet, is also
built on Spark (``local[2]``) to a home's disk and to the bucket, each after one warm-up build.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.acer import generate, questions
from bench.timing import median_ms, ratio
from exact.store import dataset_dir
from exact.store.fetch import location_of
from exact.store.objects import fetch_counts
from exact.store.replica import attach
from sketch.build import BuildOptions
from sketch.build_request import BuildRequest
from sketch.dataset import Dataset
from sketch.store_info import forget_open_files


def _store() -> tuple[str, Any]:
    """A bucket location, and the server started for the run (None when the environment names one)."""
    if os.environ.get("AWS_ENDPOINT_URL") and os.environ.get("SEQSKETCH_OBJECTSTORE_BUCKET"):
        return f"s3://{os.environ['SEQSKETCH_OBJECTSTORE_BUCKET']}/bench-{uuid.uuid4().hex[:8]}", None
    from tests.objectstore import Seaweed, apply_env

    server = Seaweed(Path(tempfile.mkdtemp(prefix="seqsketch-bench-weed-")))
    server.start()
    apply_env(server.env)
    return f"s3://seqsketch-bench/run-{uuid.uuid4().hex[:8]}", server


def run(quick: bool = False) -> dict[str, Any]:
    from api.service.queries import run_query

    events = int(os.environ.get("SEQSKETCH_OBJECTSTORE_EVENTS") or (200_000 if quick else 10_000_000))
    count = int(os.environ.get("SEQSKETCH_OBJECTSTORE_QUERIES") or (5 if quick else 15))
    rounds = int(os.environ.get("SEQSKETCH_OBJECTSTORE_ROUNDS") or (3 if quick else 5))
    stream = generate(events)
    qs = questions(random.Random(7), count)
    location, server = _store()
    root = Path(tempfile.mkdtemp(prefix="seqsketch-bench-objects-"))
    local, remote, cold = root / "local", root / "remote", root / "cold"
    try:
        started = time.perf_counter()
        Dataset.build(local, "acer", stream, BuildOptions())
        build_local = time.perf_counter() - started
        started = time.perf_counter()
        Dataset.build(remote, "acer", stream, BuildOptions(), store=location)
        build_bucket = time.perf_counter() - started
        uri = location_of(dataset_dir("acer", remote))
        assert uri is not None
        attach(dataset_dir("acer", cold), uri)
        rows = []
        forget_open_files()  # (the local dataset's first answer as a new process gives it: files opened afresh)
        t0 = time.perf_counter()
        run_query(local, "acer", qs[0].text())
        local_first_ms = (time.perf_counter() - t0) * 1000
        forget_open_files()
        for q in qs:
            text = q.text()
            want = run_query(local, "acer", text)
            with fetch_counts() as fetched:
                t0 = time.perf_counter()
                got = run_query(cold, "acer", text)
                first = time.perf_counter() - t0
            assert got["count"] == want["count"], (text, got["count"], want["count"])
            local_ms = median_ms(lambda text=text: run_query(local, "acer", text), rounds)
            bucket_ms = median_ms(lambda text=text: run_query(cold, "acer", text), rounds)
            rows.append({"query": text, "count": want["count"], "local_ms": local_ms, "bucket_warm_ms": bucket_ms,
                         "bucket_cold_ms": round(first * 1000, 2), "fetched_bytes": fetched["fetched_bytes"],
                         "fetches": fetched["fetches"], "warm_ratio": ratio(bucket_ms, local_ms, 2),
                         "cold_ratio": ratio(first * 1000, local_ms, 2)})
        spark = _spark_builds(stream, root / "spark", location) if _with_spark(quick) else None
        warm = [r["warm_ratio"] for r in rows if r["warm_ratio"] is not None]
        cold_r = [r["cold_ratio"] for r in rows if r["cold_ratio"] is not None]
        return {
            "events": events, "questions": count, "rounds": rounds,
            "build_local_s": round(build_local, 2), "build_bucket_s": round(build_bucket, 2),
            "build_ratio": ratio(build_bucket, build_local, 2),
            "warm_p50_local_ms": statistics.median(r["local_ms"] for r in rows),
            "warm_p50_bucket_ms": statistics.median(r["bucket_warm_ms"] for r in rows),
            "warm_ratio_median": statistics.median(warm) if warm else None,
            "cold_first_ratio": rows[0]["cold_ratio"] if rows else None,
            "local_first_ms": round(local_first_ms, 2),
            "cold_first_over_local_first": ratio(rows[0]["bucket_cold_ms"], local_first_ms, 2) if rows else None,
            "cold_first_fetched_bytes": rows[0]["fetched_bytes"] if rows else None,
            "cold_ratio_median": statistics.median(cold_r) if cold_r else None,
            "fetched_bytes_per_question": statistics.median(r["fetched_bytes"] for r in rows),
            "spark": spark,
            "queries": rows,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()


def _with_spark(quick: bool) -> bool:
    raw = os.environ.get("SEQSKETCH_OBJECTSTORE_SPARK")
    return (not quick) if raw is None else raw not in ("", "0", "no")


def _spark_builds(stream: Any, folder: Path, location: str) -> dict[str, Any]:
    """The stream built on Spark to local disk and to the bucket (a warm-up build first: the JVM and the
    workers start once)."""
    import pyarrow.parquet as pq

    from sketch.spark.job import build_dataset_spark, spark_session

    folder.mkdir(parents=True)
    source = folder / "stream.parquet"
    flat = stream.drop_columns(["seq"]).flatten()
    pq.write_table(flat.rename_columns([c.removeprefix("attrs.") for c in flat.column_names]), source)
    spark = spark_session("local[2]")
    try:
        build_dataset_spark(folder / "warm", "acer", [source], BuildRequest(partition_key=""), spark=spark)
        times = {}
        for where, store in (("local", None), ("bucket", location + "-spark")):
            started = time.perf_counter()
            build_dataset_spark(folder / where, "acer", [source], BuildRequest(partition_key="", store=store),
                                spark=spark)
            times[where] = round(time.perf_counter() - started, 2)
        local_digest = Dataset.open(folder / "local", "acer").snapshot().tree
        bucket_digest = Dataset.open(folder / "bucket", "acer").snapshot().tree
        assert local_digest is not None and bucket_digest is not None
        assert local_digest.digest() == bucket_digest.digest()
        return {"build_local_s": times["local"], "build_bucket_s": times["bucket"],
                "build_ratio": ratio(times["bucket"], times["local"], 2)}
    finally:
        spark.stop()

