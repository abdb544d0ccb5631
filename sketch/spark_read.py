"""Reading inputs on Spark so that the events are exactly those of the local readers.

Why not Spark's CSV/JSON/XML sources straight away: each of them decides types and timestamps by its own
rules (CSV inference over a sample, JSON's struct inference, the XML source's value guessing, timestamp
patterns), while CONTRACT §1 and :mod:`exact.readers` fix one set of rules — per-file CSV inference over
every value, JSON values keeping their JSON type, XES typed by element, naive time as UTC, numbers as epoch
seconds — and error messages that name the file and line.  Normalising four foreign parsers back to those
rules would duplicate them a second time, imperfectly.  Instead every input file is one Spark task that runs
the project's own streaming reader (:func:`exact.readers.read_events`) inside ``mapInArrow``: the events are
equal by construction, files are read in parallel, and a bad record fails with the reader's own message.

Two steps, both ``DataFrame → DataFrame``:

1. :func:`stage_inputs` — one task per input file reads it batch by batch and stages each batch as an Arrow
   IPC file, answering one summary row per batch (rows, attribute types, time range) or one error row.  A
   batch's attribute types are the reader's, untouched, so the driver can widen them exactly as
   :func:`exact.events.concat_batches` widens the batches of a local read (a ``null`` column stays ``null``
   until every batch is known).
2. :func:`staged_events` — one task per staged batch reads it back, casts its attributes to the stream's
   unified types (:func:`exact.events.conform`) and emits the events with their input order: the input's
   index in the order given (``file``) and the event's position in that input (``pos``).  Text inputs
   continue one another's positions (as :func:`exact.ingest.read_inputs` does): each is read from origin 0
   and shifted here by the tokens of the text inputs before it.

Timestamps travel through Spark as ``int64`` UTC microseconds, so no session time zone can touch them.
The staging directory must be visible to every executor (it is on local masters; on a cluster put
``SEQSKETCH_HOME`` on a shared file system, as the event store's parts are written from the tasks too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from exact import errors
from exact.errors import InputError, SeqsketchError
from exact.events import ATTRS, TS, TYPE, attr_types, conform, unify_attr_types, widen
from exact.ingest import IngestOptions
from exact.readers import FORMATS, ReadOptions, detect_format, read_events

#: Name of the ``null`` attribute type in staging summaries (a column no value of a batch filled).
NULL_TYPE = "null"
_TYPE_NAMES = {pa.int64(): "int64", pa.float64(): "double", pa.bool_(): "bool", pa.string(): "string",
               pa.null(): NULL_TYPE}
_TYPES_BY_NAME = {v: k for k, v in _TYPE_NAMES.items()}

#: One row per staged batch (or per failed input): what the driver needs to unify and order the inputs.
STAGE_SCHEMA = ("file INT, chunk INT, path STRING, rows BIGINT, attrs STRING, min_ts BIGINT, max_ts BIGINT, "
                "error STRING, seconds DOUBLE, in_order BOOLEAN")


@dataclass(frozen=True)
class InputFile:
    """One input as given: its index in the order given, its path and its (detected) format."""

    index: int
    path: str
    fmt: str


@dataclass(frozen=True)
class StagedChunk:
    """One staged batch of one input: ``rows`` events, first at ``pos`` within its input."""

    file: int
    chunk: int
    path: str
    rows: int
    pos: int
    attrs: tuple[tuple[str, str], ...]
    min_ts: int
    max_ts: int
    in_order: bool = False  # ts never decreases within the batch


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
        path = Path(raw).absolute()
        if not path.is_file():
            raise InputError("no such file", where=str(raw))
        fmt = detect_format(path) if options.fmt == "auto" else options.fmt
        files.append(InputFile(i, str(path), fmt))
    return files


# ------------------------------------------------------------------------------------------- staging


def stage_inputs(spark: Any, files: Sequence[InputFile], options: IngestOptions, staging: Path) -> Any:
    """Step 1: a DataFrame (:data:`STAGE_SCHEMA`) of the staged batches of every input, one task per input."""
    read = ReadOptions(type_field=options.type_field, time_field=options.time_field, text_origin=0,
                       batch_rows=options.batch_rows)
    task = _StageTask(tuple(files), read, str(staging))
    return spark.range(0, len(files), 1, numPartitions=len(files)).mapInArrow(task, STAGE_SCHEMA)


@dataclass(frozen=True)
class _StageTask:
    """The body of a staging task (a picklable value: Spark ships it to the executors)."""

    files: tuple[InputFile, ...]
    read: ReadOptions
    staging: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from self.stage(self.files[index])

    def stage(self, f: InputFile) -> Iterator[pa.RecordBatch]:
        """Stage one input's batches; each row carries the seconds spent reading and staging its batch (the
        time the consumer holds the generator between batches is not counted)."""
        chunk = 0
        clock = time.perf_counter()
        try:
            for table in read_events(f.path, f.fmt, self.read):
                if table.num_rows == 0:
                    continue
                path = Path(self.staging) / f"input-{f.index:06d}-{chunk:06d}.arrow"
                with ipc.new_file(str(path), table.schema) as writer:
                    writer.write_table(table)
                ts = table.column(TS).combine_chunks().view(pa.int64())
                values = ts.to_numpy(zero_copy_only=False)
                yield _stage_row(f.index, chunk, str(path), table.num_rows, _names(attr_types(table.schema)),
                                 int(values.min()), int(values.max()), None, time.perf_counter() - clock,
                                 bool((values[1:] >= values[:-1]).all()))
                chunk += 1
                clock = time.perf_counter()
        except SeqsketchError as err:
            yield _stage_row(f.index, chunk, "", 0, {}, 0, 0, error_to_json(err))
        except Exception as err:  # an unreadable input must name itself, whatever failed inside the reader
            yield _stage_row(f.index, chunk, "", 0, {}, 0, 0,
                             error_to_json(InputError(f"cannot read: {type(err).__name__}: {err}",
                                                      where=f.path)))


def _stage_row(file: int, chunk: int, path: str, rows: int, attrs: Mapping[str, str], min_ts: int,
               max_ts: int, error: str | None, seconds: float = 0.0,
               in_order: bool = False) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"file": [file], "chunk": [chunk], "path": [path], "rows": [rows],
         "attrs": [json.dumps(list(attrs.items()))], "min_ts": [min_ts], "max_ts": [max_ts],
         "error": [error], "seconds": [seconds], "in_order": [in_order]},
        schema=pa.schema([("file", pa.int32()), ("chunk", pa.int32()), ("path", pa.string()),
                          ("rows", pa.int64()), ("attrs", pa.string()), ("min_ts", pa.int64()),
                          ("max_ts", pa.int64()), ("error", pa.string()), ("seconds", pa.float64()),
                          ("in_order", pa.bool_())]))


def _names(types: Mapping[str, pa.DataType]) -> dict[str, str]:
    return {name: _TYPE_NAMES[typ] for name, typ in types.items()}


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


def collect_staged(stage_rows: Sequence[Mapping[str, Any]]) -> list[StagedChunk]:
    """The staged batches in input order with their positions, or the first input's error (in the order
    the inputs were given, so the message does not depend on which task finished first)."""
    failed = sorted((r for r in stage_rows if r["error"]), key=lambda r: r["file"])
    if failed:
        raise error_from_json(failed[0]["error"])
    chunks = []
    pos_by_file: dict[int, int] = {}
    for r in sorted(stage_rows, key=lambda r: (r["file"], r["chunk"])):
        pos = pos_by_file.get(r["file"], 0)
        chunks.append(StagedChunk(file=r["file"], chunk=r["chunk"], path=r["path"], rows=r["rows"], pos=pos,
                                  attrs=tuple((n, t) for n, t in json.loads(r["attrs"])),
                                  min_ts=r["min_ts"], max_ts=r["max_ts"], in_order=bool(r.get("in_order"))))
        pos_by_file[r["file"]] = pos + r["rows"]
    return chunks


def unified_attrs(chunks: Sequence[StagedChunk]) -> dict[str, pa.DataType]:
    """The stream's attribute types: every batch's types widened in input order (names in first-seen order),
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


