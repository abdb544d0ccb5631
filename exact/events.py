"""The event model (docs/contract.md §1) and its one Arrow form.

A stream of events is held as an Arrow table with exactly this schema, which the exact engine, the index and
the Spark job all rely on::

    seq:   int64                      0-based position in the dataset's stream (assigned at ingest)
    ts:    timestamp[us, tz=UTC]      event time, UTC microseconds
    type:  string                     event type
    attrs: struct<name: T, ...>       one field per attribute, T in {int64, double, bool, string}

``attrs`` is omitted when the data has no attributes.  Attribute types follow one widening rule
(:func:`widen`): equal types stay, ``int64`` with ``double`` becomes ``double``, a ``null`` column takes the
other side's type, and any other mix becomes ``string``.  Dates and timestamps inside attributes are kept as
ISO-8601 strings (normalised to UTC, ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``), so that comparing two of them as
strings compares them in time.

Conversion to text (when a column widens to ``string``) renders ``true``/``false`` for booleans, decimal
integers, and floats as Arrow's cast does (``1.0`` → ``"1"``), so a value reads the same whether it widened
inside one batch or across batches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from exact.errors import InputError

SEQ, TS, TYPE, ATTRS = "seq", "ts", "type", "attrs"
SEQ_TYPE = pa.int64()
TS_TYPE = pa.timestamp("us", tz="UTC")
TYPE_TYPE = pa.string()
#: The Arrow types an attribute may have.
ATTR_TYPES = (pa.int64(), pa.float64(), pa.bool_(), pa.string())
#: Names of attribute types as written in manifests and ``info``.
ATTR_TYPE_NAMES = {pa.int64(): "int64", pa.float64(): "double", pa.bool_(): "bool", pa.string(): "string"}
_TYPE_BY_NAME = {v: k for k, v in ATTR_TYPE_NAMES.items()}

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


# ----------------------------------------------------------------------------------------------- schema


def event_schema(attrs: Mapping[str, pa.DataType] | None = None, *, with_seq: bool = True) -> pa.Schema:
    """The stream schema for the given attribute types (in their order); no ``attrs`` column when empty."""
    fields = [pa.field(SEQ, SEQ_TYPE, nullable=False)] if with_seq else []
    fields += [pa.field(TS, TS_TYPE, nullable=False), pa.field(TYPE, TYPE_TYPE, nullable=False)]
    if attrs:
        for name, typ in attrs.items():
            if typ not in ATTR_TYPES:
                raise ValueError(f"attribute {name!r}: type {typ} is not one of int64, double, bool, string")
        fields.append(pa.field(ATTRS, pa.struct([pa.field(n, t) for n, t in attrs.items()])))
    return pa.schema(fields)


def attr_types(schema: pa.Schema) -> dict[str, pa.DataType]:
    """Attribute name → Arrow type of a stream schema (empty when it has no ``attrs``)."""
    if ATTRS not in schema.names:
        return {}
    struct = schema.field(ATTRS).type
    return {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}


def type_name(typ: pa.DataType) -> str:
    return ATTR_TYPE_NAMES[typ]


def type_from_name(name: str) -> pa.DataType:
    return _TYPE_BY_NAME[name]


def widen(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type ``a`` and ``b`` widen to: equal stays, int+double → double, null → the other, else string."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if {a, b} == {pa.int64(), pa.float64()}:
        return pa.float64()
    return pa.string()


def unify_attr_types(*maps: Mapping[str, pa.DataType]) -> dict[str, pa.DataType]:
    """Merge attribute type maps: names in first-seen order, types widened; all-null columns become string."""
    out: dict[str, pa.DataType] = {}
    for m in maps:
        for name, typ in m.items():
            out[name] = widen(out[name], typ) if name in out else typ
    return {n: (pa.string() if pa.types.is_null(t) else t) for n, t in out.items()}


def conform(table: pa.Table, attrs: Mapping[str, pa.DataType]) -> pa.Table:
    """Cast ``table`` (a stream table, with or without ``seq``) to the schema with exactly ``attrs``.

    Missing attributes become null columns; present ones are cast to the wider type (a widening cast only:
    int → double, anything → string).  Used on read to unify parts written before the schema evolved.
    """
    with_seq = SEQ in table.column_names
    target = event_schema(attrs, with_seq=with_seq)
    if table.schema.equals(target):
        return table
    cols = [table.column(SEQ).cast(SEQ_TYPE)] if with_seq else []
    cols += [table.column(TS).cast(TS_TYPE), table.column(TYPE).cast(TYPE_TYPE)]
    if attrs:
        struct = table.column(ATTRS).combine_chunks() if ATTRS in table.column_names else None
        cols.append(conform_attrs(struct, table.num_rows, attrs))
    return pa.Table.from_arrays(cols, schema=target)


def conform_attrs(struct: pa.StructArray | None, length: int,
                  attrs: Mapping[str, pa.DataType]) -> pa.StructArray:
    """The ``attrs`` struct with exactly the fields ``attrs`` (missing → null, present → widened)."""
    # flatten() (unlike field()) honours a slice's offset and the struct's own validity.
    have = ({struct.type.field(i).name: child for i, child in enumerate(struct.flatten())}
            if struct is not None else {})
    children = [cast_attr(have[name], typ) if name in have else pa.nulls(length, typ)
                for name, typ in attrs.items()]
    fields = [pa.field(name, typ) for name, typ in attrs.items()]
    return pa.StructArray.from_arrays(children, fields=fields)


def cast_attr(arr: pa.Array | pa.ChunkedArray, typ: pa.DataType) -> pa.Array:
    """Widen one attribute column to ``typ`` (see :func:`widen`); text renders as described in the module."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type == typ:
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), typ)
    return pc.cast(arr, typ)


