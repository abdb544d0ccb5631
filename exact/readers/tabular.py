"""Readers of records with named fields: CSV, JSON Lines and Parquet.

``--type-field`` (default ``type``) and ``--time-field`` (default ``ts``) name the two fields; every other
field becomes an attribute, and a field named ``seq`` is ignored.  CSV values are typed per column over the
whole file (:func:`read_csv`), JSON values keep their JSON type (:func:`read_jsonl`), Parquet columns keep
theirs (:func:`read_parquet`); a struct column ``attrs`` is unpacked, so a stream written by the store reads
back as itself.  Times are ISO-8601 text (UTC when it names no zone) or seconds since the Unix epoch.
"""


from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exact.errors import InputError
from exact.events import ATTRS, MAX_MICROS, MIN_MICROS, SEQ, TS_TYPE, iso_of_micros, make_table
from exact.readers.common import (
    READ_ERRORS,
    Columns,
    ReadOptions,
    json_scalar,
    no_events,
    open_binary,
    ts_or_error,
    unreadable,
)

# ------------------------------------------------------------------------------------------------ CSV

_INT_RE = r"^\s*[+-]?\d+\s*$"
_FLOAT_RE = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


def _fields_check(header: list[str], options: ReadOptions, where: str) -> None:
    for role, field in (("type", options.type_field), ("time", options.time_field)):
        if field not in header:
            raise InputError(f"no {role} field {field!r} in the header (columns: {', '.join(header)})",
                             where=where, line=1)


def csv_columns(header: list[str], options: ReadOptions,
                where: str) -> tuple[list[str], int, int, list[tuple[int, str]]]:
    """The header's names (stripped), the type and time fields' indexes and the attribute columns."""
    header = [h.strip() for h in header]
    _fields_check(header, options, where)
    ti, si = header.index(options.type_field), header.index(options.time_field)
    return header, ti, si, [(i, h) for i, h in enumerate(header) if i not in (ti, si) and h != SEQ and h]