# --------------------------------------------------------------------------------------- staged events


def spark_attrs_ddl(attrs: Mapping[str, pa.DataType]) -> str:
    """The Spark DDL of the ``attrs`` struct (empty when there are no attributes)."""
    names = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.string(): "STRING"}
    fields = ", ".join(f"`{name.replace('`', '``')}`: {names[typ]}" for name, typ in attrs.items())
    return f"attrs STRUCT<{fields}>" if attrs else ""


def events_ddl(attrs: Mapping[str, pa.DataType], *, with_order: bool) -> str:
    """DDL of an events DataFrame: input order (``file``, ``pos``) or ``seq``, then ts (µs), type, attrs."""
    head = "file INT, pos BIGINT" if with_order else "seq BIGINT"
    tail = spark_attrs_ddl(attrs)
    return f"{head}, ts BIGINT, type STRING" + (f", {tail}" if tail else "")


def already_in_order(files: Sequence[InputFile], chunks: Sequence[StagedChunk]) -> bool:
    """Whether input order is already stream order: every batch's ts never decreases and each batch starts
    no earlier than the previous one (in input order) ends.  Then the stable sort by ts is the identity and
    ``seq`` is simply the position in input order (:func:`staged_events` with ``first_seq``)."""
    offsets = text_offsets(files, chunks)
    previous_end: int | None = None
    for chunk in chunks:  # in input order (collect_staged)
        shift = offsets.get(chunk.file, 0) * 1_000_000
        if not chunk.in_order or (previous_end is not None and chunk.min_ts + shift < previous_end):
            return False
        previous_end = chunk.max_ts + shift
    return True


