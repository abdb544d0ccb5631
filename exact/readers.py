"""Readers: input files → batches of stream tables (no ``seq``; ingest orders and numbers them).

Formats (CONTRACT §1):

``xes`` (``.xes``, ``.xes.gz``)
    Streamed with the expat parser that ``xml.etree`` is built on, fed 1 MiB at a time: no element tree is
    built at all, so memory stays at one batch whatever the log's size, and every error can name its line.
    type = ``concept:name``, ts = ``time:timestamp``; the trace's ``concept:name`` becomes attribute ``case``;
    every other attribute of the event and of its trace is kept, typed by its XES element (``int``, ``float``,
    ``boolean``, ``string``/``id``, ``date`` → ISO-8601 UTC text).  An event attribute wins over a trace
    attribute of the same key.  Nested attributes (children of an attribute element), ``list``/``container``
    values and log-level attributes and globals are not event data and are skipped.
``csv`` / ``jsonl`` / ``parquet``
    ``--type-field`` (default ``type``) and ``--time-field`` (default ``ts``) name the two fields; every other
    field becomes an attribute.  A field named ``seq`` is ignored: ``seq`` is always assigned at ingest.
    CSV values are inferred per column over the whole file: int64 if every non-empty value is an integer, else
    double if every one is a number, else bool if every one is ``true``/``false`` (any case), else string; an
    empty cell is null.  JSON values keep their JSON type (objects and arrays become compact JSON text); a
    record may also carry its attributes in an ``attrs`` object.  Parquet columns keep their type (integers →
    int64, floats → double, dates and timestamps → ISO text, anything else → text); a struct column ``attrs``
    is unpacked, so a stream written by the store reads back as itself.
``text``
    Each whitespace-separated token is one event whose type is the token.  Its ts is its position: token ``i``
    (0-based, counted over the whole input) is at ``1970-01-01T00:00:00Z + i`` seconds (plus an optional
    origin, so several text inputs continue one another).  A ``word/tag`` token keeps the word, the part
    before the last ``/``.  A ``.zip`` archive is read member by member in name order, skipping directories
    and the documentation members that corpus archives carry (``README*``, ``LICENSE*``, ``CONTENTS*``,
    ``cats.txt``).  A ``.gz`` file is decompressed.

Timestamps in CSV, JSON and Parquet text: ISO-8601, with an offset or ``Z``; **text without a zone is taken
as UTC**.  Numbers (and numeric text) are **seconds since the Unix epoch**, fractions allowed.

Every malformed record raises :class:`~exact.errors.InputError` naming the file, the line (XES, CSV, JSON
Lines, text) or record (Parquet, 1-based) and the field.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from xml.parsers import expat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exact.errors import InputError
from exact.events import (
    ATTRS,
    MAX_MICROS,
    MIN_MICROS,
    SEQ,
    TS_TYPE,
    attr_array,
    iso_date_text,
    iso_of_micros,
    make_table,
    micros_of,
    parse_timestamp,
)

FORMATS = ("xes", "csv", "jsonl", "parquet", "text")
#: Records per batch: large enough that Arrow does the work, small enough to bound memory per batch.
BATCH_ROWS = 65_536
DEFAULT_TYPE_FIELD = "type"
DEFAULT_TIME_FIELD = "ts"
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ReadOptions:
    """How to read one input: field names (csv/jsonl/parquet), text ts origin (seconds), batch size."""

    type_field: str = DEFAULT_TYPE_FIELD
    time_field: str = DEFAULT_TIME_FIELD
    text_origin: int = 0
    batch_rows: int = BATCH_ROWS


def detect_format(path: str | Path) -> str:
    """The format of ``path`` by its extension (``--format auto``)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix, fmt in ((".xes", "xes"), (".csv", "csv"), (".jsonl", "jsonl"), (".ndjson", "jsonl"),
                        (".json", "jsonl"), (".parquet", "parquet"), (".pq", "parquet"), (".txt", "text"),
                        (".zip", "text")):
        if name.endswith(suffix):
            return fmt
    raise InputError(f"cannot tell the format from the extension; pass --format one of {', '.join(FORMATS)}",
                     where=str(path))


