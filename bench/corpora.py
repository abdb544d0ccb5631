"""The real streams the seed protocols run on, read once per process, and streams derived from them.

* ``bpic2012`` — BPI Challenge 2012 (XES): the real-log stand-in for Baltus' BPI 2017/2020 and Cadonna's Onco.
* ``brown`` — the Brown corpus as a word stream (``text`` input): the stand-in for Baltus' Gutenberg streams.
* replays: BPI 2012 copied with shifted time and case ids (:func:`replay`), the word stream
  repeated with positions continuing (:func:`replay_words`), for sizes beyond the real data.

A ``limit`` keeps the first events of a stream (in stream order), so tiny runs use real data too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.events import ATTRS, SEQ, TS, concat_batches
from exact.ingest import IngestOptions, ingest, order_by_time, read_inputs, with_seq


def shared_data() -> Path:
    """The first of :func:`api.service.shared_data_dirs` that exists (the first of them if none)."""
    from api.service import shared_data_dirs

    candidates = shared_data_dirs()
    return next((d for d in candidates if d.is_dir()), candidates[0])


DEFAULT_DATA = shared_data()
BPIC = "bpic2012.xes.gz"
BROWN = "brown.zip"


def replay(base: pa.Table, copies: int) -> pa.Table:
    """``base`` (no seq) replayed ``copies`` times, each copy after the previous in time, cases renamed."""
    return concat_batches(list(replay_copies(base, copies)))


def replay_copies(base: pa.Table, copies: int, first: int = 0) -> Iterator[pa.Table]:
    """The copies ``first, first + 1, …`` of :func:`replay`, one table each (in the base's order): what a
    replay too large to hold at once is written from, copy by copy."""
    ts = base.column(TS).cast(pa.int64())
    span = pc.max(ts).as_py() - pc.min(ts).as_py() + 1
    struct = base.column(ATTRS).combine_chunks()
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    for k in range(first, first + copies):
        children = [pc.binary_join_element_wise(f"r{k}", c, "-") if n == "case" else c
                    for n, c in zip(names, struct.flatten(), strict=True)]
        shifted = pc.add(ts, k * span).cast(base.schema.field(TS).type)
        yield pa.table({TS: shifted, "type": base.column("type"),
                        ATTRS: pa.StructArray.from_arrays(children, names=names)})


def write_replay_parquet(raw: pa.Table, events: int, folder: Path, files: int) -> list[Path]:
    """At least ``events`` events of :func:`replay` (whole copies: ``ceil(events / len(raw))``) as ``files``
    Parquet files of consecutive copies, one row group a copy, each copy in the base's (trace) order —
    written copy by copy, so memory holds one copy whatever ``events`` is."""
    import pyarrow.parquet as pq

    copies = max(1, math.ceil(events / max(raw.num_rows, 1)))
    per_file = math.ceil(copies / files)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f, first in enumerate(range(0, copies, per_file)):
        path = folder / f"replay-{f:03d}.parquet"
        writer = None
        for table in replay_copies(raw, min(per_file, copies - first), first):
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="zstd")
            writer.write_table(table, row_group_size=table.num_rows)
        assert writer is not None
        writer.close()
        paths.append(path)
    return paths


def replay_words(stream: pa.Table, copies: int) -> pa.Table:
    """A word stream repeated ``copies`` times, each copy's positions (ts) continuing after the last one's."""
    base = stream.drop_columns([SEQ]) if SEQ in stream.column_names else stream
    ts = base.column(TS).cast(pa.int64()).to_numpy(zero_copy_only=False)
    span = int(ts[-1] - ts[0]) + 1 if len(ts) else 0
    parts = []
    for k in range(copies):
        shifted = pa.array(ts + k * span, pa.int64()).cast(base.schema.field(TS).type)
        parts.append(base.set_column(base.column_names.index(TS), base.schema.field(TS), shifted))
    return with_seq(pa.concat_tables(parts).combine_chunks())


def replay_log(raw: pa.Table, events: int) -> pa.Table:
    """At least ``events`` events of BPI-like log ``raw`` (no seq), replayed with shifted time and case ids
    (:func:`replay`), ordered, cut to exactly ``events`` and numbered."""
    copies = max(1, math.ceil(events / max(raw.num_rows, 1)))
    stream = with_seq(order_by_time(replay(raw, copies)))
    return stream.slice(0, events) if stream.num_rows > events else stream


@dataclass
class Corpora:
    """The shared data directory, read lazily and kept in memory for one benchmark run."""

    data: Path = DEFAULT_DATA
    bpic_limit: int | None = None
    brown_limit: int | None = None
    _cache: dict[str, pa.Table] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        path = self.data / name
        if not path.is_file():
            raise FileNotFoundError(f"benchmark data {name} not found in {self.data}")
        return path

    def bpic_raw(self) -> pa.Table:
        """BPI 2012 as read, before ordering (the input of :func:`replay_log`)."""
        if "bpic_raw" not in self._cache:
            self._cache["bpic_raw"] = read_inputs([self.path(BPIC)])
        return self._cache["bpic_raw"]

    def bpic(self) -> pa.Table:
        if "bpic" not in self._cache:
            stream = with_seq(order_by_time(self.bpic_raw()))
            self._cache["bpic"] = _first(stream, self.bpic_limit)
        return self._cache["bpic"]

    def brown(self) -> pa.Table:
        if "brown" not in self._cache:
            stream = ingest([self.path(BROWN)], IngestOptions(fmt="text"))
            self._cache["brown"] = _first(stream, self.brown_limit)
        return self._cache["brown"]

    def bpic_events(self, events: int) -> pa.Table:
        """``events`` events of BPI 2012: its prefix when that is enough, else a replay."""
        if events <= self.bpic().num_rows:
            return self.bpic().slice(0, events)
        return replay_log(self.bpic_raw(), events)


def _first(stream: pa.Table, limit: int | None) -> pa.Table:
    return stream if limit is None or stream.num_rows <= limit else stream.slice(0, limit)


def sample_types(stream: pa.Table, count: int, rng: np.random.Generator, *, by_frequency: bool) -> list[str]:
    """``count`` event types: drawn from random events of the stream (``by_frequency``: each type as often as
    it occurs, as Baltus draws A, B, C "from the dataset") or uniformly from its distinct types."""
    types = stream.column("type")
    if by_frequency:
        picks = rng.integers(0, len(types), size=count)
        return [str(types[int(i)].as_py()) for i in picks]
    distinct = sorted(set(types.unique().to_pylist()))
    return [distinct[int(i)] for i in rng.integers(0, len(distinct), size=count)]