def staged_events(spark: Any, files: Sequence[InputFile], chunks: Sequence[StagedChunk],
                  attrs: Mapping[str, pa.DataType], *, tasks: int, first_seq: int | None = None) -> Any:
    """Step 2: the events of all inputs as a DataFrame (``file``, ``pos``, ``ts`` µs, ``type``, ``attrs``);
    with ``first_seq`` (inputs :func:`already_in_order`), ``seq`` in input order replaces ``file``/``pos``."""
    starts = None
    if first_seq is not None:
        starts, seq = [], first_seq
        for chunk in chunks:
            starts.append(seq)
            seq += chunk.rows
        starts = tuple(starts)
    offsets = tuple(text_offsets(files, chunks).items())
    task = _EventsTask(tuple(chunks), tuple(attrs.items()), offsets, starts)
    n = len(chunks)
    return spark.range(0, n, 1, numPartitions=max(1, min(n, tasks))).mapInArrow(
        task, events_ddl(attrs, with_order=starts is None))


@dataclass(frozen=True)
class _EventsTask:
    chunks: tuple[StagedChunk, ...]
    attrs: tuple[tuple[str, pa.DataType], ...]
    offsets: tuple[tuple[int, int], ...]
    seq_starts: tuple[int, ...] | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        attrs = dict(self.attrs)
        offsets = dict(self.offsets)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                chunk = self.chunks[index]
                with ipc.open_file(chunk.path) as reader:
                    table = reader.read_all()
                out = ordered_batch(table, chunk, attrs, offsets.get(chunk.file, 0))
                if self.seq_starts is not None:
                    start = self.seq_starts[index]
                    out = out.drop_columns(["file", "pos"]).add_column(
                        0, "seq", pa.array(range(start, start + out.num_rows), pa.int64()))
                yield from out.to_batches()


def ordered_batch(table: pa.Table, chunk: StagedChunk, attrs: Mapping[str, pa.DataType],
                  text_offset: int) -> pa.Table:
    """A staged batch as input-ordered events with the unified attribute types."""
    table = conform(table, attrs)
    ts = table.column(TS).combine_chunks().view(pa.int64())
    if text_offset:
        ts = pc.add(ts, text_offset * 1_000_000)
    n = table.num_rows
    cols = {"file": pa.array([chunk.file] * n, pa.int32()),
            "pos": pa.array(range(chunk.pos, chunk.pos + n), pa.int64()),
            "ts": ts, "type": table.column(TYPE).combine_chunks()}
    if attrs:
        cols["attrs"] = table.column(ATTRS).combine_chunks()
    return pa.table(cols)
