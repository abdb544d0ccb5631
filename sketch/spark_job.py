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

Progress is reported to a callback ``progress(fraction, message)`` (the CLI prints it; the service records it
in the jobs table).  Errors a user can cause come back as :class:`exact.errors.SeqsketchError` naming the
input and the problem; a failure inside Spark becomes one, too, with the failing stage — never a Py4J trace.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.errors import Conflict, InputError, SeqsketchError
from exact.events import ATTRS, SEQ, TS, TS_TYPE, TYPE, conform, iso_of_micros
from exact.ingest import IngestOptions
from exact.store import DEFAULT_PART_ROWS, EventStore, PartInfo, Snapshot
from sketch.build import BuildOptions, config_from
from sketch.sizing import Sizing, measure_distinct, size_index
from sketch.spark_leaves import LeafRun, merge_leaves, run_from_row, runs_to_arrow, window_leaves
from sketch.spark_read import (
    StagedChunk,
    already_in_order,
    collect_staged,
    error_from_json,
    error_to_json,
    plan_inputs,
    stage_inputs,
    staged_events,
    unified_attrs,
)
from sketch.tree import BloomTree, TreeConfig

DEFAULT_MASTER = "local[*]"
#: Events per window at most: a window is one part file, so this matches the local build's part size.
MAX_WINDOW_EVENTS = DEFAULT_PART_ROWS

Progress = Callable[[float, str], None]

#: One row per window written: its part, its leaves, or the error that stopped it.
WINDOW_SCHEMA = ("window BIGINT, part STRING, type_counts STRING, first_leaf BIGINT, bits BINARY, "
                 "lo_ts BINARY, hi_ts BINARY, end_seq BIGINT, error STRING, seconds DOUBLE")


def _no_progress(fraction: float, message: str) -> None:
    return None


# ------------------------------------------------------------------------------------------ the session


def session_config(master: str | None = None) -> dict[str, str]:
    """Settings that make a small job cheap (no UI, few shuffle partitions) and keep ts and names exact."""
    master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    cores = os.cpu_count() or 2
    return {
        "spark.master": master,
        "spark.app.name": "seqsketch-build",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.sql.session.timeZone": "UTC",
        # Attribute names such as ``Case`` and ``case`` are different attributes.
        "spark.sql.caseSensitive": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # The Python workers must import this package: use the interpreter that runs the driver.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.memory": os.environ.get("SEQSKETCH_SPARK_DRIVER_MEMORY", "4g"),
    }


def spark_session(master: str | None = None) -> Any:
    """A SparkSession for ``master`` (default ``$SPARK_MASTER``, else ``local[*]``): the job's only edge."""
    from pyspark.sql import SparkSession

    # PySpark picks the workers' interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # what pyspark.pandas (assertions) asks for
    config = session_config(master)
    if not (master or os.environ.get("SPARK_MASTER")) and "PYSPARK_GATEWAY_PORT" in os.environ:
        del config["spark.master"]  # under spark-submit, its --master decides
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    log = jvm_log_path()
    try:
        with _stderr_to(log):  # the JVM keeps the descriptor it starts with: its chatter goes to the log
            spark = builder.getOrCreate()
    except Exception as err:  # the JVM did not start (no Java, no memory, a bad setting): say where to look
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SeqsketchError(f"Spark did not start: {first}; the JVM's messages are in {log}",
                             where="spark") from err
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def jvm_log_path() -> Path:
    """Where the Spark JVM's own messages go: ``$SEQSKETCH_SPARK_LOG``, else ``seqsketch-spark.log`` in the
    temporary directory."""
    import tempfile

    return Path(os.environ.get("SEQSKETCH_SPARK_LOG") or Path(tempfile.gettempdir()) / "seqsketch-spark.log")


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (appended) for the block.

    The JVM that PySpark launches inherits the process's descriptor 2 and writes to it from its first moment
    — the launcher's incubator-module note, log4j's default-profile and log-level notices, Hadoop's
    NativeCodeLoader warning — before any log setting of ours could apply.  Launched while descriptor 2 is the
    log file, it keeps writing there for its life; the Python side gets its descriptor 2 back at once.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


# ------------------------------------------------------------------------------ DataFrame → DataFrame


def order_events(events: Any) -> Any:
    """Stream order: by ``ts``, ties in input order (the input's index, then the position within it)."""
    return events.orderBy("ts", "file", "pos")


