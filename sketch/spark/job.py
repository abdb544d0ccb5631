"""The offline index-build job on Spark: inputs → ordered, numbered events → event store parts + Bloom tree.

The same build as the in-process one (:func:`exact.ingest.ingest`, :class:`exact.store.EventStore`,
:func:`sketch.build.build_tree`, and with a partition key :func:`sketch.partition.files.build_partition_into`), cut
where Spark can run it in parallel, with the same result: the same events in the store and the same trees
(``index_digest``).  Every step is a ``DataFrame → DataFrame`` function (:mod:`sketch.spark.frames`); the
SparkSession is made only at the edge (:func:`main`, or a caller that passes none).

1. **Read** (:mod:`sketch.spark.read`): one task per input piece (a large CSV, JSON Lines or Parquet file
   is cut into several) runs the project's reader and stages its events in chunks, each sorted by time.
2. **Plan** (driver): the windows' boundaries from the chunks' time samples
   (:func:`sketch.spark.sample_sort.choose_boundaries`).
3. **Order and write** (:mod:`sketch.spark.sample_sort`): one task per window merges its slices of the chunks
   into stream order — by time, ties in input order — numbers them from its exact rank, writes them as
   event-store parts and answers its leaves' (leaf, type) pairs and time ranges.  Windows hold whole
   leaves, so no leaf straddles two tasks.
4. **Size** (driver, builds only): Baltus 2021 §4.4 sizes ``m`` and ``k`` from the distinct-type profile of every
   window's pairs (:func:`sketch.sizing.measure_distinct`), exactly as the local builder measures it.
5. **Leaves** (builds only): one task per window turns its pairs into its leaves' filters (Alg. 1).  An
   append knows its tree's configuration beforehand, and step 3 builds the bits at once.
6. **Merge and publish** (driver): the leaves go through Alg. 2 in seq order
   (:func:`sketch.spark.leaves.merge_leaves`), the tree is saved, and one manifest replace publishes the
   parts and the index version together.
7. **Partition** (driver, builds with a partition key): the windows also wrote their events' key, type and
   time compactly (:mod:`sketch.partition.build_columns`); the driver merges them and builds the partition layout
   and tree with compiled kernels (:func:`sketch.partition.files.partition_from_columns`).

Until the dataset is published nothing is visible: a failing job leaves the previous version live, and its
part files are removed.

No event passes through the JVM or the driver: the tasks exchange data through the staging directory and
the store (on a cluster, shared storage), the driver collects summaries, samples, pairs and bits.  The
stages' seconds are the summary's ``timings``.

Progress is reported to a callback ``progress(fraction, message)`` (the CLI prints it; the service records it
in the jobs table).  Errors a user can cause come back as :class:`exact.errors.SeqsketchError` naming the
input and the problem; a failure inside Spark becomes one, too, with the failing stage — never a Py4J trace.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from exact.errors import Conflict, InputError, SeqsketchError
from exact.events import iso_of_micros
from exact.ingest import IngestOptions
from exact.readers.splits import DEFAULT_SPLIT_BYTES
from exact.store import EventStore, PartInfo, Snapshot
from exact.store.manifest import INDEX_ATTRS_KEY, check_index_attrs
from sketch.build import BuildOptions, check_budget, config_from
from sketch.build_request import DEFAULT_BUILD, BuildRequest
from sketch.dataset import AUTO_KEY
from sketch.partition.build_columns import Columns, merge_window_columns
from sketch.sizing import Sizing
from sketch.spark.frames import build_leaf_bits, leaf_inputs, stage_inputs, write_windows
from sketch.spark.leaves import LeafRun, merge_leaves
from sketch.spark.read import (
    InputFile,
    Staged,
    StagedChunk,
    collect_staged,
    error_from_json,
    merge_staged,
    plan_inputs,
    plan_pieces,
    raise_first_error,
    shifted,
    unified_attrs,
    whole_pieces,
)
from sketch.spark.sample_sort import (
    ChunkRef,
    WindowPlan,
    check_windows,
    choose_boundaries,
    parts_of,
    window_count,
)
from sketch.spark.session import spark_errors, spark_session
from sketch.spark.window_sizing import size_from_windows
from sketch.tree import BloomTree

Progress = Callable[[float, str], None]


def _no_progress(fraction: float, message: str) -> None:
    return None


def split_bytes() -> int:
    """Bytes of input per reading task (``SEQSKETCH_SPLIT_BYTES``, default 64 MiB)."""
    raw = os.environ.get("SEQSKETCH_SPLIT_BYTES")
    return int(raw) if raw else DEFAULT_SPLIT_BYTES


# ---------------------------------------------------------------------------------------- orchestration


@dataclass
class Timings:
    """Wall seconds per stage of one job (the CLI's ``timings``; the bench's breakdown)."""

    stages: dict[str, float] = field(default_factory=dict)
    _last: float = field(default_factory=time.perf_counter)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = round(self.stages.get(stage, 0.0) + now - self._last, 3)
        self._last = now


@dataclass(frozen=True)
class JobResult:
    """What a job produced before publishing: parts (not yet visible), the tree, its sizing, the counts,
    and with a partition key, the key and the events' compact columns for the partition build."""

    parts: tuple[PartInfo, ...]
    tree: BloomTree
    sizing: Sizing | None
    events: int
    timings: Mapping[str, float]
    partition_key: str | None = None
    partition_columns: Columns | None = None