# ------------------------------------------------------------------------------------------- timestamps


#: The instants an event may carry: those ISO-8601 text (and ``datetime``) can write in UTC, years 1-9999.
#: An offset can push a valid-looking local time past either end (``9999-12-31T23:00-05:00``); such a value
#: would be stored and then fail every later conversion to text, so it is refused at the door.
MIN_MICROS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // _US
MAX_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC) - EPOCH) // _US


def micros(column: pa.Array | pa.ChunkedArray) -> NDArray[np.int64]:
    """An int64 array of a ``ts`` (or ``seq``) column: UTC microseconds of a timestamp column (any unit),
    the values of an integer one.  A microsecond timestamp column is viewed as it is, without a compute
    call; a chunked array without chunks is answered directly (pyarrow would convert it through pandas, a
    second-long import on a query's path)."""
    if isinstance(column, pa.ChunkedArray) and column.num_chunks == 0:
        return np.zeros(0, dtype=np.int64)
    typ = column.type
    if pa.types.is_timestamp(typ):
        if typ.unit != "us":
            column = pc.cast(column, pa.timestamp("us", tz=typ.tz))
        viewed: NDArray[np.int64] = column.to_numpy(zero_copy_only=False).view(np.int64)
        return viewed
    values: NDArray[np.int64] = column.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return values


def checked_micros(us: int) -> int:
    """``us`` if it lies in [:data:`MIN_MICROS`, :data:`MAX_MICROS`], else ``ValueError``."""
    if not MIN_MICROS <= us <= MAX_MICROS:
        raise ValueError("timestamp out of range: it must lie in the years 0001-9999 UTC")
    return us


