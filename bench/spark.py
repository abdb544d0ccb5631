"""The Spark build job against the in-process build: events/s side by side, and where the Spark time goes.

Two inputs, built both ways in one run (the same machine, one SparkSession):

* ``bpic2012`` — the real log, one gzipped XES file (262,200 events): a single file is a single reading task,
  so this shows the job's fixed costs on a small input;
* ``replay`` — BPI 2012 replayed with shifted time and case ids (:func:`bench.corpora.replay`) to ≥ 5,000,000
  events, written as 20 Parquet files, so reading, ordering and writing all have parallel work;
* ``replay_time_ordered`` — the same events with the files already in time order: the job sees that the
  stable sort would change nothing and numbers the events in input order, skipping the shuffle sort.

Every Spark build is checked against its local twin (same ``index_digest``, same event count) before its
figures count.  The Spark side reports its stages (:class:`sketch.spark_job.Timings`): ``session`` (JVM and
SparkSession start, paid once per process), ``read`` (one Python task per input file running the project's
reader, staging Arrow batches), ``order`` (the global sort: a sampling job, a shuffle, the per-partition
counts and the numbering), ``size`` (the distinct (leaf, type) aggregation), ``write`` (window shuffle, one
task per window writing its Parquet part and building its leaves), ``merge`` (Alg. 2 in the driver) and
``publish`` (index file + manifest).  ``read``, ``order`` and ``write`` run in tasks and scale with executors;
``session``, ``merge`` and ``publish`` are serial in the driver.  ``read_in_python_tasks`` and
``write_in_python_tasks`` are the seconds spent inside the Python task bodies (summed over tasks): the
share of those stages that is the project's own work rather than Spark's (worker start, Arrow transfer,
shuffles).

``python -m bench spark [--quick]`` (quick: a 1,000,000-event replay instead of 5,242,400).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.corpora import BPIC, DEFAULT_DATA
from exact.ingest import read_inputs

REPLAY_FILES = 20


def write_replay(raw: Any, events: int, folder: Path, *, time_ordered: bool = False) -> list[Path]:
    """``events``+ events of BPI 2012 (copies after one another in time) as :data:`REPLAY_FILES` Parquet
    files, each a contiguous slice; within a copy the events keep the log's trace order, or with
    ``time_ordered`` are sorted by time (as an upstream system that exports in time order writes them)."""
    from bench.corpora import replay
    from exact.ingest import order_by_time

    copies = max(1, math.ceil(events / raw.num_rows))
    stream = replay(raw, copies)
    if time_ordered:
        stream = order_by_time(stream)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    per_file = math.ceil(stream.num_rows / REPLAY_FILES)
    for i in range(REPLAY_FILES):
        chunk = stream.slice(i * per_file, per_file)
        if chunk.num_rows == 0:
            break
        path = folder / f"replay-{i:02d}.parquet"
        pq.write_table(chunk, path, compression="zstd")
        paths.append(path)
    return paths


def local_build(home: Path, name: str, inputs: list[Path]) -> dict[str, Any]:
    from api.service import build_from_inputs as build_dataset

    started = time.perf_counter()
    summary = build_dataset(home, name, [str(p) for p in inputs], engine="local")
    return {"seconds": time.perf_counter() - started, "summary": summary}


def spark_build(spark: Any, home: Path, name: str, inputs: list[Path]) -> dict[str, Any]:
    from sketch.spark_job import build_dataset_spark

    started = time.perf_counter()
    summary = build_dataset_spark(home, name, inputs, spark=spark)
    return {"seconds": time.perf_counter() - started, "summary": summary}


def compare(spark: Any, home: Path, name: str, inputs: list[Path]) -> dict[str, Any]:
    local = local_build(home, f"{name}-local", inputs)
    on_spark = spark_build(spark, home, f"{name}-spark", inputs)
    a, b = local["summary"], on_spark["summary"]
    if (a["index"]["index_digest"], a["events"]) != (b["index"]["index_digest"], b["events"]):
        raise AssertionError(f"{name}: the Spark build differs from the local build")
    events = a["events"]
    skip = ("ingest", "index", "spark_start", "start", "read_in_python_tasks", "write_in_python_tasks")
    stages = {k: v for k, v in b["timings"].items() if k not in skip}
    accounted = sum(stages.values())
    stages["publish_and_info"] = round(on_spark["seconds"] - accounted, 3)
    # Seconds inside the Python task bodies (the project's reader; part writing + leaf building), summed
    # over tasks: the rest of those stages is Spark (JVM start of workers, Arrow transfer, shuffles).
    stages["read_in_python_tasks"] = b["timings"].get("read_in_python_tasks")
    stages["write_in_python_tasks"] = b["timings"].get("write_in_python_tasks")
    return {"events": events, "inputs": len(inputs), "same_digest": True,
            "local_seconds": round(local["seconds"], 2), "spark_seconds": round(on_spark["seconds"], 2),
            "local_events_per_s": round(events / local["seconds"]),
            "spark_events_per_s": round(events / on_spark["seconds"]),
            "spark_over_local_time": round(on_spark["seconds"] / local["seconds"], 2),
            "local_timings": a["timings"], "spark_stages": stages}


def run(quick: bool = False) -> dict[str, Any]:
    from sketch.spark_job import spark_session

    data = DEFAULT_DATA
    work = Path(tempfile.mkdtemp(prefix="seqsketch-bench-spark-"))
    try:
        started = time.perf_counter()
        spark = spark_session()
        session_seconds = time.perf_counter() - started
        parallelism = spark.sparkContext.defaultParallelism
        results: dict[str, Any] = {"master": spark.sparkContext.master, "parallelism": parallelism,
                                   "session_start_seconds": round(session_seconds, 2),
                                   "load_average_at_start": _load()}
        home = work / "home"
        results["bpic2012"] = compare(spark, home, "bpic", [data / BPIC])
        raw = read_inputs([data / BPIC])
        target = 1_000_000 if quick else 5_000_000
        inputs = write_replay(raw, target, work / "replay")
        results["replay"] = compare(spark, home, "replay", inputs)
        shutil.rmtree(work / "replay", ignore_errors=True)
        inputs = write_replay(raw, target, work / "replay-sorted", time_ordered=True)
        del raw
        results["replay_time_ordered"] = compare(spark, home, "sorted", inputs)
        results["load_average_at_end"] = _load()
        results["notes"] = NOTES
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _load() -> list[float]:
    """The machine's 1/5/15-minute load averages: on a shared machine the figures mean little without them."""
    return [round(x, 2) for x in os.getloadavg()]


NOTES = (
    "read, order and write run as Spark tasks (one per input file, per sorted partition, per window) and "
    "scale with executors; on local[*] they share the machine's cores with the driver. The session start, "
    "the Alg. 2 merge (a fold over the leaves in seq order) and the publish are serial in the driver. "
    "The local build reads, sorts and writes in one process with Arrow, so on one machine it is faster; "
    "Spark pays a JVM start, Arrow<->JVM conversions, two shuffles (the global sort and the window "
    "repartition) and a staging round trip, which a cluster amortises over many executors."
)


def main() -> None:
    import json

    print(json.dumps(run(quick=True), indent=2))


if __name__ == "__main__":
    main()