def run_job(spark: Any, inputs: Sequence[str | Path], store: EventStore, *,
            ingest: IngestOptions | None = None, build: BuildOptions | None = None,
            tree: BloomTree | None = None, snapshot: Snapshot | None = None,
            progress: Progress = _no_progress, staging: Path | None = None,
            window_events: int | None = None, piece_bytes: int | None = None,
            partition_key: str | None = None, upload_to: str = "") -> JobResult:
    """Read, order, number, write parts, build the leaves; merge the tree in the driver.  Publishes nothing.

    Without ``tree`` the job builds a new dataset into the empty ``store`` and sizes the tree from the data;
    with ``tree`` (and the store's current ``snapshot``) it appends: seqs continue the stream, the tree is
    extended in place with its own configuration.  ``window_events`` fixes the windows' size (default:
    :func:`sketch.spark.sample_sort.window_count`), ``piece_bytes`` the inputs' pieces (default
    :func:`split_bytes`).  With ``partition_key`` (``"<auto>"``: ``case`` when every event has it) the
    result carries the events' columns for the partition build.  With ``upload_to`` (a dataset's bucket
    location) every task uploads the parts it wrote there.  Parts written by a failing job are removed.
    """
    with store.writing():  # the staging beside the store is the lock holder's (see EventStore._clean_orphans)
        return _run_job(spark, inputs, store, ingest or IngestOptions(), build or BuildOptions(), tree,
                        snapshot, progress, staging, window_events, piece_bytes or split_bytes(),
                        partition_key, upload_to)