def read_csv(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """CSV with a header row; values typed per column over the whole file (see module docstring)."""
    where = str(path)
    with open_binary(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        reader = csv.reader(text)
        try:
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise InputError("empty file: no header row", where=where)
            header, ti, si, attr_idx = csv_columns(header, options, where)
            batches = list(csv_batches(reader, header, ti, si, attr_idx, options, where))
        except UnicodeDecodeError as err:
            raise InputError(f"not UTF-8 text: {err.reason}", where=where) from None
        except csv.Error as err:
            raise InputError(f"malformed CSV: {err}", where=where, line=reader.line_num) from None
        except READ_ERRORS as err:
            raise unreadable(err, where, reader.line_num + 1) from None
    if not batches:
        raise no_events(where)
    columns = {name: pa.chunked_array([b[2][name] for b in batches], pa.string()) for _, name in attr_idx}
    typed = {name: _infer_text_column(col) for name, col in columns.items()}
    offset = 0
    for ts, types, _ in batches:
        n = len(ts)
        attrs = {name: col.slice(offset, n).combine_chunks() for name, col in typed.items()}
        offset += n
        yield make_table(ts, types, attrs)


_CsvBatch = tuple[list[int], list[str], dict[str, pa.Array]]


def csv_batches(reader: Any, header: list[str], ti: int, si: int, attr_idx: list[tuple[int, str]],
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
        ts.append(ts_or_error(row[si], options.time_field, where, line))
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
    return cast_text_column(col, text_column_type(text_kinds(col, complete=False)))


@dataclass(frozen=True)
class TextKinds:
    """What every non-null value of a CSV text column fits (all of them: vacuously true for no value).

    A file read in pieces (:mod:`exact.readers.splits`) learns these per piece; the pieces' kinds combine
    with :meth:`both`, and :func:`text_column_type` of the whole gives the type the whole file's column takes
    — the same rule, in the same order, as reading the file at once.
    """

    all_null: bool
    integer: bool  # every value an integer that fits int64
    number: bool  # every value a number
    boolean: bool  # every value true/false (any case)

    def both(self, other: TextKinds) -> TextKinds:
        return TextKinds(self.all_null and other.all_null, self.integer and other.integer,
                         self.number and other.number, self.boolean and other.boolean)

    def to_json(self) -> list[bool]:
        return [self.all_null, self.integer, self.number, self.boolean]

    @classmethod
    def from_json(cls, flags: list[bool]) -> TextKinds:
        return cls(*(bool(f) for f in flags))


def text_kinds(col: pa.Array | pa.ChunkedArray, *, complete: bool = True) -> TextKinds:
    """The :class:`TextKinds` of a column of CSV text (``complete=False``: ``boolean`` is left unchecked, as
    false, when the values are numbers — enough to decide the column's type alone, not to combine it)."""
    if col.null_count == len(col):
        return TextKinds(True, True, True, True)

    def all_match(pattern: str) -> bool:
        return bool(pc.all(pc.match_substring_regex(col, pattern), skip_nulls=True).as_py())

    integer = all_match(_INT_RE)
    if integer:
        try:
            pc.cast(pc.utf8_trim_whitespace(col), pa.int64())
        except pa.ArrowInvalid:  # beyond int64: read as numbers all the same
            integer = False
    number = integer or all_match(_FLOAT_RE)
    if number and not complete:
        return TextKinds(False, integer, number, False)
    lowered = pc.utf8_lower(pc.utf8_trim_whitespace(col))
    boolean = pc.or_(pc.is_null(lowered), pc.is_in(lowered, pa.array(["true", "false"])))
    return TextKinds(False, integer, number, bool(pc.all(boolean).as_py()))


def text_column_type(kinds: TextKinds) -> pa.DataType:
    """The type a CSV column whose values have ``kinds`` is read as: null (no value), int64, double, bool,
    else string."""
    if kinds.all_null:
        return pa.null()
    if kinds.integer:
        return pa.int64()
    if kinds.number:
        return pa.float64()
    if kinds.boolean:
        return pa.bool_()
    return pa.string()


def cast_text_column(col: pa.Array | pa.ChunkedArray, typ: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A column of CSV text read as ``typ`` (one of :func:`text_column_type`'s answers)."""
    if pa.types.is_null(typ):
        if isinstance(col, pa.ChunkedArray):
            return pa.chunked_array([pa.nulls(len(c)) for c in col.chunks], pa.null())
        return pa.nulls(len(col))
    if typ == pa.int64() or typ == pa.float64():
        return pc.cast(pc.utf8_trim_whitespace(col), typ)
    if typ == pa.bool_():
        return pc.equal(pc.utf8_lower(pc.utf8_trim_whitespace(col)), "true")
    return col


# ---------------------------------------------------------------------------------------------- JSONL


def read_jsonl(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """JSON Lines: one object per line, blank lines skipped; values keep their JSON type."""
    where = str(path)
    batch = Columns()
    count = 0
    with open_binary(path) as raw:
        for line_no, line in _numbered_lines(raw, where):
            if not line.strip():
                continue
            record = json_record(line, where, line_no)
            batch.add(*json_event(record, options, where, line_no))
            count += 1
            if len(batch) >= options.batch_rows:
                yield batch.table()
                batch = Columns()
    if len(batch):
        yield batch.table()
    if count == 0:
        raise no_events(where)


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
    except READ_ERRORS as err:
        raise unreadable(err, where, line_no + 1) from None


def json_record(line: str, where: str, line_no: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(f"malformed JSON: {err.msg}", where=where, line=line_no, column=err.colno) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply", where=where, line=line_no) from None
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", where=where, line=line_no)
    return record


def json_event(record: dict[str, Any], options: ReadOptions, where: str,
                line_no: int) -> tuple[int, str, dict[str, Any]]:
    typ = record.get(options.type_field)
    if typ is None:
        raise InputError(f"no type field {options.type_field!r}", where=where, line=line_no)
    if not isinstance(typ, str) or not typ:
        raise InputError(f"field {options.type_field!r}: the type must be a non-empty string, got {typ!r}",
                         where=where, line=line_no)
    if options.time_field not in record:
        raise InputError(f"no time field {options.time_field!r}", where=where, line=line_no)
    ts = ts_or_error(record[options.time_field], options.time_field, where, line_no)
    attrs: dict[str, Any] = {}
    for key, value in record.items():
        if key in (options.type_field, options.time_field, SEQ):
            continue
        if key == ATTRS and isinstance(value, dict):
            for k, v in value.items():
                attrs[k] = json_scalar(v)
        else:
            attrs[key] = json_scalar(value)
    return ts, typ, attrs


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
        raise no_events(where)
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
        yield parquet_table(pa.Table.from_batches([batch]), options, where, first)
        first += batch.num_rows


def parquet_table(table: pa.Table, options: ReadOptions, where: str, first_record: int) -> pa.Table:
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
    return pa.array([ts_or_error(v, field, where, record=first_record + i) for i, v in enumerate(values)],
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
    return pa.array([None if v is None else json_scalar(v) if isinstance(v, dict | list) else str(v)
                     for v in col.to_pylist()], pa.string())