def read_events(path: str | Path, fmt: str = "auto",
                options: ReadOptions | None = None) -> Iterator[pa.Table]:
    """Stream the events of one input as stream tables without ``seq``, in input order."""
    path = Path(path)
    options = options or ReadOptions()
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; expected one of auto, {', '.join(FORMATS)}",
                         where=str(path))
    if not path.is_file():
        raise InputError("no such file", where=str(path))
    reader = {"xes": read_xes, "csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet,
              "text": read_text}[fmt]
    yield from reader(path, options)


# ------------------------------------------------------------------------------------------- batching


class _Columns:
    """One batch being read: ts and type columns, attributes gathered per event and made columns at the end.

    Columns are built per batch with one comprehension per attribute, which is much cheaper than padding
    every column for every event; only one batch of rows is alive at a time.
    """

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.types: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.keys: dict[str, None] = {}  # attribute names in first-seen order

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, ts: int, typ: str, attrs: dict[str, Any]) -> None:
        self.ts.append(ts)
        self.types.append(typ)
        self.rows.append(attrs)
        if attrs.keys() - self.keys.keys():
            self.keys.update(dict.fromkeys(attrs))

    def table(self) -> pa.Table:
        rows = self.rows
        columns = {k: attr_array([r.get(k) for r in rows]) for k in self.keys}
        return make_table(self.ts, self.types, columns)