def _run_job(spark: Any, inputs: Sequence[str | Path], store: EventStore, ingest: IngestOptions,
             build: BuildOptions, tree: BloomTree | None, snapshot: Snapshot | None, progress: Progress,
             staging: Path | None, window_events: int | None, piece_bytes: int,
             partition_key: str | None, upload_to: str) -> JobResult:
    timings = Timings()
    stage = ["checking the inputs"]
    files = plan_inputs(inputs, ingest)
    snap = snapshot or store.snapshot()
    first_seq = snap.events
    staging = staging or store.root.parent / f".spark-staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True, exist_ok=False)
    written: list[PartInfo] = []
    try:
        with spark_errors(stage):
            stage[0] = "reading the inputs"
            progress(0.05, f"reading {len(files)} input(s)")
            staged = _read_inputs(spark, files, ingest, staging, piece_bytes)
            chunks = staged.chunks
            events = sum(c.rows for c in chunks)
            if events == 0:
                raise InputError("the inputs hold no events", where=", ".join(f.path for f in files))
            located = shifted(chunks, files)
            _check_not_older(located, snap)
            attrs = unified_attrs(chunks)
            if not snap.events:  # (a build; an append's events need not have the attributes served)
                check_index_attrs((snap.extra or {}).get(INDEX_ATTRS_KEY), attrs)
            key = _partition_key(partition_key, attrs)
            timings.lap("read")
            timings.stages["read_in_python_tasks"] = round(staged.seconds, 3)

            stage[0] = "ordering the events"
            progress(0.25, f"ordering {events:,} events and writing them by window")
            parallelism = spark.sparkContext.defaultParallelism
            refs = tuple(ChunkRef(c.path, c.rows, shift, c.text_types) for c, shift in located)
            bounds = choose_boundaries(located, window_count(events, parallelism, window_events))
            plan = WindowPlan(store_root=str(store.root), row_group_size=snap.row_group_size,
                              attrs=tuple(attrs.items()), chunks=refs, bounds=bounds, first_seq=first_seq,
                              leaf_size=(tree.config if tree else build).leaf_size,
                              config=tree.config if tree is not None else None, partition_key=key,
                              staging=str(staging), upload_to=upload_to,
                              upload_env=tuple((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))
                              if upload_to else ())
            timings.lap("plan")
            stage[0] = "ordering the events and writing the event store"
            answers = write_windows(spark, plan).collect()
            windows = sorted((r.asDict() for r in answers), key=lambda r: r["window"])
            written.extend(p for w in windows if not w["error"] for p in parts_of(w))
            failed = [w for w in windows if w["error"]]
            if failed:
                raise error_from_json(failed[0]["error"])
            check_windows(windows, first_seq, events)
            timings.lap("write")
            timings.stages["write_in_python_tasks"] = round(sum(w["seconds"] for w in windows), 3)

            sizing = None
            if tree is None:
                stage[0] = "sizing the index"
                progress(0.6, f"sizing the index from {events:,} events")
                sizing = size_from_windows(windows, events, build)
                config = config_from(sizing, build)
                timings.lap("size")
                stage[0] = "building the leaves"
                progress(0.7, "building the leaves")
                shared = spark.sparkContext.broadcast(leaf_inputs(windows))
                try:
                    answers = build_leaf_bits(spark, shared, len(windows), config).collect()
                finally:
                    shared.destroy()
                bits = {r["window"]: r["bits"] for r in answers}
                timings.lap("leaves")
            else:
                config = tree.config
                bits = {w["window"]: w["bits"] for w in windows}

        stage[0] = "merging the tree"
        progress(0.8, "merging the tree levels")
        target = tree if tree is not None else BloomTree(config)
        merge_leaves(target, (LeafRun(first_leaf=w["first_leaf"], bits=bits[w["window"]],
                                      lo_ts=np.frombuffer(w["lo_ts"], dtype="<i8"),
                                      hi_ts=np.frombuffer(w["hi_ts"], dtype="<i8"), end_seq=w["end_seq"])
                              for w in windows))
        if tree is None:  # a dataset's own tree, sized here (an append grows one sized before)
            check_budget(target, build)
        timings.lap("merge")
        columns = None
        if key and not (partition_key == AUTO_KEY and sum(w["keyless"] for w in windows)):
            stage[0] = "clustering by partition key"
            types = tuple(sorted({t for w in windows for t in json.loads(w["vocabulary"])}))
            columns = merge_window_columns([w["partition"] for w in windows], events, types)
            timings.lap("partition")
        return JobResult(parts=tuple(written), tree=target, sizing=sizing, events=events,
                         timings=dict(timings.stages), partition_key=key if columns else None,
                         partition_columns=columns)
    except BaseException:
        for part in written:
            for f in part.files:
                (store.root / "parts" / f).unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _partition_key(asked: str | None, attrs: Mapping[str, Any]) -> str | None:
    """The attribute to cluster by: ``asked``, or with ``"<auto>"`` the default key if the stream has it (and,
    checked later, every event has a value); an attribute no event has is an error, as in the local build."""
    from exact.store.grouping import DEFAULT_KEY

    if not asked:
        return None
    if asked == AUTO_KEY:
        return DEFAULT_KEY if DEFAULT_KEY in attrs else None
    if asked not in attrs:
        raise InputError(f"no event has the partition key attribute {asked!r}", where="--partition-key")
    return asked


def _read_inputs(spark: Any, files: Sequence[InputFile], ingest: IngestOptions, staging: Path,
                 piece_bytes: int) -> Staged:
    """Step 1: stage every input piece; inputs whose pieces could not be taken are read again whole, in one
    task each; then the first input's error, if any, is raised."""
    pieces = plan_pieces(files, piece_bytes)
    rows = [r.asDict() for r in stage_inputs(spark, pieces, ingest, staging).collect()]
    staged = collect_staged(rows, pieces)
    if staged.reread:
        again = whole_pieces([f for f in files if f.index in staged.reread])
        rows = [r.asDict() for r in stage_inputs(spark, again, ingest, staging / "whole").collect()]
        staged = merge_staged(staged, collect_staged(rows, again))
    raise_first_error(staged)
    return staged


