"""One input read in pieces by several tasks, with the events of reading it whole.

A large CSV, JSON Lines or Parquet file is cut into *pieces* (:func:`plan_splits`), each read on its own
(:func:`read_piece`) with the same per-record code as the whole-file readers of :mod:`exact.readers.tabular`:

``parquet``
    Runs of consecutive row groups, about ``target_bytes`` (uncompressed) each.  Column types come from the
    file's schema, so a piece's events are the whole file's, row for row.
``jsonl``
    Byte ranges.  A piece's records are the lines that *start* inside its range: it begins at the first line
    start at or after its offset (just after a ``\\n``) and reads on to the line that starts at or after its
    end.  A JSON record never spans lines (a raw newline inside a JSON string is not JSON), so every cut is
    safe.
``csv``
    Byte ranges, cut only where the CSV parser confirms a record starts.  A piece guesses its first record
    at the first line start at or after its offset; its predecessor, whose parser started at a confirmed
    record start (the first piece starts after the header, parsed from the file's first byte), reports where
    the first record at or after the cut really starts (:attr:`PieceFacts.next_record`).  The pieces are
    taken only if every guess equals its predecessor's finding (:func:`pieces_agree`): a quoted field with a
    newline that straddles a cut makes them differ.  Values are typed per column over the whole file, as
    whole-file reading does: each piece yields its values as text with the :class:`TextKinds` they fit, and
    the file's column type is decided from all pieces' kinds together (:func:`csv_column_types`,
    :func:`exact.readers.tabular.cast_text_column`).

Whatever a piece cannot read the way whole-file reading would — pieces that disagree, a piece that fails
(a malformed record, a line ending only ``\\r``, bytes that are not UTF-8), an input with no events — is
settled the same way: the caller reads that input again whole, in one task, and its outcome (the events, or
the reader's own error naming the file and line) stands.  XES, text and gzip-compressed inputs are always
one piece: a compressed stream cannot be entered in the middle, and an XES trace's events share the trace's
attributes.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from exact.errors import InputError
from exact.events import make_table
from exact.readers import read_events
from exact.readers.common import Columns, ReadOptions
from exact.readers.sources import open_source, parquet_source, source_size
from exact.readers.tabular import (
    TextKinds,
    csv_batches,
    csv_columns,
    json_event,
    json_record,
    parquet_table,
    text_column_type,
    text_kinds,
)

#: Bytes of input per piece by default (uncompressed bytes of row groups for Parquet).
DEFAULT_SPLIT_BYTES = 64 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_SCAN = 1 << 16


@dataclass(frozen=True)
class Split:
    """A piece of one input: ``piece`` of ``pieces``; ``start``/``end`` are byte offsets (CSV, JSON Lines)
    or row group numbers (Parquet); ``first_record`` is the 1-based record number of a Parquet piece's
    first row."""

    path: str
    fmt: str
    piece: int = 0
    pieces: int = 1
    start: int = 0
    end: int = 0
    first_record: int = 1

    @property
    def whole(self) -> bool:
        return self.pieces == 1


@dataclass
class PieceFacts:
    """What reading a piece found besides its events (filled in as it reads)."""

    first_record: int = 0  # byte offset where its first record starts (CSV, JSON Lines)
    next_record: int = 0  # byte offset of the first record at or after its end, as its parser found it
    kinds: dict[str, TextKinds] = field(default_factory=dict)  # CSV: what each column's values fit


def plan_splits(path: str | Path, fmt: str, target_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Split]:
    """The pieces ``path`` is read in: one unless it is a large uncompressed CSV or JSON Lines file or a
    Parquet file with several large row groups."""
    path = str(path)
    target = max(1, target_bytes)
    if fmt in ("csv", "jsonl"):
        size = source_size(path)
        with open_source(path) as f:
            compressed = f.read(2) == _GZIP_MAGIC
        if compressed or size <= target:
            return [Split(path, fmt)]
        n = math.ceil(size / target)
        cuts = [size * k // n for k in range(n + 1)]
        return [Split(path, fmt, k, n, cuts[k], cuts[k + 1]) for k in range(n)]
    if fmt == "parquet":
        try:
            meta = pq.ParquetFile(parquet_source(path)).metadata
        except Exception:  # an unreadable file is read whole, and its reader names the problem
            return [Split(path, fmt)]
        runs: list[tuple[int, int, int]] = []  # (first group, end group, first record)
        start, size, record, first = 0, 0, 1, 1
        for g in range(meta.num_row_groups):
            size += meta.row_group(g).total_byte_size
            record += meta.row_group(g).num_rows
            if size >= target and g + 1 < meta.num_row_groups:
                runs.append((start, g + 1, first))
                start, size, first = g + 1, 0, record
        if not runs:
            return [Split(path, fmt)]
        runs.append((start, meta.num_row_groups, first))
        return [Split(path, fmt, k, len(runs), a, b, r) for k, (a, b, r) in enumerate(runs)]
    return [Split(path, fmt)]


def read_piece(split: Split, options: ReadOptions, facts: PieceFacts) -> Iterator[pa.Table]:
    """The events of one piece as stream tables without ``seq`` (a CSV piece's attributes as text: see
    the module docstring); a whole input is read by its format's reader."""
    if split.whole:
        yield from read_events(split.path, split.fmt, options)
    elif split.fmt == "csv":
        yield from _csv_piece(split, options, facts)
    elif split.fmt == "jsonl":
        yield from _jsonl_piece(split, options, facts)
    elif split.fmt == "parquet":
        yield from _parquet_piece(split, options)
    else:
        raise ValueError(f"format {split.fmt} is not read in pieces")


