"""Ordering by window: the stream cut into windows of whole leaves, each merged, written and indexed by one
task — a sample sort whose runs are the staged chunks, with no shuffle through the JVM.

Every staged chunk (:mod:`sketch.spark.read`) is sorted by time, stably, and the chunks are numbered in input
order, so stream order — by time, ties in input order — is the order of ``(ts, chunk, row)`` over all
chunks, and a chunk's events at or after any such triple are a suffix of it, found by binary search.

* **Boundaries** (:func:`choose_boundaries`, driver): ``windows − 1`` triples taken at even ranks of the
  chunks' time samples, so the windows hold about equally many events.
* **Ranks** (:func:`rows_below`, :func:`aligned_starts`, in every window task): each chunk's rows below each
  boundary, by binary search on its mapped times; their sums are the boundaries' exact ranks ``S``, and
  window ``w`` holds the stream's events of ranks ``[R_w, R_{w+1})``, ``R`` being ``S`` moved up to the next
  leaf start, so no leaf straddles two windows.  Every task computes the same ``R`` from the same chunks.
* **A window** (:class:`_WindowTask`): the rows from the window's lower boundary up to its upper one — plus
  up to ``R_{w+1} − S_{w+1}`` (< C) rows past it from every chunk, the leaf's events it takes from the next
  range — sliced out of the memory-mapped chunks, merged by a stable sort on time (chunks concatenated in
  order, so ties stay in input order), the first ``R_w − S_w`` dropped (the previous window's), numbered
  and written as event-store parts (:meth:`exact.store.EventStore.write_part`); then its leaves: their
  distinct types as (leaf, type) pairs and their time ranges (Baltus 2021, Alg. 1's input), and their
  filters' bits when the tree's configuration is known (an append), else by a second, small pass once the
  driver has sized the tree from every window's pairs (:func:`sketch.spark.leaves.leaf_bits`).  With a
  partition key it also writes its events' key, type and time compactly for the driver's partition build
  (:func:`sketch.partition.build_columns.window_columns`).

Memory per task is one window (at most :data:`MAX_WINDOW_EVENTS` events, plus the slices it maps); the
driver sees samples, pairs and leaf bits, never events.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from exact.errors import SeqsketchError
from exact.events import ATTRS, SEQ, SEQ_TYPE, TS, TS_TYPE, TYPE, conform, micros
from exact.readers.tabular import cast_text_column
from exact.store import DEFAULT_PART_ROWS, EventStore, PartInfo
from sketch.partition.build_columns import window_columns
from sketch.spark.leaves import leaf_bits
from sketch.spark.read import StagedChunk, error_to_json, types_of
from sketch.tree import TreeConfig, encode_types, leaf_type_pairs

#: Events per window at most: what one task holds at once (one event-store part's worth).
MAX_WINDOW_EVENTS = DEFAULT_PART_ROWS
#: Windows are planned at this share of :data:`MAX_WINDOW_EVENTS` on average: their boundaries come from
#: samples, so a window planned at the cap itself comes out a little above it about every other time, and
#: its part would be cut in two (a full part and a sliver, which a read pays for as for a full one).
WINDOW_FILL = 0.875

#: One row per non-empty window: its parts, its leaves, or the error that stopped it.
WINDOW_SCHEMA = ("window BIGINT, first_seq BIGINT, events BIGINT, parts STRING, first_leaf BIGINT, "
                 "leaves BIGINT, vocabulary STRING, pairs BINARY, lo_ts BINARY, hi_ts BINARY, "
                 "end_seq BIGINT, bits BINARY, partition STRING, keyless BIGINT, error STRING, "
                 "seconds DOUBLE")
_WINDOW_ARROW = pa.schema([("window", pa.int64()), ("first_seq", pa.int64()), ("events", pa.int64()),
                           ("parts", pa.string()), ("first_leaf", pa.int64()), ("leaves", pa.int64()),
                           ("vocabulary", pa.string()), ("pairs", pa.binary()), ("lo_ts", pa.binary()),
                           ("hi_ts", pa.binary()), ("end_seq", pa.int64()), ("bits", pa.binary()),
                           ("partition", pa.string()), ("keyless", pa.int64()), ("error", pa.string()),
                           ("seconds", pa.float64())])


def window_count(events: int, parallelism: int, window_events: int | None = None) -> int:
    """How many windows: at least two per core, none above :data:`MAX_WINDOW_EVENTS` events (or exactly
    ``window_events`` each, when given)."""
    if window_events:
        return max(1, math.ceil(events / window_events))
    return max(1, min(max(2 * parallelism, math.ceil(events / (MAX_WINDOW_EVENTS * WINDOW_FILL))), events))


# ------------------------------------------------------------------------------------- boundaries, ranks


@dataclass(frozen=True)
class Boundaries:
    """The windows' inner boundaries as ``(ts, chunk, row)`` triples, increasing (``len + 1`` windows)."""

    ts: tuple[int, ...] = ()
    chunk: tuple[int, ...] = ()
    row: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.ts)