def _check_not_older(chunks: Sequence[tuple[StagedChunk, int]], snap: Snapshot) -> None:
    """docs/contract.md §1: an append must not go back in time; nothing of the batch is written if it does."""
    if snap.last_ts is None:
        return
    oldest = min(c.min_ts + shift for c, shift in chunks)
    if oldest < snap.last_ts:
        raise Conflict(f"events of the inputs are older than the dataset's last event "
                       f"({iso_of_micros(oldest)} < {iso_of_micros(snap.last_ts)}); appends must not go back "
                       "in time, so nothing was written", where="append")


# ------------------------------------------------------------------------------------- datasets: publish


def publish(store: EventStore, result: JobResult, ref: Any, *, expect_version: int) -> Snapshot:
    """Commit the parts and the index version ``ref`` (already written, unreferenced) in ONE manifest
    replace (:mod:`sketch.dataset`'s layout); on failure the unreferenced index file is removed."""
    from sketch.dataset import INDEX_KEY

    try:
        return store.commit(result.parts, {INDEX_KEY: ref.to_json()}, expect_version=expect_version)
    except BaseException:
        (store.root.parent / ref.file).unlink(missing_ok=True)
        raise


def estimated_events(inputs: Sequence[str | Path], ingest: IngestOptions) -> int:
    """The inputs' events as estimated before reading them (:mod:`exact.readers.estimate`)."""
    from exact.readers.estimate import estimate_events

    return sum(estimate_events(f.path, f.fmt) for f in plan_inputs(inputs, ingest))


def build_dataset_spark(home: Path, name: str, inputs: Sequence[str | Path], request: BuildRequest = DEFAULT_BUILD,
                        *, progress: Progress = _no_progress, spark: Any = None,
                        window_events: int | None = None) -> dict[str, Any]:
    """``seqsketch build --engine spark``: a new dataset (store + index, and with a partition key the
    partition layout and tree) built as ``request`` asks and published at once, or nothing; with a
    ``request.store``, on object storage (:mod:`exact.store.replica`).  (``request.keep`` is the service's to
    set once the dataset is built.)"""
    from exact.store import check_dataset_name, dataset_dir, staged_dataset, store_dir
    from exact.store.replica import stage_location
    from sketch.dataset import partition_from_columns, store_extra, write_index

    check_dataset_name(name)
    started = time.perf_counter()
    ingest = request.ingest_options()
    plan_inputs(inputs, ingest)  # a missing input fails before a JVM starts, and so does an existing dataset
    if dataset_dir(name, home).exists() and not request.replace:
        raise Conflict(f"dataset {name!r} exists already (use --replace to rebuild it)",
                       where=str(dataset_dir(name, home)))
    if spark is None:
        progress(0.0, "starting Spark")
        spark = spark_session(events=estimated_events(inputs, ingest))
    jvm = time.perf_counter() - started
    options = request.index_options()
    with staged_dataset(name, home, replace=request.replace, store=request.store) as stage:
        # the executors' parts serve the attributes the manifest names (checked once the inputs are read)
        store = EventStore.create(store_dir(stage), extra=store_extra(options))
        snap = store.snapshot()
        # on object storage, the tasks upload their parts to where the stage will be published
        upload_to = stage_location(stage) or ""
        with store.writing():
            result = run_job(spark, inputs, store, ingest=ingest, build=options, snapshot=snap,
                             progress=progress, window_events=window_events, partition_key=request.key,
                             upload_to=upload_to)
            timings = Timings(dict(result.timings))
            progress(0.9, "publishing")
            publish(store, result, write_index(stage, result.tree, 1), expect_version=snap.version)
            timings.lap("publish")
            if result.partition_columns is not None and result.partition_key is not None:  # (both or neither)
                progress(0.93, "clustering by partition key")
                partition_from_columns(stage, store, result.partition_key, result.partition_columns, options)
                timings.lap("partition")
    progress(1.0, f"built {name}: {result.events:,} events")
    return _build_summary(home, name, replace(result, timings=timings.stages), started, jvm)