def _open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic (whatever its name)."""
    raw = open(path, "rb")  # noqa: SIM115 - handed to the caller
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def _read_chunks(stream: IO[bytes], where: str) -> Iterator[bytes]:
    try:
        while chunk := stream.read(_CHUNK):
            yield chunk
    except _READ_ERRORS as err:
        raise _unreadable(err, where) from None


#: What reading a damaged input stream raises (a truncated or corrupt gzip member, an I/O error).
_READ_ERRORS = (OSError, EOFError, zlib.error)


def _unreadable(err: BaseException, where: str, line: int | None = None) -> InputError:
    return InputError(f"cannot read: {err}", where=where, line=line)


def _empty(where: str) -> InputError:
    return InputError("empty file: no events", where=where)


# ------------------------------------------------------------------------------------------------ XES

_XES_VALUE_TAGS = frozenset({"string", "date", "int", "float", "boolean", "id"})
_XES_SKIPPED_TAGS = frozenset({"list", "container", "values"})
_XES_TYPE, _XES_TIME, _CASE = "concept:name", "time:timestamp", "case"


class _XesHandler:
    """Expat callbacks turning ``<trace>``/``<event>`` elements into column rows (see module docstring)."""

    def __init__(self, parser: Any, where: str) -> None:
        self.parser = parser
        self.where = where
        # Depths instead of an element stack: these callbacks run once per XML element (millions).
        self.depth = 0
        self.trace_depth = -1
        self.event_depth = -1
        self.trace: dict[str, Any] | None = None
        self.trace_row: dict[str, Any] | None = None
        self.event: dict[str, Any] | None = None
        self.event_line = 0
        self.batch = _Columns()
        self.count = 0

    def error(self, message: str, line: int | None = None) -> InputError:
        return InputError(message, where=self.where, line=line or self.parser.CurrentLineNumber)

    def start(self, name: str, attrs: list[str]) -> None:
        # ordered_attributes: attrs is [name1, value1, name2, value2, ...], cheaper than a dict each.
        self.depth = depth = self.depth + 1
        if ":" in name:
            name = name.rsplit(":", 1)[1]
        if name in _XES_VALUE_TAGS:
            event = self.event
            if event is not None:
                target = event if depth == self.event_depth + 1 else None
            else:
                target = self.trace if depth == self.trace_depth + 1 else None
            if target is not None:
                if len(attrs) == 4 and attrs[0] == "key" and attrs[2] == "value":
                    key, value = attrs[1], attrs[3]
                else:
                    pairs = dict(zip(attrs[::2], attrs[1::2], strict=True))
                    key, value = pairs.get("key"), pairs.get("value")
                if not key:
                    raise self.error(f"<{name}> attribute has no 'key'")
                target[key] = value if name == "string" and value is not None else \
                    self.typed_value(name, key, value)
        elif name == "event" and self.event is None and depth in (2, self.trace_depth + 1):
            self.event = {}
            self.event_depth = depth
            self.event_line = self.parser.CurrentLineNumber
        elif name == "trace" and depth == 2:
            self.trace = {}
            self.trace_row = None
            self.trace_depth = depth

    def typed_value(self, tag: str, key: str, value: str | None) -> Any:
        if value is None:
            raise self.error(f"field {key!r}: <{tag}> has no 'value'")
        try:
            if tag == "int":
                return int(value)
            if tag == "float":
                return float(value)
            if tag == "boolean":
                low = value.strip().lower()
                if low not in ("true", "false"):
                    raise ValueError(f"not a boolean: {value!r}")
                return low == "true"
            if tag == "date":
                return value if key == _XES_TIME else iso_date_text(value.strip())
        except ValueError as err:
            raise self.error(f"field {key!r}: bad <{tag}> value: {err}") from None
        return value

    def end(self, name: str) -> None:
        depth = self.depth
        self.depth -= 1
        if depth == self.event_depth and self.event is not None:
            event, self.event, self.event_depth = self.event, None, -1
            self.emit(event)
        elif depth == self.trace_depth:
            self.trace, self.trace_row, self.trace_depth = None, None, -1

    def emit(self, event: dict[str, Any]) -> None:
        typ = event.pop(_XES_TYPE, None)
        if not isinstance(typ, str) or not typ:
            raise self.error(f"event has no field {_XES_TYPE!r} (its type)", self.event_line)
        raw_ts = event.pop(_XES_TIME, None)
        if raw_ts is None:
            raise self.error(f"event has no field {_XES_TIME!r} (its time)", self.event_line)
        try:
            ts = micros_of(datetime.fromisoformat(raw_ts))  # the XES form; anything else takes the long way
        except (TypeError, ValueError):
            ts = None
        try:
            ts = parse_timestamp(raw_ts) if ts is None else ts
        except ValueError as err:
            raise self.error(f"field {_XES_TIME!r}: {err}", self.event_line) from None
        if self.trace_row is None:  # the trace's attributes, as every one of its events carries them
            self.trace_row = {(_CASE if k == _XES_TYPE else k): v for k, v in (self.trace or {}).items()}
        row = {**self.trace_row, **event} if self.trace_row else event
        self.batch.add(ts, typ, row)
        self.count += 1


def read_xes(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """Stream an XES log (plain or gzipped) in batches; see the module docstring for the mapping."""
    where = str(path)
    parser = expat.ParserCreate()
    parser.ordered_attributes = True
    handler = _XesHandler(parser, where)
    parser.StartElementHandler = handler.start
    parser.EndElementHandler = handler.end
    with _open_binary(path) as stream:
        saw_bytes = False
        for chunk in _read_chunks(stream, where):
            saw_bytes = saw_bytes or bool(chunk.strip())
            _feed(parser, chunk, False, where)
            if len(handler.batch) >= options.batch_rows:
                yield handler.batch.table()
                handler.batch = _Columns()
        if not saw_bytes:
            raise InputError("empty file", where=where)
        _feed(parser, b"", True, where)
    if len(handler.batch):
        yield handler.batch.table()
    if handler.count == 0:
        raise _empty(where)


def _feed(parser: Any, data: bytes, final: bool, where: str) -> None:
    try:
        parser.Parse(data, final)
    except expat.ExpatError as err:
        raise InputError(f"malformed XML: {expat.ErrorString(err.code)}", where=where, line=err.lineno,
                         column=err.offset + 1) from None
    except (LookupError, ValueError) as err:  # an encoding Python does not know, or expat cannot use
        raise InputError(f"malformed XML: {err}", where=where, line=parser.CurrentLineNumber) from None


# ------------------------------------------------------------------------------------------------ CSV

_INT_RE = r"^\s*[+-]?\d+\s*$"
_FLOAT_RE = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


def _fields_check(header: list[str], options: ReadOptions, where: str) -> None:
    for role, field in (("type", options.type_field), ("time", options.time_field)):
        if field not in header:
            raise InputError(f"no {role} field {field!r} in the header (columns: {', '.join(header)})",
                             where=where, line=1)


def read_csv(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """CSV with a header row; values typed per column over the whole file (see module docstring)."""
    where = str(path)
    with _open_binary(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        reader = csv.reader(text)
        try:
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise InputError("empty file: no header row", where=where)
            header = [h.strip() for h in header]
            _fields_check(header, options, where)
            ti, si = header.index(options.type_field), header.index(options.time_field)
            attr_idx = [(i, h) for i, h in enumerate(header) if i not in (ti, si) and h != SEQ and h]
            batches = list(_csv_batches(reader, header, ti, si, attr_idx, options, where))
        except UnicodeDecodeError as err:
            raise InputError(f"not UTF-8 text: {err.reason}", where=where) from None
        except csv.Error as err:
            raise InputError(f"malformed CSV: {err}", where=where, line=reader.line_num) from None
        except _READ_ERRORS as err:
            raise _unreadable(err, where, reader.line_num + 1) from None
    if not batches:
        raise _empty(where)
    columns = {name: pa.chunked_array([b[2][name] for b in batches], pa.string()) for _, name in attr_idx}
    typed = {name: _infer_text_column(col) for name, col in columns.items()}
    offset = 0
    for ts, types, _ in batches:
        n = len(ts)
        attrs = {name: col.slice(offset, n).combine_chunks() for name, col in typed.items()}
        offset += n
        yield make_table(ts, types, attrs)


_CsvBatch = tuple[list[int], list[str], dict[str, pa.Array]]


def _csv_batches(reader: Any, header: list[str], ti: int, si: int, attr_idx: list[tuple[int, str]],
                 options: ReadOptions, where: str) -> Iterator[_CsvBatch]:
    width = len(header)
    ts: list[int] = []
    types: list[str] = []
    cols: dict[str, list[str | None]] = {name: [] for _, name in attr_idx}
    for row in reader:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            raise InputError(f"record has {len(row)} fields, the header has {width}", where=where, line=line)
        typ = row[ti].strip()
        if not typ:
            raise InputError(f"field {options.type_field!r}: empty type", where=where, line=line)
        ts.append(_ts_or_error(row[si], options.time_field, where, line))
        types.append(typ)
        for i, name in attr_idx:
            cell = row[i]
            cols[name].append(cell if cell != "" else None)
        if len(ts) >= options.batch_rows:
            yield ts, types, {n: pa.array(v, pa.string()) for n, v in cols.items()}
            ts, types, cols = [], [], {name: [] for _, name in attr_idx}
    if ts:
        yield ts, types, {n: pa.array(v, pa.string()) for n, v in cols.items()}


def _infer_text_column(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """int64, double, bool or string for a column of CSV text, whichever fits every non-null value."""
    if col.null_count == len(col):
        return pa.chunked_array([pa.nulls(len(c)) for c in col.chunks], pa.null())

    def all_match(pattern: str) -> bool:
        return bool(pc.all(pc.match_substring_regex(col, pattern), skip_nulls=True).as_py())

    if all_match(_INT_RE):
        try:
            return pc.cast(pc.utf8_trim_whitespace(col), pa.int64())
        except pa.ArrowInvalid:  # beyond int64: read as numbers all the same
            pass
    if all_match(_FLOAT_RE):
        return pc.cast(pc.utf8_trim_whitespace(col), pa.float64())
    lowered = pc.utf8_lower(pc.utf8_trim_whitespace(col))
    boolean = pc.or_(pc.is_null(lowered), pc.is_in(lowered, pa.array(["true", "false"])))
    if bool(pc.all(boolean).as_py()):
        return pc.equal(lowered, "true")
    return col


def _ts_or_error(value: Any, field: str, where: str, line: int | None = None,
                 record: int | None = None) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"field {field!r}: missing time", where=_where(where, record), line=line)
    try:
        return parse_timestamp(value)
    except ValueError as err:
        raise InputError(f"field {field!r}: {err}", where=_where(where, record), line=line) from None


def _where(where: str, record: int | None) -> str:
    return where if record is None else f"{where}: record {record}"


# ---------------------------------------------------------------------------------------------- JSONL


def read_jsonl(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """JSON Lines: one object per line, blank lines skipped; values keep their JSON type."""
    where = str(path)
    batch = _Columns()
    count = 0
    with _open_binary(path) as raw:
        for line_no, line in _numbered_lines(raw, where):
            if not line.strip():
                continue
            record = _json_record(line, where, line_no)
            batch.add(*_json_event(record, options, where, line_no))
            count += 1
            if len(batch) >= options.batch_rows:
                yield batch.table()
                batch = _Columns()
    if len(batch):
        yield batch.table()
    if count == 0:
        raise _empty(where)


def _numbered_lines(raw: IO[bytes], where: str) -> Iterator[tuple[int, str]]:
    """The stream's lines as UTF-8 text (a leading BOM dropped), numbered from 1; a line that is not UTF-8
    or a stream that cannot be read is an :class:`InputError` naming the line."""
    line_no = 0
    try:
        for line_no, data in enumerate(raw, start=1):
            try:
                yield line_no, data.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"not UTF-8 text (byte {err.start + 1} of the line): {err.reason}",
                                 where=where, line=line_no) from None
    except _READ_ERRORS as err:
        raise _unreadable(err, where, line_no + 1) from None


def _json_record(line: str, where: str, line_no: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(f"malformed JSON: {err.msg}", where=where, line=line_no, column=err.colno) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply", where=where, line=line_no) from None
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", where=where, line=line_no)
    return record


def _json_event(record: dict[str, Any], options: ReadOptions, where: str,
                line_no: int) -> tuple[int, str, dict[str, Any]]:
    typ = record.get(options.type_field)
    if typ is None:
        raise InputError(f"no type field {options.type_field!r}", where=where, line=line_no)
    if not isinstance(typ, str) or not typ:
        raise InputError(f"field {options.type_field!r}: the type must be a non-empty string, got {typ!r}",
                         where=where, line=line_no)
    if options.time_field not in record:
        raise InputError(f"no time field {options.time_field!r}", where=where, line=line_no)
    ts = _ts_or_error(record[options.time_field], options.time_field, where, line_no)
    attrs: dict[str, Any] = {}
    for key, value in record.items():
        if key in (options.type_field, options.time_field, SEQ):
            continue
        if key == ATTRS and isinstance(value, dict):
            for k, v in value.items():
                attrs[k] = _json_scalar(v)
        else:
            attrs[key] = _json_scalar(value)
    return ts, typ, attrs


def _json_scalar(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return value


# -------------------------------------------------------------------------------------------- Parquet


def read_parquet(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """Parquet, batch by batch; column types kept (see module docstring)."""
    where = str(path)
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise InputError(f"not a readable Parquet file: {err}", where=where) from None
    names = pf.schema_arrow.names
    for role, field in (("type", options.type_field), ("time", options.time_field)):
        if field not in names:
            raise InputError(f"no {role} field {field!r} (columns: {', '.join(names)})", where=where)
    if pf.metadata.num_rows == 0:
        raise _empty(where)
    first = 1
    batches = pf.iter_batches(batch_size=options.batch_rows)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError, ValueError) as err:  # a damaged page or footer-listed chunk
            raise InputError(f"not a readable Parquet file: {err}",
                             where=f"{where}: records from {first}") from None
        if batch is None:
            break
        yield _parquet_table(pa.Table.from_batches([batch]), options, where, first)
        first += batch.num_rows


def _parquet_table(table: pa.Table, options: ReadOptions, where: str, first_record: int) -> pa.Table:
    types = table.column(options.type_field).combine_chunks()
    if not (pa.types.is_string(types.type) or pa.types.is_large_string(types.type)
            or pa.types.is_dictionary(types.type)):
        types = pc.cast(types, pa.string())
    types = types.cast(pa.string())
    bad = pc.or_kleene(pc.is_null(types), pc.equal(types, ""))
    if pc.any(bad).as_py():
        i = pc.index(bad, True).as_py()
        raise InputError(f"field {options.type_field!r}: missing type",
                         where=f"{where}: record {first_record + i}")
    time_col = table.column(options.time_field).combine_chunks()
    ts = _parquet_ts(time_col, options.time_field, where, first_record)
    attrs: dict[str, pa.Array] = {}
    for name in table.column_names:
        if name in (options.type_field, options.time_field, SEQ):
            continue
        col = table.column(name).combine_chunks()
        if name == ATTRS and pa.types.is_struct(col.type):
            for i in range(col.type.num_fields):
                attrs[col.type.field(i).name] = _arrow_attr(col.field(i))
        else:
            attrs[name] = _arrow_attr(col)
    return make_table(ts, types, attrs)


def _parquet_ts(col: pa.Array, field: str, where: str, first_record: int) -> pa.Array:
    """The time column as UTC microseconds, every value checked to lie in the years 1-9999 UTC."""
    ts = _parquet_micros(col, field, where, first_record)
    values = ts.view(pa.int64()) if pa.types.is_timestamp(ts.type) else ts
    bad = pc.or_(pc.less(values, MIN_MICROS), pc.greater(values, MAX_MICROS))
    if pc.any(bad).as_py():
        i = pc.index(bad, True).as_py()
        raise InputError(f"field {field!r}: timestamp out of range: it must lie in the years 0001-9999 UTC",
                         where=f"{where}: record {first_record + i}")
    return ts


def _parquet_micros(col: pa.Array, field: str, where: str, first_record: int) -> pa.Array:
    if col.null_count:
        i = pc.index(pc.is_null(col), True).as_py()
        raise InputError(f"field {field!r}: missing time", where=f"{where}: record {first_record + i}")
    t = col.type
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms"):
        # Coarser units are scaled up by the cast, which must not overflow (the check below catches it).
        factor = {"s": 1_000_000, "ms": 1_000}[t.unit]
        return _scaled(col.view(pa.int64()), factor, field, where, first_record)
    if pa.types.is_timestamp(t):
        # A naive timestamp is read as UTC: reinterpret its wall-clock value, no shift.
        # Nanosecond inputs are truncated to the store's microseconds (safe=False: no error for the loss).
        return pc.cast(col, pa.timestamp("us", tz=t.tz), safe=False).view(pa.int64()).cast(TS_TYPE)
    if pa.types.is_date(t):
        return col.cast(pa.date32()).cast(pa.timestamp("us")).view(pa.int64()).cast(TS_TYPE)
    if pa.types.is_integer(t):
        return _scaled(col, 1_000_000, field, where, first_record)
    if pa.types.is_floating(t):
        micros = pc.multiply(col.cast(pa.float64()), 1e6)
        bad = pc.invert(pc.and_(pc.is_finite(micros), pc.less_equal(pc.abs(micros), float(2**62))))
        if pc.any(bad).as_py():
            i = pc.index(bad, True).as_py()
            raise InputError(f"field {field!r}: not a timestamp: {col[i].as_py()!r}",
                             where=f"{where}: record {first_record + i}")
        return pc.round(micros).cast(pa.int64()).cast(TS_TYPE)
    values = col.cast(pa.string()).to_pylist()
    return pa.array([_ts_or_error(v, field, where, record=first_record + i) for i, v in enumerate(values)],
                    pa.int64()).cast(TS_TYPE)


def _scaled(col: pa.Array, factor: int, field: str, where: str, first_record: int) -> pa.Array:
    """Integer times × ``factor`` as microseconds; a value whose product overflows names its record."""
    limit = (2**63 - 1) // factor
    bad = pc.greater(col, pa.scalar(limit, col.type)) if col.type == pa.uint64() else \
        pc.or_(pc.greater(col.cast(pa.int64()), limit), pc.less(col.cast(pa.int64()), -limit))
    if pc.any(bad).as_py():
        i = pc.index(bad, True).as_py()
        raise InputError(f"field {field!r}: timestamp out of range: {col[i].as_py()!r}",
                         where=f"{where}: record {first_record + i}")
    return pc.multiply_checked(col.cast(pa.int64()), factor).cast(TS_TYPE)


def _arrow_attr(col: pa.Array) -> pa.Array:
    """One input column as an attribute column of int64, double, bool or string (or null)."""
    t = col.type
    if pa.types.is_dictionary(t):
        return _arrow_attr(col.dictionary_decode())
    if pa.types.is_null(t) or t in (pa.int64(), pa.float64(), pa.bool_(), pa.string()):
        return col
    if pa.types.is_integer(t):
        try:
            return col.cast(pa.int64())
        except pa.ArrowInvalid:  # uint64 beyond int64
            return col.cast(pa.string())
    if pa.types.is_floating(t):
        return col.cast(pa.float64())
    if pa.types.is_large_string(t):
        return col.cast(pa.string())
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        unit = pa.timestamp("us") if pa.types.is_date(t) else pa.timestamp("us", tz=t.tz)
        micros = pc.cast(col, unit, safe=False).view(pa.int64()).to_pylist()
        return pa.array([None if v is None else iso_of_micros(v) for v in micros], pa.string())
    return pa.array([None if v is None else _json_scalar(v) if isinstance(v, dict | list) else str(v)
                     for v in col.to_pylist()], pa.string())


# ----------------------------------------------------------------------------------------------- text

_DOC_MEMBER = re.compile(r"^(readme|license|licence|contents)([._-].*)?$|^cats\.txt$", re.IGNORECASE)


def word_of(token: str) -> str:
    """The word of a ``word/tag`` token (the part before the last ``/``); other tokens stay whole."""
    head, sep, _ = token.rpartition("/")
    return head if sep and head else token


def read_text(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """Whitespace tokens as events (see module docstring for ts and ``.zip`` handling)."""
    position = options.text_origin
    for where, stream in _text_streams(path):
        with stream:
            batch: list[str] = []
            try:
                # utf-8-sig: a byte-order mark opening a file is not part of its first word.
                for line in io.TextIOWrapper(stream, encoding="utf-8-sig"):
                    batch.extend(word_of(tok) for tok in line.split())
                    if len(batch) >= options.batch_rows:
                        yield _text_table(batch, position)
                        position += len(batch)
                        batch = []
            except UnicodeDecodeError as err:
                raise InputError(f"not UTF-8 text (byte {err.start} of a block): {err.reason}",
                                 where=where) from None
            except _READ_ERRORS as err:
                raise _unreadable(err, where) from None
            if batch:
                yield _text_table(batch, position)
                position += len(batch)
    if position == options.text_origin:
        raise _empty(str(path))


def _text_streams(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    if zipfile.is_zipfile(path):
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as err:
            raise InputError(f"bad zip archive: {err}", where=str(path)) from None
        with archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                base = info.filename.rstrip("/").rsplit("/", 1)[-1]
                if info.is_dir() or _DOC_MEMBER.match(base) or base.startswith("."):
                    continue
                yield f"{path}:{info.filename}", archive.open(info)
    else:
        yield str(path), _open_binary(path)


def _text_table(words: list[str], position: int) -> pa.Table:
    ts = np.arange(position, position + len(words), dtype=np.int64) * 1_000_000
    return make_table(pa.array(ts), pa.array(words, pa.string()))
