"""``seqsketch export``: a dataset's stored events back out, in seq order, with every attribute.

Formats, each read back by the project's own readers as the same events (same seq, ts, type, attrs):

* ``parquet`` — the store's own schema (``seq``, ``ts`` UTC µs, ``type``, the ``attrs`` struct); the
  Parquet reader unpacks ``attrs`` and reassigns ``seq`` in the same order: an exact round trip, types too.
* ``jsonl`` — one ``{"seq", "ts", "type", "attrs"}`` object per line, ``ts`` as ISO-8601 with microseconds
  and ``+00:00``, ``attrs`` holding the non-null attributes with their JSON types.
* ``csv`` — ``seq, ts, type`` and one column per attribute (empty = null).  CSV has no types: the reader
  infers each column's type over the whole file, so a string attribute made only of digits reads back as a
  number.  Use parquet or jsonl for a typed round trip.

The events are streamed part by part (memory stays at one row group) into a temporary file beside the
output, which replaces the output only when every event is written: a failed export leaves nothing behind.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from exact.errors import InputError
from exact.events import ATTRS, SEQ, TS, TYPE, iso_of_micros, micros
from exact.store import EventStore, check_dataset_name, dataset_dir, store_dir

EXPORT_FORMATS = ("parquet", "jsonl", "csv")


class ExportSummary(TypedDict):
    """What an export wrote: ``events`` of ``dataset`` in ``format`` to ``out`` (None: standard output),
    ``bytes`` long (None on standard output)."""

    dataset: str
    events: int
    format: str
    out: str | None
    bytes: int | None


def export_dataset(home: Path, name: str, *, fmt: str = "jsonl", out: str | Path | None = None,
                   between: tuple[int, int] | None = None) -> ExportSummary:
    """Write dataset ``name``'s events (those with ``between[0] <= ts <= between[1]``, UTC µs, when given)
    to ``out`` (``None``: standard output, not for parquet).  Returns ``{events, format, out, bytes}``."""
    if fmt not in EXPORT_FORMATS:
        raise InputError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}",
                         where="--format")
    if out is None and fmt == "parquet":
        raise InputError("parquet is binary: give --out PATH", where="--out")
    if between is not None and between[0] > between[1]:
        raise InputError("the start of --between lies after its end", where="--between")
    store = EventStore.open(store_dir(dataset_dir(check_dataset_name(name), home)))
    snap = store.snapshot()
    schema = snap.schema()
    batches = (b for b in (_within(b, between) for b in store.read(snapshot=snap)) if b.num_rows)
    with _target(out, binary=fmt == "parquet") as sink:
        if fmt == "parquet":
            events = _write_parquet(batches, schema, sink)
        elif fmt == "jsonl":
            events = _write_jsonl(batches, sink)
        else:
            events = _write_csv(batches, schema, sink)
    size = Path(out).stat().st_size if out is not None else None
    return {"dataset": name, "events": events, "format": fmt, "out": None if out is None else str(out),
            "bytes": size}


def _within(batch: pa.RecordBatch, between: tuple[int, int] | None) -> pa.RecordBatch:
    if between is None:
        return batch
    ts = micros(batch.column(TS))
    lo, hi = np.searchsorted(ts, between[0], "left"), np.searchsorted(ts, between[1], "right")
    return batch.slice(int(lo), max(int(hi - lo), 0))


@contextmanager
def _target(out: str | Path | None, *, binary: bool) -> Iterator[IO[Any]]:
    """The file to write: a temporary one beside ``out``, renamed onto it only on success, or stdout."""
    if out is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(out)
    if path.is_dir():
        raise InputError("the output path is a directory", where=f"--out {out}")
    tmp = path.with_name(f".{path.name}.part-{os.getpid()}")
    try:
        with open(tmp, "wb" if binary else "w", newline="" if not binary else None,
                  encoding=None if binary else "utf-8") as f:
            yield f
        os.replace(tmp, path)
    except FileNotFoundError:
        raise InputError("the output's directory does not exist", where=f"--out {out}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _write_parquet(batches: Iterator[pa.RecordBatch], schema: pa.Schema, sink: IO[bytes]) -> int:
    events = 0
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for batch in batches:
            writer.write_batch(batch.cast(schema) if batch.schema != schema else batch)
            events += batch.num_rows
    return events


def _rows(batch: pa.RecordBatch) -> Iterator[tuple[int, str, str, dict[str, Any] | None]]:
    """``(seq, ts text, type, attrs or None)`` per event of ``batch``."""
    seqs = batch.column(SEQ).to_pylist()
    ts = micros(batch.column(TS)).tolist()
    types = batch.column(TYPE).to_pylist()
    attrs = batch.column(ATTRS).to_pylist() if ATTRS in batch.schema.names else [None] * batch.num_rows
    for s, t, typ, a in zip(seqs, ts, types, attrs, strict=True):
        yield s, iso_of_micros(t), typ, a


def _write_jsonl(batches: Iterator[pa.RecordBatch], sink: IO[str]) -> int:
    events = 0
    for batch in batches:
        buf = io.StringIO()
        for seq, ts, typ, attrs in _rows(batch):
            kept = {k: v for k, v in (attrs or {}).items() if v is not None}
            buf.write(json.dumps({"seq": seq, "ts": ts, "type": typ, "attrs": kept}, ensure_ascii=False,
                                 allow_nan=False))
            buf.write("\n")
        sink.write(buf.getvalue())
        events += batch.num_rows
    return events


def _write_csv(batches: Iterator[pa.RecordBatch], schema: pa.Schema, sink: IO[str]) -> int:
    names = [f.name for f in schema.field(ATTRS).type] if ATTRS in schema.names else []
    clash = sorted({SEQ, TS, TYPE} & set(names))
    if clash:
        raise InputError(f"attribute(s) {', '.join(clash)} share a name with a CSV column of the event "
                         "itself; export as jsonl or parquet", where="--format csv")
    writer = csv.writer(sink, lineterminator="\n")
    writer.writerow([SEQ, TS, TYPE, *names])
    events = 0
    for batch in batches:
        for seq, ts, typ, attrs in _rows(batch):
            values = attrs or {}
            writer.writerow([seq, ts, typ, *(_csv_cell(values.get(n)) for n in names)])
        events += batch.num_rows
    return events


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value
