"""Reading inputs on Spark so that the events are exactly those of the local readers.

Why not Spark's CSV/JSON/XML sources straight away: each of them decides types and timestamps by its own
rules (CSV inference over a sample, JSON's struct inference, the XML source's value guessing, timestamp
patterns), while docs/contract.md §1 and :mod:`exact.readers` fix one set of rules — per-file CSV inference over
every value, JSON values keeping their JSON type, XES typed by element, naive time as UTC, numbers as epoch
seconds — and error messages that name the file and line.  Normalising four foreign parsers back to those
rules would duplicate them a second time, imperfectly.  Instead the tasks run the project's own readers
inside ``mapInArrow``: the events are equal by construction, and a bad record fails with the reader's own
message.

A large CSV, JSON Lines or Parquet input is read by several tasks, one per *piece*
(:func:`exact.readers.splits.plan_splits`: byte ranges cut at confirmed record starts, runs of row groups);
gzip-compressed, XES and text inputs are one task each.  :func:`stage_inputs` — ``DataFrame → DataFrame``,
one task per piece — reads its piece and *stages* it in chunks of at most :data:`CHUNK_ROWS` events: each
chunk is stably sorted by time and written as one Arrow IPC file (one record batch, so a window task maps
it and slices it in place), and answers one summary row: its rows, its attribute types as read (``null``
for a column none of its values filled, so that the driver widens them exactly as
:func:`exact.events.concat_batches` widens a local read's batches), its time range, and a sample of its
times for the windows' boundaries (:mod:`sketch.spark.sample_sort`).  Each piece also answers one row of what it
found (where its records began and ended, a CSV piece's column kinds) or of its error.

:func:`collect_staged` turns the rows into the chunks in input order.  A piece that failed, pieces that do
not agree on their cuts, or a pieced input without events, send that input back to be read whole by one
task (:func:`stage_inputs` again, with :func:`whole_pieces`); then the first input's error in the order
given, if any, is the build's error — the local reader's own message.

Timestamps travel as ``int64`` UTC microseconds, so no session time zone can touch them.  Text inputs
continue one another's positions: each is read from origin 0 and shifted later by the tokens of the text
inputs before it (:func:`text_offsets`).  The staging directory must be visible to every executor (it is on
local masters; on a cluster put ``SEQSKETCH_HOME`` on a shared file system, as the event store's parts are
written from the tasks too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from exact import errors
from exact.errors import InputError, SeqsketchError
from exact.events import TS, attr_types, conform, unify_attr_types, widen
from exact.ingest import IngestOptions
from exact.readers import FORMATS, ReadOptions, detect_format
from exact.readers.sources import is_remote, source_exists, source_size
from exact.readers.splits import (
    DEFAULT_SPLIT_BYTES,
    PieceFacts,
    Split,
    csv_column_types,
    pieces_agree,
    plan_splits,
    read_piece,
)
from exact.readers.tabular import TextKinds

#: Events per staged chunk at most: what one reading task holds (and sorts) at once.
CHUNK_ROWS = 1 << 19
#: Times sampled per staged chunk (evenly by rank), for the windows' boundaries.
SAMPLES_PER_CHUNK = 256

#: Name of the ``null`` attribute type in staging summaries (a column no value of a chunk filled).
NULL_TYPE = "null"
_TYPE_NAMES = {pa.int64(): "int64", pa.float64(): "double", pa.bool_(): "bool", pa.string(): "string",
               pa.null(): NULL_TYPE}
_TYPES_BY_NAME = {v: k for k, v in _TYPE_NAMES.items()}

#: One row per staged chunk (``chunk`` ≥ 0), and one per piece (``chunk`` = -1: what it found, or its error).
STAGE_SCHEMA = ("piece INT, chunk INT, path STRING, rows BIGINT, attrs STRING, min_ts BIGINT, max_ts BIGINT, "
                "samples BINARY, step BIGINT, first_record BIGINT, next_record BIGINT, kinds STRING, "
                "error STRING, seconds DOUBLE")
_STAGE_ARROW = pa.schema([("piece", pa.int32()), ("chunk", pa.int32()), ("path", pa.string()),
                          ("rows", pa.int64()), ("attrs", pa.string()), ("min_ts", pa.int64()),
                          ("max_ts", pa.int64()), ("samples", pa.binary()), ("step", pa.int64()),
                          ("first_record", pa.int64()), ("next_record", pa.int64()), ("kinds", pa.string()),
                          ("error", pa.string()), ("seconds", pa.float64())])


@dataclass(frozen=True)
class InputFile:
    """One input as given: its index in the order given, its path and its (detected) format."""

    index: int
    path: str
    fmt: str


@dataclass(frozen=True)
class Piece:
    """One reading task's share: a piece of input ``file``."""

    file: int
    split: Split