def partition_sizes(ordered: Any) -> list[int]:
    """Rows of every partition of ``ordered``, by partition id (one small aggregation; nothing else moves)."""
    from pyspark.sql import functions as F

    rows = ordered.groupBy(F.spark_partition_id().alias("part")).count().collect()
    sizes = [0] * ordered.rdd.getNumPartitions()
    for row in rows:
        sizes[row["part"]] = row["count"]
    return sizes


def number_events(ordered: Any, offsets: Sequence[int]) -> Any:
    """``seq`` for every event of ``ordered`` (which must be cached, so its partitions stay as counted):
    partition ``p`` numbers its rows from ``offsets[p]``.

    A projection in the JVM: ``monotonically_increasing_id()`` is ``p · 2^33`` plus the row's index within
    its partition, so ``seq = offsets[p] + id − p · 2^33`` — no row leaves its partition.
    """
    from pyspark.sql import functions as F

    part = F.spark_partition_id().cast("long")
    offset = F.element_at(F.array(*[F.lit(int(o)) for o in offsets]), F.spark_partition_id() + 1)
    seq = (offset + F.monotonically_increasing_id() - F.shiftleft(part, 33)).alias(SEQ)
    rest = [c for c in ordered.columns if c not in ("file", "pos")]
    return ordered.select(seq, *rest)


def leaf_type_pairs(numbered: Any, leaf_size: int, base: int = 0) -> Any:
    """The distinct (leaf, type) pairs of a numbered stream: what §4.4's distinct-type profile counts."""
    from pyspark.sql import functions as F

    leaf = ((F.col(SEQ) - F.lit(base)) / F.lit(leaf_size)).cast("long")
    return numbered.select(leaf.alias("leaf"), TYPE).distinct()


def window_partitions(numbered: Any, base: int, window_events: int, windows: int) -> Any:
    """One partition per window of ``window_events`` seqs from ``base`` (leaf-aligned), in seq order."""
    from pyspark.sql import functions as F

    window = ((F.col(SEQ) - F.lit(base)) / F.lit(window_events)).cast("long")
    return (numbered.withColumn("window", window).repartitionByRange(max(1, windows), "window")
            .sortWithinPartitions(SEQ))


def write_windows(windowed: Any, plan: WritePlan) -> Any:
    """Each window → one event-store part written by its task, and the window's leaves (WINDOW_SCHEMA)."""
    return windowed.mapInArrow(_WindowTask(plan), WINDOW_SCHEMA)


@dataclass(frozen=True)
class WritePlan:
    """What every window task needs: where and how to write, the tree's shape, the windows' geometry."""

    store_root: str
    row_group_size: int
    attrs: tuple[tuple[str, pa.DataType], ...]
    config: TreeConfig
    base: int
    first_seq: int
    window_events: int


@dataclass(frozen=True)
class _WindowTask:
    plan: WritePlan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [batch for batch in batches if batch.num_rows]
        if not received:  # a range partition that drew no window
            return
        table = pa.Table.from_batches(received)
        window = table.column("window").combine_chunks().to_numpy(zero_copy_only=False)
        bounds = np.flatnonzero(np.diff(window)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [len(window)]))
        for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
            yield self.write(int(window[lo]), table.slice(lo, hi - lo))

    def write(self, window: int, rows: pa.Table) -> pa.RecordBatch:
        plan = self.plan
        started = time.perf_counter()
        try:
            stream = stream_table(rows, dict(plan.attrs))
            first = stream.column(SEQ)[0].as_py()
            store = EventStore(Path(plan.store_root))
            part = store.write_part(stream, first, row_group_size=plan.row_group_size)
            leaf_start = plan.base + window * plan.window_events
            types, ts = stream.column(TYPE), stream.column(TS)
            if first > leaf_start:  # an append that continues the stored partial leaf: rebuild it whole
                stored = store.read_table(leaf_start, first - 1, columns=[TS, TYPE])
                types = pa.chunked_array(stored.column(TYPE).chunks + types.chunks, pa.string())
                ts = pa.chunked_array(stored.column(TS).chunks + ts.chunks, TS_TYPE)
            run = window_leaves(plan.config, types, ts, leaf_start)
            return _window_row(window, part, run, None, time.perf_counter() - started)
        except Exception as err:
            if not isinstance(err, SeqsketchError):
                err = SeqsketchError(f"writing window {window}: {type(err).__name__}: {err}",
                                     where=plan.store_root)
            return _window_row(window, None, None, error_to_json(err), time.perf_counter() - started)


