"""Ingest: inputs → one stream table in stream order, with ``seq`` assigned (docs/contract.md §1).

Stream order is ts order with ties kept in input order: within one input, the order its reader yields;
across several inputs, the order they are given in.  All work after reading is columnar (one stable Arrow
sort over the concatenated batches, one ``take``), so millions of events stay in compact Arrow memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.events import SEQ, SEQ_TYPE, TS, concat_batches
from exact.readers import (
    BATCH_ROWS,
    DEFAULT_TIME_FIELD,
    DEFAULT_TYPE_FIELD,
    ReadOptions,
    detect_format,
    read_events,
)

#: Called after every batch read with the input being read and the number of events read so far (all inputs).
Progress = Callable[[Path, int], None]


@dataclass(frozen=True)
class IngestOptions:
    """How to read the inputs: ``fmt`` (``auto`` = by extension), field names, text ts origin (seconds)."""

    fmt: str = "auto"
    type_field: str = DEFAULT_TYPE_FIELD
    time_field: str = DEFAULT_TIME_FIELD
    text_origin: int = 0
    batch_rows: int = BATCH_ROWS


def read_inputs(paths: Sequence[str | Path], options: IngestOptions | None = None,
                progress: Progress | None = None) -> pa.Table:
    """All events of ``paths`` concatenated in input order, without ``seq`` (not yet ordered by ts).

    Text inputs continue one another's positions: the second text input's first token follows the first
    input's last, so that a corpus split over files reads as one text.
    """
    options = options or IngestOptions()
    tables: list[pa.Table] = []
    text_position = options.text_origin
    events = 0
    for path in paths:
        fmt = detect_format(path) if options.fmt == "auto" else options.fmt
        read = ReadOptions(type_field=options.type_field, time_field=options.time_field,
                           text_origin=text_position, batch_rows=options.batch_rows)
        for batch in read_events(path, fmt, read):
            tables.append(batch)
            events += batch.num_rows
            if progress is not None:
                progress(Path(path), events)
            if fmt == "text":
                text_position += batch.num_rows
    return concat_batches(tables).combine_chunks()


def order_by_time(table: pa.Table) -> pa.Table:
    """``table`` stably sorted by ``ts`` (equal ts keep their order); unchanged when already in order."""
    ts = table.column(TS).combine_chunks().view(pa.int64()) if table.num_rows else None
    if ts is None or _is_sorted(ts):
        return table
    order = pc.sort_indices(ts)  # documented as a stable sort
    return table.take(order)


def _is_sorted(ts: pa.Array) -> bool:
    values = ts.to_numpy(zero_copy_only=False)
    return bool(np.all(values[1:] >= values[:-1]))


def with_seq(table: pa.Table, first_seq: int = 0) -> pa.Table:
    """``table`` (in stream order) with ``seq`` = ``first_seq, first_seq + 1, …`` as its first column."""
    seq = pa.array(np.arange(first_seq, first_seq + table.num_rows, dtype=np.int64), SEQ_TYPE)
    if SEQ in table.column_names:
        table = table.drop_columns([SEQ])
    return table.add_column(0, pa.field(SEQ, SEQ_TYPE, nullable=False), seq)


def ingest(paths: Sequence[str | Path], options: IngestOptions | None = None, *,
           first_seq: int = 0, progress: Progress | None = None) -> pa.Table:
    """Read ``paths``, order by ts (stable), assign ``seq`` from ``first_seq``: the stream, ready to store."""
    return with_seq(order_by_time(read_inputs(paths, options, progress)), first_seq)


def ingest_tables(tables: Iterable[pa.Table], *, first_seq: int = 0) -> pa.Table:
    """The same ordering and numbering for tables already read (e.g. an API batch)."""
    return with_seq(order_by_time(concat_batches(tables).combine_chunks()), first_seq)