def micros_of(dt: datetime) -> int:
    """UTC microseconds since the epoch of an aware datetime (a naive one is taken as UTC); ``ValueError``
    when the instant lies outside the years 1-9999 UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return checked_micros((dt - EPOCH) // _US)


def iso_of_micros(us: int) -> str:
    """ISO-8601 text (UTC, microseconds) of UTC microseconds since the epoch."""
    return (EPOCH + timedelta(microseconds=us)).isoformat(timespec="microseconds")


def parse_timestamp(value: Any) -> int:
    """UTC microseconds of a timestamp value; raises ``ValueError`` with a short reason.

    Accepted: ISO-8601 text with a zone offset or ``Z`` (naive text is taken as UTC), a number or numeric
    text (seconds since the Unix epoch, fractions allowed), a ``datetime`` (naive = UTC) or a ``date``
    (midnight UTC).
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a timestamp: {value!r}")
    if isinstance(value, int):
        return checked_micros(value * 1_000_000)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a timestamp: {value!r}")
        return checked_micros(round(value * 1_000_000))
    if isinstance(value, datetime):
        return micros_of(value)
    if isinstance(value, date):
        return micros_of(datetime(value.year, value.month, value.day))
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.match(text):
            return _epoch_text_micros(text)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not an ISO-8601 timestamp or epoch seconds: {value!r}") from None
        return micros_of(parsed)
    raise ValueError(f"not a timestamp: {value!r}")


def _epoch_text_micros(text: str) -> int:
    # Decimal arithmetic keeps microsecond fractions exact where float would round them.
    from decimal import Decimal

    seconds = Decimal(text)
    # Refuse huge magnitudes before making an integer of them: '1e999999999' would take all memory.
    if seconds.adjusted() > 18:
        raise ValueError(f"timestamp out of range: {text[:40]!r} seconds since the epoch")
    return checked_micros(int((seconds * 1_000_000).to_integral_value()))


def iso_date_text(value: datetime | date | str) -> str:
    """An attribute date as ISO-8601 text normalised to UTC (``ValueError`` when unparseable)."""
    us = parse_timestamp(value) if not isinstance(value, str) else micros_of(datetime.fromisoformat(value))
    return iso_of_micros(us)


# ------------------------------------------------------------------------------------ attribute values


