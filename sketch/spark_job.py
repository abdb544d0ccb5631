"""The offline index-build job on Spark: inputs → ordered, numbered events → event store parts + Bloom tree.

The same build as the in-process one (:func:`exact.ingest.ingest`, :class:`exact.store.EventStore`,
:func:`sketch.build.build_tree`), cut where Spark can run it in parallel, with the same result: the same
events in the store and the same tree (``index_digest``).  Every step is a ``DataFrame → DataFrame``
function; the SparkSession is made only at the edge (:func:`main`, or a caller that passes none).

1. **Read** (:mod:`sketch.spark_read`): one task per input runs the project's own reader and stages its
   batches; one task per staged batch emits events with their input order (``file``, ``pos``) and the
   stream's unified attribute types.
2. **Order** (:func:`order_events`): a global sort by ``(ts, file, pos)`` — time, ties in input order — which
   Spark runs as a range-partitioned shuffle; :func:`number_events` then assigns ``seq`` without collecting
   anything to one place: every partition's size is counted (:func:`partition_sizes`), the driver turns the
   sizes into offsets, and each partition numbers its rows from its offset.
3. **Size** (builds only): the distinct (leaf, type) pairs (:func:`leaf_type_pairs`) give the measured
   distinct-type profile from which §4.4 sizes ``m`` and ``k`` (:func:`sketch.sizing.size_index`), exactly
   as the local builder measures it.
4. **Write and build leaves** (:func:`window_partitions`, :func:`write_windows`): events are repartitioned
   by window, ``(seq − base) // (C · L)``, so no leaf straddles two tasks; each task writes its window as one
   event-store part (pyarrow, the store's row-group size) and builds the window's leaves (Alg. 1) with the
   tree's own code, answering the part's descriptor and the leaves' bits.
5. **Merge and publish** (driver): the leaves go through Alg. 2 in seq order
   (:func:`sketch.spark_leaves.merge_leaves`), the tree is saved, and one manifest replace publishes the parts
   and the index version together.  Until then nothing is visible: a failing job leaves the previous
   version live, and its part files are removed.

Steps 2 to 4 are :mod:`sketch.spark_frames`' functions, step 1 :mod:`sketch.spark_read`'s, the leaves
:mod:`sketch.spark_leaves`'; the session and the translation of Spark's errors are
:mod:`sketch.spark_session`.  This module runs the steps (:func:`run_job`) and publishes a dataset built or
extended on Spark (:func:`build_dataset_spark`, :func:`append_dataset_spark`, :func:`main`).

Progress is reported to a callback ``progress(fraction, message)`` (the CLI prints it; the service records it
in the jobs table).  Errors a user can cause come back as :class:`exact.errors.SeqsketchError` naming the
input and the problem; a failure inside Spark becomes one, too, with the failing stage — never a Py4J trace.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.errors import Conflict, InputError, SeqsketchError
from exact.events import TYPE, iso_of_micros
from exact.ingest import IngestOptions
from exact.store import EventStore, PartInfo, Snapshot
from sketch.build import BuildOptions, config_from
from sketch.sizing import Sizing, measure_distinct, size_index
from sketch.spark_frames import (
    WritePlan,
    check_windows,
    leaf_type_pairs,
    number_events,
    order_events,
    part_from_row,
    partition_sizes,
    window_geometry,
    window_partitions,
    write_windows,
)
from sketch.spark_leaves import merge_leaves, run_from_row
from sketch.spark_read import (
    StagedChunk,
    already_in_order,
    collect_staged,
    error_from_json,
    plan_inputs,
    stage_inputs,
    staged_events,
    unified_attrs,
)
from sketch.spark_session import spark_errors, spark_session
from sketch.tree import BloomTree, TreeConfig

Progress = Callable[[float, str], None]


def _no_progress(fraction: float, message: str) -> None:
    return None


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
    """What a job produced before publishing: parts (not yet visible), the tree, its sizing, the counts."""

    parts: tuple[PartInfo, ...]
    tree: BloomTree
    sizing: Sizing | None
    events: int
    timings: Mapping[str, float]


def run_job(spark: Any, inputs: Sequence[str | Path], store: EventStore, *,
            ingest: IngestOptions | None = None, build: BuildOptions | None = None,
            tree: BloomTree | None = None, snapshot: Snapshot | None = None,
            progress: Progress = _no_progress, staging: Path | None = None,
            leaves_per_task: int | None = None) -> JobResult:
    """Read, order, number, write parts, build the leaves; merge the tree in the driver.  Publishes nothing.

    Without ``tree`` the job builds a new dataset into the empty ``store`` and sizes the tree from the data;
    with ``tree`` (and the store's current ``snapshot``) it appends: seqs continue the stream, the tree is
    extended in place with its own configuration.  ``leaves_per_task`` fixes the window (``L`` leaves of ``C``
    events; default: :func:`window_geometry`).  Parts written by a failing job are removed.
    """
    with store.writing():  # the staging beside the store is the lock holder's (see EventStore._clean_orphans)
        return _run_job(spark, inputs, store, ingest or IngestOptions(), build or BuildOptions(), tree,
                        snapshot, progress, staging, leaves_per_task)


def _run_job(spark: Any, inputs: Sequence[str | Path], store: EventStore, ingest: IngestOptions,
             build: BuildOptions, tree: BloomTree | None, snapshot: Snapshot | None, progress: Progress,
             staging: Path | None, leaves_per_task: int | None) -> JobResult:
    timings = Timings()
    stage = ["checking the inputs"]
    files = plan_inputs(inputs, ingest)
    snap = snapshot or store.snapshot()
    first_seq = snap.events
    staging = staging or store.root.parent / f".spark-staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True, exist_ok=False)
    written: list[PartInfo] = []
    cached: list[Any] = []
    try:
        with spark_errors(stage):
            timings.lap("start")
            stage[0] = "reading the inputs"
            progress(0.05, f"reading {len(files)} input(s)")
            chunks, attrs, task_seconds = _read_inputs(spark, files, ingest, staging, snap)
            events = sum(c.rows for c in chunks)
            timings.lap("read")
            timings.stages["read_in_python_tasks"] = round(task_seconds, 3)

            stage[0] = "ordering the events"
            progress(0.25, f"ordering {events:,} events")
            parallelism = spark.sparkContext.defaultParallelism
            numbered = _ordered_and_numbered(spark, files, chunks, attrs, first_seq, parallelism, cached)
            timings.lap("order")

            config, sizing = (tree.config, None) if tree is not None else (None, None)
            if config is None:
                stage[0] = "sizing the index"
                progress(0.45, f"sizing the index from {events:,} events")
                sizing = size_from_pairs(leaf_type_pairs(numbered, build.leaf_size), events, build)
                config = config_from(sizing, build)
                timings.lap("size")

            stage[0] = "writing the event store and building the leaves"
            progress(0.55, f"writing {events:,} events and building leaves")
            answers = _write_and_build_leaves(numbered, store, snap, attrs, config, events, parallelism,
                                              leaves_per_task, written)
            timings.lap("write")
            timings.stages["write_in_python_tasks"] = round(sum(a["seconds"] for a in answers), 3)

        stage[0] = "merging the tree"
        progress(0.85, "merging the tree levels")
        target = tree if tree is not None else BloomTree(config)
        merge_leaves(target, (run_from_row(a["first_leaf"], a["bits"], a["lo_ts"], a["hi_ts"], a["end_seq"])
                              for a in answers))
        _check_budget(target, build, tree is None)
        timings.lap("merge")
        return JobResult(parts=tuple(written), tree=target, sizing=sizing, events=events,
                         timings=dict(timings.stages))
    except BaseException:
        for part in written:
            for f in part.files:
                (store.root / "parts" / f).unlink(missing_ok=True)
        raise
    finally:
        for frame in cached:
            try:
                frame.unpersist()
            except Exception:  # noqa: S110 - a session already stopped has nothing left to free
                pass
        shutil.rmtree(staging, ignore_errors=True)


def _read_inputs(spark: Any, files: Sequence[Any], ingest: IngestOptions, staging: Path,
                 snap: Snapshot) -> tuple[list[StagedChunk], dict[str, pa.DataType], float]:
    """Step 1: stage every input (one task each); the staged batches, the stream's attribute types and the
    seconds the tasks spent in Python reading (summed over tasks)."""
    staged = [r.asDict() for r in stage_inputs(spark, files, ingest, staging).collect()]
    chunks = collect_staged(staged)
    if sum(c.rows for c in chunks) == 0:
        raise InputError("the inputs hold no events", where=", ".join(f.path for f in files))
    _check_not_older(chunks, snap)
    return chunks, unified_attrs(chunks), sum(r["seconds"] or 0.0 for r in staged)


def _ordered_and_numbered(spark: Any, files: Sequence[Any], chunks: Sequence[StagedChunk],
                          attrs: Mapping[str, pa.DataType], first_seq: int, parallelism: int,
                          cached: list[Any]) -> Any:
    """Step 2: the events in stream order with ``seq`` from ``first_seq`` (the sorted frame stays cached,
    listed in ``cached`` for the caller to release)."""
    from pyspark import StorageLevel

    if already_in_order(files, chunks):  # the stable sort would change nothing: number in input order
        return staged_events(spark, files, chunks, attrs, tasks=2 * parallelism, first_seq=first_seq)
    # Cached because the sort reads its input twice (a sampling pass for the range bounds, then the
    # shuffle): without it the staged batches would be decoded in Python twice.
    unordered = staged_events(spark, files, chunks, attrs, tasks=2 * parallelism)
    unordered = unordered.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(unordered)
    ordered = order_events(unordered).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(ordered)
    sizes = partition_sizes(ordered)
    unordered.unpersist()
    offsets = np.concatenate(([first_seq], first_seq + np.cumsum(sizes)[:-1])).tolist()
    return number_events(ordered, offsets)


def _write_and_build_leaves(numbered: Any, store: EventStore, snap: Snapshot,
                            attrs: Mapping[str, pa.DataType], config: TreeConfig, events: int,
                            parallelism: int, leaves_per_task: int | None,
                            written: list[PartInfo]) -> list[dict[str, Any]]:
    """Step 4: one task per window writes its part and builds its leaves; the answers in window order.
    Every part written is added to ``written`` before any error is raised, so the caller can remove it."""
    C = config.leaf_size
    first_seq = snap.events
    base = (first_seq // C) * C
    span = first_seq + events - base
    window_events, windows = window_geometry(span, C, parallelism)
    if leaves_per_task:
        window_events = leaves_per_task * C
        windows = math.ceil(span / window_events)
    plan = WritePlan(store_root=str(store.root), row_group_size=snap.row_group_size,
                     attrs=tuple(attrs.items()), config=config, base=base, first_seq=first_seq,
                     window_events=window_events)
    answers = write_windows(window_partitions(numbered, base, window_events, windows), plan).collect()
    answers = sorted((a.asDict() for a in answers), key=lambda a: a["window"])
    written.extend(part_from_row(a) for a in answers if a["part"])
    failed = [a for a in answers if a["error"]]
    if failed:
        raise error_from_json(failed[0]["error"])
    check_windows(answers, first_seq, events)
    return answers


def size_from_pairs(pairs: Any, events: int, options: BuildOptions) -> Sizing:
    """§4.4 sizing from the distinct (leaf, type) pairs, as :func:`sketch.build.plan` sizes it from events."""
    table = pairs.toArrow()
    leaf_ids = table.column("leaf").to_numpy().astype(np.int64)
    codes = pc.dictionary_encode(table.column(TYPE).combine_chunks()).indices.to_numpy(
        zero_copy_only=False).astype(np.int64)
    expected = options.expected_events if options.expected_events is not None else events
    if expected < events:
        raise SeqsketchError(f"expected_events ({expected}) is smaller than the {events} events given")
    profile = measure_distinct(leaf_ids, codes, options.leaf_size, options.fanout)
    return size_index(fpq=options.fpq, leaf_size=options.leaf_size, events=max(expected, 1), profile=profile,
                      memory_bytes=options.memory_bytes, query_length=options.query_length,
                      fanout=options.fanout, fold=options.fold)


def _check_budget(tree: BloomTree, options: BuildOptions, sized_here: bool) -> None:
    """As :func:`sketch.build.build_tree`: sizing is an estimate, so the built index is checked too."""
    if not sized_here or options.memory_bytes is None:
        return
    size = tree.stored_bytes()
    if size > options.memory_bytes:
        raise SeqsketchError(
            f"memory budget of {options.memory_bytes} bytes is too small: the index built for fpq="
            f"{options.fpq:g} with leaf size {options.leaf_size} takes {size} bytes (m={tree.config.m}, "
            f"k={tree.config.k}); allow at least {size} bytes, or loosen --fpq, or raise --leaf-size",
            where="--memory")


def _check_not_older(chunks: Sequence[StagedChunk], snap: Snapshot) -> None:
    """CONTRACT §1: an append must not go back in time; nothing of the batch is written if it does."""
    if snap.last_ts is None:
        return
    oldest = min(c.min_ts for c in chunks)
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


def build_options(leaf_size: int | None, fpq: float | None, memory: int | None) -> BuildOptions:
    base = BuildOptions()
    return replace(base, leaf_size=leaf_size or base.leaf_size, fpq=fpq or base.fpq, memory_bytes=memory)


def build_dataset_spark(home: Path, name: str, inputs: Sequence[str | Path], *, fmt: str = "auto",
                        type_field: str = "type", time_field: str = "ts", leaf_size: int | None = None,
                        fpq: float | None = None, memory: int | None = None, replace_existing: bool = False,
                        progress: Progress = _no_progress, spark: Any = None,
                        leaves_per_task: int | None = None, partition_key: str | None = "<auto>"
                        ) -> dict[str, Any]:
    """``seqsketch build --engine spark``: a new dataset (store + index, and with a partition key the
    partition layout and tree) published at once, or nothing."""
    from exact.store import check_dataset_name, dataset_dir, staged_dataset, store_dir
    from sketch.dataset import partition_into_store, write_index

    check_dataset_name(name)
    started = time.perf_counter()
    ingest = IngestOptions(fmt=fmt, type_field=type_field, time_field=time_field)
    plan_inputs(inputs, ingest)  # a missing input fails before a JVM starts, and so does an existing dataset
    if dataset_dir(name, home).exists() and not replace_existing:
        raise Conflict(f"dataset {name!r} exists already (use --replace to rebuild it)",
                       where=str(dataset_dir(name, home)))
    if spark is None:
        progress(0.0, "starting Spark")
        spark = spark_session()
    jvm = time.perf_counter() - started
    with staged_dataset(name, home, replace=replace_existing) as stage:
        store = EventStore.create(store_dir(stage))
        snap = store.snapshot()
        with store.writing():
            result = run_job(spark, inputs, store, ingest=ingest, build=build_options(leaf_size, fpq, memory),
                             snapshot=snap, progress=progress, leaves_per_task=leaves_per_task)
            progress(0.95, "publishing")
            publish(store, result, write_index(stage, result.tree, 1), expect_version=snap.version)
            if partition_key:
                progress(0.97, "clustering by partition key")
                partition_into_store(stage, store, partition_key, build_options(leaf_size, fpq, memory))
    progress(1.0, f"built {name}: {result.events:,} events")
    return _build_summary(home, name, result, started, jvm)


def append_dataset_spark(home: Path, name: str, inputs: Sequence[str | Path], *, fmt: str = "auto",
                         type_field: str = "type", time_field: str = "ts", progress: Progress = _no_progress,
                         spark: Any = None, leaves_per_task: int | None = None) -> dict[str, Any]:
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
        spark = spark_session()
    jvm = time.perf_counter() - started
    with store.writing():
        snap = store.snapshot()
        # The live index (caught up from the store if it lags), as a private copy that the job extends.
        tree = dataset._tree_for_update(snap, None)
        result = run_job(spark, inputs, store, ingest=ingest, tree=tree, snapshot=snap, progress=progress,
                         leaves_per_task=leaves_per_task)
        progress(0.95, "publishing")
        publish(store, result, dataset._write_next(result.tree, snap), expect_version=snap.version)
        dataset._prune(int(store.snapshot().extra["index"]["version"]))
    progress(1.0, f"appended {result.events:,} events to {name}")
    return _build_summary(home, name, result, started, jvm)


def _build_summary(home: Path, name: str, result: JobResult, started: float, jvm: float) -> dict[str, Any]:
    from sketch.dataset import dataset_info

    info = dataset_info(home, name)
    info.setdefault("index", result.tree.info())
    t = dict(result.timings)
    index = sum(t.get(k, 0.0) for k in ("size", "merge"))
    return {**info, "seconds": round(time.perf_counter() - started, 3),
            "timings": {"ingest": round(time.perf_counter() - started - index, 3), "index": round(index, 3),
                        "spark_start": round(jvm, 3), **t}}


# ------------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit sketch/spark_job.py build|append DATASET INPUT… [options]``: the job as a Spark
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
    parser.add_argument("--home", type=Path, default=None, help="data root (default $SEQSKETCH_HOME)")
    args = parser.parse_args(argv)
    home = args.home or seqsketch_home()

    def report(fraction: float, message: str) -> None:
        print(f"seqsketch: [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    spark = None
    try:
        spark = spark_session()
        if args.action == "build":
            summary = build_dataset_spark(home, args.dataset, args.inputs, fmt=args.format,
                                          type_field=args.type_field, time_field=args.time_field,
                                          leaf_size=args.leaf_size, fpq=args.fpq, memory=args.memory,
                                          replace_existing=args.replace, progress=report, spark=spark)
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