@dataclass(frozen=True)
class StagedChunk:
    """One staged chunk of one input piece: ``rows`` events sorted by time (stably), in ``path``.

    ``attrs`` are its attribute types as read; a CSV input read in pieces holds its attribute values as text
    in the chunk, and ``text_types`` names the type each takes (decided over the whole file).  ``samples``
    are the chunk's times at rows ``0, step, 2·step, …``.  Times are as read: a text input's are shifted
    by :func:`text_offsets` later.
    """

    file: int
    piece: int
    chunk: int
    path: str
    rows: int
    attrs: tuple[tuple[str, str], ...]
    min_ts: int
    max_ts: int
    samples: bytes = b""
    step: int = 1
    text_types: tuple[tuple[str, str], ...] = ()

    def sample_ts(self) -> np.ndarray:
        return np.frombuffer(self.samples, dtype="<i8")


def plan_inputs(paths: Sequence[str | Path], options: IngestOptions) -> list[InputFile]:
    """The inputs with their formats, checked in the driver before any task starts (missing file, unknown
    format or extension → :class:`InputError` naming the input)."""
    if not paths:
        raise InputError("no input files given", where="inputs")
    if options.fmt != "auto" and options.fmt not in FORMATS:
        raise InputError(f"unknown format {options.fmt!r}; expected one of auto, {', '.join(FORMATS)}",
                         where="--format")
    files = []
    for i, raw in enumerate(paths):
        path = str(raw) if is_remote(raw) else str(Path(raw).absolute())  # (tasks read objects by ranges)
        if not source_exists(path):
            raise InputError("no such file", where=str(raw))
        fmt = detect_format(path) if options.fmt == "auto" else options.fmt
        files.append(InputFile(i, path, fmt))
    return files


def plan_pieces(files: Sequence[InputFile], split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Piece]:
    """Every input's pieces, in input order."""
    return [Piece(f.index, s) for f in files for s in plan_splits(f.path, f.fmt, split_bytes)]


def whole_pieces(files: Sequence[InputFile]) -> list[Piece]:
    """Each of ``files`` as one piece (read whole)."""
    return [Piece(f.index, Split(f.path, f.fmt)) for f in files]


# ------------------------------------------------------------------------------------------- staging


def stage_inputs(spark: Any, pieces: Sequence[Piece], options: IngestOptions, staging: Path, *,
                 chunk_rows: int = CHUNK_ROWS, tasks: int | None = None) -> Any:
    """A DataFrame (:data:`STAGE_SCHEMA`) of the staged chunks of every piece.

    The pieces are shared among ``tasks`` tasks (default: two per core, at most one per piece) by size, the
    largest first onto the least loaded task: a task costs Spark about a tenth of a second to run, so many
    small inputs should not each take one."""
    read = ReadOptions(type_field=options.type_field, time_field=options.time_field, text_origin=0,
                       batch_rows=options.batch_rows)
    staging.mkdir(parents=True, exist_ok=True)
    count = tasks or 2 * spark.sparkContext.defaultParallelism
    groups = balanced_groups([piece_bytes(p) for p in pieces], max(1, min(count, len(pieces))))
    task = _StageTask(tuple(pieces), read, str(staging), chunk_rows, groups)
    return spark.range(0, len(groups), 1, numPartitions=len(groups)).mapInArrow(task, STAGE_SCHEMA)