def text_of(value: Any) -> str:
    """A scalar as text, rendered as Arrow's cast to string renders it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    if isinstance(value, datetime | date):
        return iso_date_text(value)
    return str(value)


def attr_array(values: Sequence[Any]) -> pa.Array:
    """One attribute column from Python scalars, typed by the module's rule (mixes widen, see :func:`widen`).

    ``None`` is null; ``datetime``/``date`` become ISO text; lists and dicts are not scalars and become text.
    A column of only nulls has Arrow type ``null`` (it takes its type from the other batches).
    """
    kinds: set[type] = set()
    for v in values:
        if v is not None:
            kinds.add(type(v))
    if not kinds:
        return pa.nulls(len(values))
    if kinds == {bool}:
        return pa.array(values, pa.bool_())
    if kinds == {int}:
        try:
            return pa.array(values, pa.int64())
        except OverflowError:
            return pa.array([None if v is None else str(v) for v in values], pa.string())
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if kinds == {str}:
        return pa.array(values, pa.string())
    return pa.array([None if v is None else text_of(v) for v in values], pa.string())


def attrs_struct(columns: Mapping[str, pa.Array], length: int) -> pa.StructArray | None:
    """The ``attrs`` struct from named attribute columns (``None`` when there are none)."""
    if not columns:
        return None
    for name, arr in columns.items():
        if len(arr) != length:
            raise ValueError(f"attribute {name!r} has {len(arr)} values for {length} events")
    return pa.StructArray.from_arrays(list(columns.values()), names=list(columns))


def make_table(ts_us: pa.Array | Sequence[int], types: pa.Array | Sequence[str],
               attrs: Mapping[str, pa.Array] | None = None, *, first_seq: int | None = None) -> pa.Table:
    """A stream table from columns; with ``first_seq`` a ``seq`` column ``first_seq, first_seq+1, …`` leads.

    Attribute columns of Arrow type ``null`` are kept as such here (a batch); :func:`finish_table` settles
    them once all batches are known.
    """
    ts = pa.array(ts_us, pa.int64()).cast(TS_TYPE) if not isinstance(ts_us, pa.Array) else ts_us.cast(TS_TYPE)
    ty = pa.array(types, pa.string()) if not isinstance(types, pa.Array) else types.cast(pa.string())
    n = len(ts)
    cols: list[pa.Array] = []
    names: list[str] = []
    if first_seq is not None:
        cols.append(pa.array(range(first_seq, first_seq + n), SEQ_TYPE))
        names.append(SEQ)
    cols += [ts, ty]
    names += [TS, TYPE]
    struct = attrs_struct(attrs or {}, n)
    if struct is not None:
        cols.append(struct)
        names.append(ATTRS)
    return pa.Table.from_arrays(cols, names=names)


def finish_table(table: pa.Table) -> pa.Table:
    """Settle a concatenated table onto the exact stream schema (null-typed attributes become string)."""
    attrs = unify_attr_types(attr_types(table.schema))
    return conform(table, attrs)


def concat_batches(tables: Iterable[pa.Table]) -> pa.Table:
    """Concatenate stream tables whose attribute sets or types differ, widening per :func:`widen`."""
    tables = [t for t in tables]
    if not tables:
        return pa.Table.from_batches([], schema=event_schema({}, with_seq=False))
    attrs = unify_attr_types(*(attr_types(t.schema) for t in tables))
    return pa.concat_tables([conform(t, attrs) for t in tables])


# ---------------------------------------------------------------------------------------------- records


def records_to_table(records: Iterable[Mapping[str, Any]], *, first_seq: int | None = 0,
                     where: str = "records") -> pa.Table:
    """A stream table from dict records ``{"ts": …, "type": …, "attrs": {…}}``, in the given order.

    ``ts`` may be UTC microseconds (int), a ``datetime`` or ISO-8601 text; ``seq`` is assigned from
    ``first_seq`` (``None``: no ``seq`` column).  For tests and small API batches; readers build columns.
    """
    ts: list[int] = []
    types: list[str] = []
    attrs: dict[str, list[Any]] = {}
    for i, rec in enumerate(records):
        if not isinstance(rec.get(TYPE), str) or not rec.get(TYPE):
            raise InputError("missing or empty field 'type'", where=f"{where}: record {i + 1}")
        raw = rec.get(TS)
        if isinstance(raw, int) and not isinstance(raw, bool):
            ts.append(raw)  # already microseconds
        else:
            try:
                ts.append(parse_timestamp(raw))
            except ValueError as err:
                raise InputError(f"field 'ts': {err}", where=f"{where}: record {i + 1}") from None
        types.append(rec[TYPE])
        for name, value in (rec.get(ATTRS) or {}).items():
            col = attrs.setdefault(name, [None] * i)
            col.append(value)
        for col in attrs.values():
            if len(col) < len(ts):
                col.append(None)
    columns = {n: attr_array(v) for n, v in attrs.items()}
    return finish_table(make_table(ts, types, columns, first_seq=first_seq))


def to_records(table: pa.Table) -> list[dict[str, Any]]:
    """Dict records of a stream table: ``seq`` (if present), ``ts`` (UTC µs, int), ``type``, ``attrs``.

    ``attrs`` holds only the non-null attributes of each event (an absent attribute and a null one are the
    same event).
    """
    out: list[dict[str, Any]] = []
    seqs = table.column(SEQ).to_pylist() if SEQ in table.column_names else None
    ts = table.column(TS).cast(pa.int64()).to_pylist()
    types = table.column(TYPE).to_pylist()
    attrs = table.column(ATTRS).to_pylist() if ATTRS in table.column_names else [None] * table.num_rows
    for i in range(table.num_rows):
        rec: dict[str, Any] = {}
        if seqs is not None:
            rec[SEQ] = seqs[i]
        rec[TS] = ts[i]
        rec[TYPE] = types[i]
        rec[ATTRS] = {k: v for k, v in (attrs[i] or {}).items() if v is not None}
        out.append(rec)
    return out