def append_dataset_spark(home: Path, name: str, inputs: Sequence[str | Path], *, fmt: str = "auto",
                         type_field: str = "type", time_field: str = "ts", progress: Progress = _no_progress,
                         spark: Any = None, window_events: int | None = None) -> dict[str, Any]:
    """``seqsketch append --engine spark``: new inputs at the end of a built dataset, its tree extended in
    place; one manifest replace publishes both, so readers see the old version until it is done."""
    from sketch.dataset import Dataset

    started = time.perf_counter()
    ingest = IngestOptions(fmt=fmt, type_field=type_field, time_field=time_field)
    dataset = Dataset.open(home, name)
    store = dataset.store
    plan_inputs(inputs, ingest)
    if spark is None:
        progress(0.0, "starting Spark")
        spark = spark_session(events=estimated_events(inputs, ingest))
    jvm = time.perf_counter() - started
    with store.writing():
        snap = store.snapshot()
        # The live index (caught up from the store if it lags), as a private copy that the job extends.
        tree = dataset._tree_for_update(snap, None)
        result = run_job(spark, inputs, store, ingest=ingest, tree=tree, snapshot=snap, progress=progress,
                         window_events=window_events, upload_to=store.remote.uri if store.remote else "")
        timings = Timings(dict(result.timings))
        progress(0.95, "publishing")
        publish(store, result, dataset._write_next(result.tree, snap), expect_version=snap.version)
        dataset._prune(int(store.snapshot().extra["index"]["version"]))
        timings.lap("publish")
    progress(1.0, f"appended {result.events:,} events to {name}")
    return _build_summary(home, name, replace(result, timings=timings.stages), started, jvm)


#: The stages that build the trees (the summary's ``index``); the rest is ingest (reading, ordering, writing).
INDEX_STAGES = ("size", "leaves", "merge", "partition")


def _build_summary(home: Path, name: str, result: JobResult, started: float, jvm: float) -> dict[str, Any]:
    from sketch.dataset import dataset_info

    info = dataset_info(home, name)
    info.setdefault("index", result.tree.info())
    t = dict(result.timings)
    total = time.perf_counter() - started
    index = sum(t.get(k, 0.0) for k in INDEX_STAGES)
    return {**info, "seconds": round(total, 3),
            "timings": {"ingest": round(total - index, 3), "index": round(index, 3),
                        "spark_start": round(jvm, 3), **t}}


# ------------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit sketch/spark/job.py build|append DATASET INPUT… [options]``: the job as a Spark
    application (the cluster from ``--master``/``SPARK_MASTER``); prints the summary as JSON."""
    import argparse

    from exact.store import seqsketch_home

    parser = argparse.ArgumentParser(prog="spark_job.py", description="seqsketch's offline build on Spark")
    parser.add_argument("action", choices=("build", "append"))
    parser.add_argument("dataset")
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("--format", default="auto")
    parser.add_argument("--type-field", default="type")
    parser.add_argument("--time-field", default="ts")
    parser.add_argument("--leaf-size", type=int, default=None)
    parser.add_argument("--fpq", type=float, default=None)
    parser.add_argument("--memory", type=int, default=None, help="index budget in bytes")
    parser.add_argument("--replace", action="store_true")
    parser.add_argument("--partition-key", default=AUTO_KEY, help="cluster by this attribute ('' for none)")
    parser.add_argument("--home", type=Path, default=None, help="data root (default $SEQSKETCH_HOME)")
    args = parser.parse_args(argv)
    home = args.home or seqsketch_home()

    def report(fraction: float, message: str) -> None:
        print(f"seqsketch: [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    spark = None
    try:
        spark = spark_session(events=estimated_events(args.inputs, IngestOptions(
            fmt=args.format, type_field=args.type_field, time_field=args.time_field)))
        if args.action == "build":
            request = BuildRequest(fmt=args.format, type_field=args.type_field, time_field=args.time_field,
                                   leaf_size=args.leaf_size, fpq=args.fpq, memory=args.memory,
                                   partition_key=args.partition_key, replace=args.replace)
            summary = build_dataset_spark(home, args.dataset, args.inputs, request, progress=report, spark=spark)
        else:
            summary = append_dataset_spark(home, args.dataset, args.inputs, fmt=args.format,
                                           type_field=args.type_field, time_field=args.time_field,
                                           progress=report, spark=spark)
    except SeqsketchError as err:
        print(f"seqsketch: error: {err}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