def stream_table(rows: pa.Table, attrs: Mapping[str, pa.DataType]) -> pa.Table:
    """Spark's rows of one window (seq, ts µs, type, attrs) as a table of the exact stream schema."""
    cols = {SEQ: rows.column(SEQ).cast(pa.int64()),
            TS: rows.column(TS).combine_chunks().cast(pa.int64()).cast(TS_TYPE),
            TYPE: rows.column(TYPE).cast(pa.string())}
    if attrs:
        cols[ATTRS] = rows.column(ATTRS)
    return conform(pa.table(cols), attrs)


_WINDOW_ARROW = pa.schema([("window", pa.int64()), ("part", pa.string()), ("type_counts", pa.string()),
                           ("first_leaf", pa.int64()), ("bits", pa.binary()), ("lo_ts", pa.binary()),
                           ("hi_ts", pa.binary()), ("end_seq", pa.int64()), ("error", pa.string()),
                           ("seconds", pa.float64())])


def _window_row(window: int, part: PartInfo | None, run: LeafRun | None, error: str | None,
                seconds: float) -> pa.RecordBatch:
    runs = runs_to_arrow([run]) if run is not None else {k: [None] for k in
                                                         ("first_leaf", "bits", "lo_ts", "hi_ts", "end_seq")}
    return pa.RecordBatch.from_pydict(
        {"window": [window], "part": [json.dumps(part.to_json()) if part else None],
         "type_counts": [json.dumps(list(part.type_counts)) if part else None], **runs, "error": [error],
         "seconds": [seconds]},
        schema=_WINDOW_ARROW)


def part_from_row(row: Mapping[str, Any]) -> PartInfo:
    """A window's part descriptor back from its answer row (with the type counts the commit sums)."""
    counts = tuple((t, int(n)) for t, n in json.loads(row["type_counts"]))
    return replace(PartInfo.from_json(json.loads(row["part"])), type_counts=counts)


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


@contextmanager
def spark_errors(stage: list[str]) -> Iterator[None]:
    """Turn a failure inside Spark (a Py4J or PySpark exception) into one clear SeqsketchError line."""
    try:
        yield
    except SeqsketchError:
        raise
    except Exception as err:
        module = type(err).__module__ or ""
        if not (module.startswith("pyspark") or module.startswith("py4j")):
            raise
        raise SeqsketchError(f"the Spark job failed while {stage[0]}: {_summary(err)}",
                             where="spark") from None


def _summary(err: BaseException) -> str:
    """The informative last line of a Spark/Py4J error (the Python exception of a task, or the JVM's)."""
    text = str(err).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line.startswith(("at ", "File ", "^", "...", "JVM stacktrace")):
            return line[:500]
    return type(err).__name__


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
    _check_windows(answers, first_seq, events)
    return answers


def window_geometry(span: int, leaf_size: int, parallelism: int) -> tuple[int, int]:
    """``(events per window, windows)``: whole leaves per window, at least one window per core when the
    stream allows, and no window above :data:`MAX_WINDOW_EVENTS` (one part file each)."""
    leaves = max(1, math.ceil(span / leaf_size))
    tasks = max(parallelism, math.ceil(span / MAX_WINDOW_EVENTS))
    per_window = max(1, leaves // tasks)  # rounded down: at least ``tasks`` windows
    while per_window > 1 and per_window * leaf_size > MAX_WINDOW_EVENTS:
        per_window -= 1
    window_events = per_window * leaf_size
    return window_events, math.ceil(span / window_events)


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


def _check_windows(answers: Sequence[Mapping[str, Any]], first_seq: int, events: int) -> None:
    """The windows' parts tile ``[first_seq, first_seq + events)`` with no gap or overlap."""
    seq = first_seq
    for a in answers:
        part = json.loads(a["part"])
        if part["first_seq"] != seq:
            raise SeqsketchError(f"window {a['window']} starts at seq {part['first_seq']}, expected {seq}",
                                 where="spark")
        seq = part["last_seq"] + 1
    if seq != first_seq + events:
        raise SeqsketchError(f"the windows hold {seq - first_seq} events of {events}", where="spark")


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
                        leaves_per_task: int | None = None) -> dict[str, Any]:
    """``seqsketch build --engine spark``: a new dataset (store + index) published at once, or nothing."""
    from exact.store import check_dataset_name, dataset_dir, staged_dataset, store_dir
    from sketch.dataset import write_index

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