def pieces_agree(facts: Sequence[PieceFacts]) -> bool:
    """Whether each piece began where its predecessor's parser found the next record (see the module
    docstring): only then are the pieces' records exactly the file's."""
    return all(b.first_record == a.next_record for a, b in zip(facts, facts[1:], strict=False))


def csv_column_types(facts: Sequence[PieceFacts]) -> dict[str, pa.DataType]:
    """The type of each CSV attribute column of a file from its pieces' kinds (null: no value anywhere)."""
    combined: dict[str, TextKinds] = {}
    for piece in facts:
        for name, kinds in piece.kinds.items():
            combined[name] = combined[name].both(kinds) if name in combined else kinds
    return {name: text_column_type(kinds) for name, kinds in combined.items()}


# ------------------------------------------------------------------------------------------------- lines


class _Lines:
    """The lines of a binary file from ``offset`` on, split at ``\\n`` and decoded as UTF-8 (a byte order
    mark dropped at the file's start), with the offset of the next unread byte."""

    def __init__(self, raw: IO[bytes], offset: int) -> None:
        raw.seek(offset)
        self.raw = raw
        self.offset = offset

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        data = self.raw.readline()
        if not data:
            raise StopIteration
        at = self.offset
        self.offset += len(data)
        return data.decode("utf-8-sig" if at == 0 else "utf-8")


def line_start(raw: IO[bytes], offset: int) -> int:
    """The first line start at or after ``offset``: ``offset`` itself if it is 0 or follows a ``\\n``,
    else just after the next ``\\n`` (the file's size if there is none)."""
    if offset <= 0:
        return 0
    raw.seek(offset - 1)
    at = offset - 1
    while block := raw.read(_SCAN):
        found = block.find(b"\n")
        if found >= 0:
            return at + found + 1
        at += len(block)
    return at


class _BoundedRows:
    """CSV rows of the records that start before ``end`` (None: to the end of the file); afterwards
    ``stopped_at`` is the offset of the first record not read (its parser's finding)."""

    def __init__(self, lines: _Lines, end: int | None) -> None:
        self.lines = lines
        self.reader = csv.reader(lines)
        self.end = end
        self.stopped_at = lines.offset

    @property
    def line_num(self) -> int:
        return self.reader.line_num

    def __iter__(self) -> Iterator[list[str]]:
        while self.end is None or self.lines.offset < self.end:
            # the reader takes lines only until its record is complete, so the offset is the next record's
            try:
                row = next(self.reader)
            except StopIteration:
                break
            yield row
        self.stopped_at = self.lines.offset


# ------------------------------------------------------------------------------------------------ pieces


def _csv_piece(split: Split, options: ReadOptions, facts: PieceFacts) -> Iterator[pa.Table]:
    where = split.path
    last = split.piece == split.pieces - 1
    with open_source(split.path) as raw:
        lines = _Lines(raw, 0)
        header = next(csv.reader(lines), None)
        if header is None or not any(h.strip() for h in header):
            raise InputError("empty file: no header row", where=where)
        header, ti, si, attr_idx = csv_columns(header, options, where)
        start = lines.offset if split.piece == 0 else line_start(raw, max(split.start, lines.offset))
        facts.first_record = start
        rows = _BoundedRows(_Lines(raw, start), None if last else split.end)
        facts.kinds = {name: TextKinds(True, True, True, True) for _, name in attr_idx}
        for ts, types, cols in csv_batches(rows, header, ti, si, attr_idx, options, where):
            for name, col in cols.items():
                facts.kinds[name] = facts.kinds[name].both(text_kinds(col))
            yield make_table(ts, types, cols)
        facts.next_record = rows.stopped_at


def _jsonl_piece(split: Split, options: ReadOptions, facts: PieceFacts) -> Iterator[pa.Table]:
    where = split.path
    last = split.piece == split.pieces - 1
    with open_source(split.path) as raw:
        start = line_start(raw, split.start)
        facts.first_record = start
        lines = _Lines(raw, start)
        batch = Columns()
        while last or lines.offset < split.end:
            try:
                line = next(lines)
            except StopIteration:
                break
            if not line.strip():
                continue
            batch.add(*json_event(json_record(line, where, 0), options, where, 0))
            if len(batch) >= options.batch_rows:
                yield batch.table()
                batch = Columns()
        if len(batch):
            yield batch.table()
        facts.next_record = lines.offset


def _parquet_piece(split: Split, options: ReadOptions) -> Iterator[pa.Table]:
    where = split.path
    pf = pq.ParquetFile(parquet_source(split.path))
    names = pf.schema_arrow.names
    for role, name in (("type", options.type_field), ("time", options.time_field)):
        if name not in names:
            raise InputError(f"no {role} field {name!r} (columns: {', '.join(names)})", where=where)
    first = split.first_record
    for batch in pf.iter_batches(batch_size=options.batch_rows, row_groups=range(split.start, split.end)):
        yield parquet_table(pa.Table.from_batches([batch]), options, where, first)
        first += batch.num_rows