def choose_boundaries(chunks: Sequence[tuple[StagedChunk, int]], windows: int) -> Boundaries:
    """``windows − 1`` boundaries at even ranks of the chunks' samples (each chunk with its time shift)."""
    if windows <= 1 or not chunks:
        return Boundaries()
    ts = np.concatenate([c.sample_ts() + shift for c, shift in chunks])
    owner = np.concatenate([np.full(len(c.sample_ts()), i, dtype=np.int64)
                            for i, (c, _) in enumerate(chunks)])
    row = np.concatenate([np.arange(len(c.sample_ts()), dtype=np.int64) * c.step for c, _ in chunks])
    order = np.lexsort((row, owner, ts))
    picks = order[(np.arange(1, windows, dtype=np.int64) * len(order)) // windows]
    triples = sorted({(int(ts[i]), int(owner[i]), int(row[i])) for i in picks.tolist()})
    return Boundaries(tuple(t for t, _, _ in triples), tuple(c for _, c, _ in triples),
                      tuple(r for _, _, r in triples))


def rows_below(ts: np.ndarray, chunk: int, bounds: Boundaries) -> np.ndarray:
    """Rows of chunk ``chunk`` (sorted times ``ts``) that come before each boundary in stream order."""
    if not len(bounds):
        return np.zeros(0, dtype=np.int64)
    at = np.asarray(bounds.ts, dtype=np.int64)
    owner = np.asarray(bounds.chunk, dtype=np.int64)
    left = np.searchsorted(ts, at, "left")
    right = np.searchsorted(ts, at, "right")
    # an earlier chunk's ties come first, a later chunk's after; in the boundary's own chunk, its row
    return np.where(owner > chunk, right, np.where(owner == chunk, np.asarray(bounds.row), left)).astype(
        np.int64)


def aligned_starts(ranks: np.ndarray, first_seq: int, leaf_size: int) -> np.ndarray:
    """Window starts: the boundaries' ranks (``ranks[0] = 0`` … ``ranks[-1]`` = all events) moved up to the
    next leaf start (in seq, which counts from ``first_seq``); the first and the end stay."""
    seqs = first_seq + ranks
    up = -(-seqs // leaf_size) * leaf_size - first_seq
    out = np.minimum(up, ranks[-1])
    out[0], out[-1] = 0, ranks[-1]
    return np.maximum.accumulate(out)


def part_slices(rows: int, part_rows: int) -> list[tuple[int, int]]:
    """A window's ``rows`` as the fewest parts of at most ``part_rows`` rows, of sizes as even as can be
    (offset, rows): a window a little above the cap makes two halves, not a full part and a sliver."""
    count = max(1, -(-rows // part_rows))
    cuts = [rows * i // count for i in range(count + 1)]
    return [(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


# ------------------------------------------------------------------------------------------ the task


@dataclass(frozen=True)
class ChunkRef:
    """What a window task needs of a staged chunk: its file, rows, time shift and text columns' types."""

    path: str
    rows: int
    shift: int
    text_types: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WindowPlan:
    """What every window task needs: the chunks, the boundaries, where and how to write, the leaves."""

    store_root: str
    row_group_size: int
    attrs: tuple[tuple[str, pa.DataType], ...]
    chunks: tuple[ChunkRef, ...]
    bounds: Boundaries
    first_seq: int
    leaf_size: int
    config: TreeConfig | None = None  # known (an append): the tasks build the leaves' bits themselves
    part_rows: int = DEFAULT_PART_ROWS
    #: With a partition key, each task writes its events' key, type and time there for the partition build
    #: (:func:`sketch.partition.build_columns.window_columns`).
    partition_key: str | None = None
    staging: str = ""
    #: the bucket location of a dataset on object storage: each task uploads the parts it wrote there itself
    #: (:mod:`exact.store.replica`), so no part passes through the driver
    upload_to: str = ""
    #: the driver's object-store settings (``AWS_*``), for executors whose environment has none
    upload_env: tuple[tuple[str, str], ...] = ()

    @property
    def windows(self) -> int:
        return len(self.bounds) + 1


def write_windows(spark: Any, plan: WindowPlan) -> Any:
    """``DataFrame → DataFrame``: one task per window merges, writes and indexes it
    (:data:`WINDOW_SCHEMA`)."""
    n = plan.windows
    return spark.range(0, n, 1, numPartitions=n).mapInArrow(_WindowTask(plan), WINDOW_SCHEMA)


@dataclass(frozen=True)
class _WindowTask:
    plan: WindowPlan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for window in batch.column(0).to_pylist():
                started = time.perf_counter()
                try:
                    row = self.run(window, started)
                except Exception as err:
                    if not isinstance(err, SeqsketchError):
                        err = SeqsketchError(f"writing window {window}: {type(err).__name__}: {err}",
                                             where=self.plan.store_root)
                    row = WindowRow(window, error=error_to_json(err), seconds=time.perf_counter() - started).batch()
                if row is not None:
                    yield row

    def run(self, window: int, started: float) -> pa.RecordBatch | None:
        plan = self.plan
        mapped = [_map_chunk(c) for c in plan.chunks]
        below = np.zeros((len(mapped), plan.windows + 1), dtype=np.int64)
        for c, (_, ts) in enumerate(mapped):
            below[c, 1:-1] = rows_below(ts, c, plan.bounds)
            below[c, -1] = len(ts)
        ranks = below.sum(axis=0)
        starts = aligned_starts(ranks, plan.first_seq, plan.leaf_size)
        lo, hi = int(starts[window]), int(starts[window + 1])
        if lo == hi:
            return None
        extra = hi - int(ranks[window + 1])  # the rows of the leaf it finishes past the next boundary
        tables, times = [], []
        for c, (batch, ts) in enumerate(mapped):
            a, b = int(below[c, window]), min(len(ts), int(below[c, window + 1]) + extra)
            if b > a:
                tables.append(self.readable(plan.chunks[c], batch.slice(a, b - a)))
                times.append(ts[a:b])
        merged = pa.concat_tables(tables)
        ts = np.concatenate(times)
        skip = lo - int(ranks[window])
        if len(ts) > 1 and not bool((ts[1:] >= ts[:-1]).all()):
            rows = merged.take(np.argsort(ts, kind="stable")[skip:skip + hi - lo])
        else:
            rows = merged.slice(skip, hi - lo)
        del mapped, tables, merged, times, ts
        first = plan.first_seq + lo
        stream = rows.combine_chunks().add_column(0, pa.field(SEQ, SEQ_TYPE, nullable=False),
                                                  pa.array(np.arange(first, first + hi - lo), SEQ_TYPE))
        store = EventStore(Path(plan.store_root))
        parts = [store.write_part(stream.slice(at, size), first + at, row_group_size=plan.row_group_size)
                 for at, size in part_slices(stream.num_rows, plan.part_rows)]
        if plan.upload_to:
            from exact.store.objects import ObjectStore

            for key, value in plan.upload_env:
                os.environ.setdefault(key, value)
            bucket = ObjectStore(plan.upload_to)
            for part in parts:
                for f in part.files:
                    bucket.put_if_absent(f"store/parts/{f}", (store.root / "parts" / f).read_bytes())
        return self.leaves(window, store, stream, parts, started)

    def readable(self, chunk: ChunkRef, batch: pa.RecordBatch) -> pa.Table:
        """A slice of a chunk on the stream's schema: text columns typed, times shifted, attributes
        widened."""
        table = pa.Table.from_batches([batch])
        if chunk.text_types and ATTRS in table.column_names:
            struct = table.column(ATTRS).combine_chunks()
            typed = types_of(chunk.text_types)
            names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
            children = [cast_text_column(child, typed[n]) if n in typed else child
                        for n, child in zip(names, struct.flatten(), strict=True)]
            kept = [(n, c) for n, c in zip(names, children, strict=True) if not pa.types.is_null(c.type)]
            table = table.drop_columns([ATTRS])
            if kept:
                table = table.append_column(ATTRS, pa.StructArray.from_arrays([c for _, c in kept],
                                                                              names=[n for n, _ in kept]))
        if chunk.shift:
            ts = table.column(TS).combine_chunks().view(pa.int64())
            shifted = pa.array(ts.to_numpy(zero_copy_only=False) + chunk.shift, pa.int64()).cast(TS_TYPE)
            table = table.set_column(table.column_names.index(TS), TS, shifted)
        return conform(table, dict(self.plan.attrs))

    def leaves(self, window: int, store: EventStore, stream: pa.Table, parts: list[PartInfo],
               started: float) -> pa.RecordBatch:
        """The window's leaves: (leaf, type) pairs, time ranges, and bits when the configuration is known."""
        plan = self.plan
        C = plan.leaf_size
        first = int(stream.column(SEQ)[0].as_py())
        leaf_start = (first // C) * C
        types, ts = stream.column(TYPE), stream.column(TS)
        if first > leaf_start:  # an append that continues the stored partial leaf: rebuild it whole
            stored = store.read_table(leaf_start, first - 1, columns=[TS, TYPE])
            types = pa.chunked_array(stored.column(TYPE).chunks + types.chunks, pa.string())
            ts = pa.chunked_array(stored.column(TS).chunks + ts.chunks, TS_TYPE)
        codes, vocabulary = encode_types(types)
        width = max(len(vocabulary), 1)
        pairs = leaf_type_pairs(codes, width, 0, C)
        count = -(-len(codes) // C)
        times = micros(ts)
        bounds = np.minimum(np.arange(count, dtype=np.int64) * C, len(times))
        lo_ts, hi_ts = np.minimum.reduceat(times, bounds), np.maximum.reduceat(times, bounds)
        bits = leaf_bits(plan.config, vocabulary, pairs, count) if plan.config is not None else None
        listed = [{**p.to_json(), "type_counts": [list(tc) for tc in p.type_counts]} for p in parts]
        partition, keyless = None, 0
        if plan.partition_key:
            partition = str(Path(plan.staging) / f"partition-{window:06d}.arrow")
            keyless = window_columns(stream, plan.partition_key, Path(partition))
        return WindowRow(window, first_seq=first, events=stream.num_rows, parts=json.dumps(listed),
                         first_leaf=leaf_start // C, leaves=count, vocabulary=json.dumps(vocabulary),
                         pairs=pairs.astype("<i8").tobytes(), lo_ts=lo_ts.astype("<i8").tobytes(),
                         hi_ts=hi_ts.astype("<i8").tobytes(), end_seq=first + stream.num_rows, bits=bits,
                         partition=partition, keyless=keyless, seconds=time.perf_counter() - started).batch()


def _map_chunk(chunk: ChunkRef) -> tuple[pa.RecordBatch, np.ndarray]:
    """A staged chunk mapped in place, with its (shifted) times as int64."""
    with pa.memory_map(chunk.path) as source:
        reader = ipc.open_file(source)
        batch = reader.get_batch(0) if reader.num_record_batches else None
    if batch is None:
        return pa.RecordBatch.from_pydict({}), np.zeros(0, dtype=np.int64)
    ts = batch.column(batch.schema.get_field_index(TS)).view(pa.int64()).to_numpy(zero_copy_only=False)
    return batch, ts + chunk.shift if chunk.shift else ts


@dataclass(frozen=True)
class WindowRow:
    """What a window's task answers the driver, one row of ``_WINDOW_ARROW``: where its events begin and how
    many, the parts it wrote (JSON), its leaves (first, count, the vocabulary, the (leaf, type) pairs, each
    leaf's time range), its bits, its partition columns' file and keyless events — or the error that failed
    it — and how long it took."""

    window: int
    first_seq: int = 0
    events: int = 0
    parts: str | None = None
    first_leaf: int = 0
    leaves: int = 0
    vocabulary: str = "[]"
    pairs: bytes = b""
    lo_ts: bytes = b""
    hi_ts: bytes = b""
    end_seq: int = 0
    bits: bytes | None = None
    partition: str | None = None
    keyless: int = 0
    error: str | None = None
    seconds: float = 0.0

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({f.name: [getattr(self, f.name)] for f in fields(self)},
                                          schema=_WINDOW_ARROW)


def parts_of(row: Mapping[str, Any]) -> list[PartInfo]:
    """A window's part descriptors back from its answer row (with the type counts the commit sums)."""
    out = []
    for d in json.loads(row["parts"] or "[]"):
        counts = tuple((t, int(n)) for t, n in d.pop("type_counts", ()))
        info = PartInfo.from_json(d)
        out.append(PartInfo(**{**info.__dict__, "type_counts": counts}))
    return out


def check_windows(rows: Sequence[Mapping[str, Any]], first_seq: int, events: int) -> None:
    """The windows' parts tile ``[first_seq, first_seq + events)`` with no gap or overlap."""
    seq = first_seq
    for row in rows:
        for part in parts_of(row):
            if part.first_seq != seq:
                raise SeqsketchError(f"window {row['window']} has a part from seq {part.first_seq}, expected "
                                     f"{seq}", where="spark")
            seq = part.last_seq + 1
    if seq != first_seq + events:
        raise SeqsketchError(f"the windows hold {seq - first_seq} events of {events}", where="spark")