def piece_bytes(piece: Piece) -> int:
    """About how many bytes a piece reads (its share of the file's size)."""
    try:
        size = source_size(piece.split.path)
    except (OSError, SeqsketchError):
        return 0
    if piece.split.whole:
        return size
    if piece.split.fmt == "parquet":
        return size // piece.split.pieces
    return piece.split.end - piece.split.start


def balanced_groups(sizes: Sequence[int], count: int) -> tuple[tuple[int, ...], ...]:
    """``count`` groups of the indexes of ``sizes``: the largest first onto the lightest group (each group's
    indexes in increasing order); no group empty while there are at least ``count`` sizes."""
    loads = [0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        g = min(range(count), key=lambda g: (loads[g], len(members[g])))
        loads[g] += sizes[i]
        members[g].append(i)
    return tuple(tuple(sorted(m)) for m in members if m)


@dataclass(frozen=True)
class _StageTask:
    """The body of a staging task (a picklable value: Spark ships it to the executors)."""

    pieces: tuple[Piece, ...]
    read: ReadOptions
    staging: str
    chunk_rows: int
    groups: tuple[tuple[int, ...], ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for group in batch.column(0).to_pylist():
                for index in self.groups[group]:
                    yield from self.stage(index)

    def stage(self, index: int) -> Iterator[pa.RecordBatch]:
        """Stage one piece in chunks; each row carries the seconds spent reading and staging its chunk (the
        time the consumer holds the generator between chunks is not counted)."""
        piece = self.pieces[index]
        facts = PieceFacts()
        chunk, pending, rows = 0, [], 0
        clock = time.perf_counter()
        try:
            for table in read_piece(piece.split, self.read, facts):
                if table.num_rows == 0:
                    continue
                pending.append(table)
                rows += table.num_rows
                if rows >= self.chunk_rows:
                    yield self.write_chunk(index, chunk, pending, clock)
                    chunk, pending, rows = chunk + 1, [], 0
                    clock = time.perf_counter()
            if pending:
                yield self.write_chunk(index, chunk, pending, clock)
            kinds = json.dumps({n: k.to_json() for n, k in facts.kinds.items()})
            yield _stage_row(index, -1, first_record=facts.first_record, next_record=facts.next_record,
                             kinds=kinds)
        except SeqsketchError as err:
            yield _stage_row(index, -1, error=error_to_json(err))
        except Exception as err:  # an unreadable input must name itself, whatever failed inside the reader
            yield _stage_row(index, -1, error=error_to_json(
                InputError(f"cannot read: {type(err).__name__}: {err}", where=piece.split.path)))

    def write_chunk(self, index: int, chunk: int, tables: list[pa.Table], clock: float) -> pa.RecordBatch:
        table, types = stack_tables(tables)
        ts = table.column(TS).combine_chunks().view(pa.int64()).to_numpy(zero_copy_only=False)
        if len(ts) > 1 and not bool((ts[1:] >= ts[:-1]).all()):
            order = np.argsort(ts, kind="stable")  # ties keep their input order
            table, ts = table.take(order), ts[order]
        path = Path(self.staging) / f"piece-{index:06d}-{chunk:06d}.arrow"
        with ipc.new_file(str(path), table.schema) as writer:  # one record batch: mapped and sliced in place
            writer.write_batch(table.combine_chunks().to_batches()[0])
        step = max(1, len(ts) // SAMPLES_PER_CHUNK)
        samples = np.ascontiguousarray(ts[::step]).astype("<i8").tobytes()
        return _stage_row(index, chunk, path=str(path), rows=table.num_rows,
                          attrs=json.dumps([(n, _TYPE_NAMES[t]) for n, t in types.items()]),
                          min_ts=int(ts[0]), max_ts=int(ts[-1]), samples=samples, step=step,
                          seconds=time.perf_counter() - clock)


def stack_tables(tables: Sequence[pa.Table]) -> tuple[pa.Table, dict[str, pa.DataType]]:
    """Reader batches as one table, and the attribute types as read: widened across the batches but with
    ``null`` kept for a column no batch filled (such a column is left out of the table)."""
    folded: dict[str, pa.DataType] = {}
    for t in tables:
        for name, typ in attr_types(t.schema).items():
            folded[name] = widen(folded[name], typ) if name in folded else typ
    present = {n: t for n, t in folded.items() if not pa.types.is_null(t)}
    table = tables[0] if len(tables) == 1 else pa.concat_tables([conform(t, present) for t in tables])
    return conform(table, present), folded


def _stage_row(piece: int, chunk: int, *, path: str = "", rows: int = 0, attrs: str = "[]", min_ts: int = 0,
               max_ts: int = 0, samples: bytes = b"", step: int = 1, first_record: int = 0,
               next_record: int = 0, kinds: str = "{}", error: str | None = None,
               seconds: float = 0.0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"piece": [piece], "chunk": [chunk], "path": [path], "rows": [rows], "attrs": [attrs],
         "min_ts": [min_ts], "max_ts": [max_ts], "samples": [samples], "step": [step],
         "first_record": [first_record], "next_record": [next_record], "kinds": [kinds], "error": [error],
         "seconds": [seconds]}, schema=_STAGE_ARROW)


def error_to_json(err: SeqsketchError) -> str:
    """A user error raised in a task, as text the driver turns back into the same error."""
    return json.dumps({"class": type(err).__name__, "message": err.message, "where": err.where,
                       "line": err.line, "column": err.column})


def error_from_json(text: str) -> SeqsketchError:
    data = json.loads(text)
    cls = getattr(errors, data.get("class", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, SeqsketchError)):
        cls = SeqsketchError
    return cls(data["message"], where=data.get("where"), line=data.get("line"), column=data.get("column"))


# --------------------------------------------------------------------------------------- collecting


@dataclass(frozen=True)
class Staged:
    """What the staging rows say: the chunks (input order), the inputs to read again whole, the inputs'
    errors (by input index) and the seconds the tasks spent reading."""

    chunks: tuple[StagedChunk, ...]
    reread: tuple[int, ...]
    errors: Mapping[int, str]
    seconds: float


def collect_staged(rows: Sequence[Mapping[str, Any]], pieces: Sequence[Piece]) -> Staged:
    """Sort the staging rows out per input (see the module docstring): an input read whole keeps its
    chunks or its error; an input read in pieces keeps its chunks only if no piece failed, the pieces agree
    and it has events — else it is to be read again whole."""
    by_file: dict[int, list[int]] = {}
    for i, p in enumerate(pieces):
        by_file.setdefault(p.file, []).append(i)
    piece_rows = {r["piece"]: r for r in rows if r["chunk"] < 0}
    chunk_rows: dict[int, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["chunk"] >= 0:
            chunk_rows.setdefault(r["piece"], []).append(r)
    chunks: list[StagedChunk] = []
    reread: list[int] = []
    failed: dict[int, str] = {}
    for file, indexes in sorted(by_file.items()):
        summaries = [piece_rows.get(i) for i in indexes]
        errors_found = [s["error"] if s else _lost(pieces[i]) for i, s in zip(indexes, summaries, strict=True)
                        if not s or s["error"]]
        mine = [(i, r) for i in indexes for r in sorted(chunk_rows.get(i, ()), key=lambda r: r["chunk"])]
        if len(indexes) == 1:
            if errors_found:
                failed[file] = errors_found[0]
                continue
        else:
            facts = [PieceFacts(s["first_record"], s["next_record"],
                                {n: TextKinds.from_json(k) for n, k in json.loads(s["kinds"]).items()})
                     for s in summaries if s]
            if errors_found or not pieces_agree(facts) or not sum(r["rows"] for _, r in mine):
                reread.append(file)
                continue
        text_types: tuple[tuple[str, str], ...] = ()
        if len(indexes) > 1 and pieces[indexes[0]].split.fmt == "csv":
            decided = csv_column_types(facts)
            text_types = tuple((n, _TYPE_NAMES[t]) for n, t in decided.items())
        for i, r in mine:
            attrs = tuple((n, t) for n, t in json.loads(r["attrs"]))
            if text_types:
                attrs = tuple((n, dict(text_types).get(n, t)) for n, t in attrs)
            chunks.append(StagedChunk(file=file, piece=pieces[i].split.piece, chunk=r["chunk"],
                                      path=r["path"], rows=r["rows"], attrs=attrs, min_ts=r["min_ts"],
                                      max_ts=r["max_ts"], samples=r["samples"], step=r["step"],
                                      text_types=text_types))
    seconds = sum(r["seconds"] or 0.0 for r in rows)
    return Staged(tuple(chunks), tuple(reread), failed, seconds)


def _lost(piece: Piece) -> str:
    return error_to_json(SeqsketchError("a reading task answered nothing", where=piece.split.path))


def merge_staged(first: Staged, again: Staged) -> Staged:
    """``first`` with the inputs it sent back replaced by ``again``'s (their whole reads)."""
    chunks = sorted(first.chunks + again.chunks, key=lambda c: (c.file, c.piece, c.chunk))
    return Staged(tuple(chunks), (), {**first.errors, **again.errors}, first.seconds + again.seconds)


def raise_first_error(staged: Staged) -> None:
    """The first input's error in the order the inputs were given (so the message does not depend on
    which task finished first)."""
    if staged.errors:
        raise error_from_json(staged.errors[min(staged.errors)])


def unified_attrs(chunks: Sequence[StagedChunk]) -> dict[str, pa.DataType]:
    """The stream's attribute types: every chunk's types widened in input order (names in first-seen order),
    ``null`` kept until the end and then made ``string`` — as :func:`exact.events.concat_batches` does."""
    folded: dict[str, pa.DataType] = {}
    for chunk in chunks:
        for name, typ_name in chunk.attrs:
            typ = _TYPES_BY_NAME[typ_name]
            folded[name] = widen(folded[name], typ) if name in folded else typ
    return unify_attr_types(folded)


def text_offsets(files: Sequence[InputFile], chunks: Sequence[StagedChunk]) -> dict[int, int]:
    """Seconds to add to each text input's positions: the tokens of the text inputs given before it."""
    tokens: dict[int, int] = {}
    for chunk in chunks:
        tokens[chunk.file] = tokens.get(chunk.file, 0) + chunk.rows
    offsets, total = {}, 0
    for f in files:
        if f.fmt == "text":
            offsets[f.index] = total
            total += tokens.get(f.index, 0)
    return offsets


def shifted(chunks: Sequence[StagedChunk], files: Sequence[InputFile]) -> list[tuple[StagedChunk, int]]:
    """Each chunk with the microseconds its times are shifted by (text inputs; 0 for the others)."""
    offsets = text_offsets(files, chunks)
    return [(c, offsets.get(c.file, 0) * 1_000_000) for c in chunks]


def types_of(names: Sequence[Sequence[str]]) -> dict[str, pa.DataType]:
    """Attribute types from ``(name, type name)`` pairs (as chunks and tasks carry them)."""
    return {name: _TYPES_BY_NAME[typ] for name, typ in names}


def type_names(types: Mapping[str, pa.DataType]) -> tuple[tuple[str, str], ...]:
    return tuple((name, _TYPE_NAMES[typ]) for name, typ in types.items())


__all__ = ["CHUNK_ROWS", "InputFile", "Piece", "StagedChunk", "Staged", "collect_staged", "error_from_json",
           "error_to_json", "merge_staged", "plan_inputs", "plan_pieces", "raise_first_error",
           "shifted", "stage_inputs", "text_offsets", "type_names", "types_of", "unified_attrs",
           "whole_pieces"]
