"""The build's DataFrame → DataFrame steps on Spark: order, number, pair, and write by window.

Step 2 (:func:`order_events`, :func:`partition_sizes`, :func:`number_events`): the global sort by ``(ts,
file, pos)`` and ``seq`` assigned per partition from counted offsets, without collecting anything to one
place.  Step 3 (:func:`leaf_type_pairs`): the distinct (leaf, type) pairs §4.4's sizing counts.  Step 4
(:func:`window_partitions`, :func:`write_windows`): one partition per window of whole leaves
(:func:`window_geometry`), whose task writes the window as one event-store part and builds its leaves
(Baltus 2021, Alg. 1) with the tree's own code, answering one row (:data:`WINDOW_SCHEMA`) that the driver
reads back (:func:`part_from_row`, :func:`check_windows`).  :mod:`sketch.spark_job` runs them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from exact.errors import SeqsketchError
from exact.events import ATTRS, SEQ, TS, TS_TYPE, TYPE, conform
from exact.store import DEFAULT_PART_ROWS, EventStore, PartInfo
from sketch.spark_leaves import LeafRun, runs_to_arrow, window_leaves
from sketch.spark_read import error_to_json
from sketch.tree import TreeConfig

#: Events per window at most: a window is one part file, so this matches the local build's part size.
MAX_WINDOW_EVENTS = DEFAULT_PART_ROWS

#: One row per window written: its part, its leaves, or the error that stopped it.
WINDOW_SCHEMA = ("window BIGINT, part STRING, type_counts STRING, first_leaf BIGINT, bits BINARY, "
                 "lo_ts BINARY, hi_ts BINARY, end_seq BIGINT, error STRING, seconds DOUBLE")


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


def check_windows(answers: Sequence[Mapping[str, Any]], first_seq: int, events: int) -> None:
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
