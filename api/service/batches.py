"""API event records as a stream table: a feed's batch a column at a time (:func:`batch_table`), any other
record by record (:func:`records_for_append`, :func:`check_attr_kinds`, then
:func:`~exact.events.records_to_table`), refusing a value whose type would change silently."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from exact.errors import InputError
from exact.events import checked_micros, finish_table, make_table, parse_timestamp


def records_for_append(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """API event records (``type``, ``ts``, ``attrs`` and/or further top-level fields) as stream records.

    ``ts`` is ISO-8601 text (naive = UTC) or epoch seconds, as in the readers; it becomes UTC microseconds.
    An attribute given both at top level and under ``attrs`` with different values is an error.
    """
    out: list[dict[str, Any]] = []
    for i, rec in enumerate(records):
        where = f"record {i}"
        try:
            ts = parse_timestamp(rec.get("ts"))
        except ValueError as err:
            raise InputError(f"field 'ts': {err}", where=where) from None
        attrs = dict(rec.get("attrs") or {})
        for key, value in rec.items():
            if key in ("type", "ts", "attrs"):
                continue
            if key in attrs and attrs[key] != value:
                raise InputError(f"attribute {key!r} given twice with different values", where=where)
            attrs[key] = value
        out.append({"type": rec["type"], "ts": ts, "attrs": attrs})
    return out


def batch_table(records: Sequence[Mapping[str, Any]], stored: Mapping[str, str]) -> pa.Table | None:
    """The stream table of a batch of API records whose events all have the same fields (a feed's batch),
    built a column at a time: the table ``records_to_table(records_for_append(records))`` makes, for a batch
    :func:`check_attr_kinds` accepts (``stored``: the dataset's attribute types).  None for any other batch
    — fields that differ between records, a value to refuse or to convert one by one — which is then
    converted (or refused, naming the record) a record at a time."""
    if not records or any(type(r) is not dict for r in records):
        return None
    fields = tuple(records[0])
    if "type" not in fields or "ts" not in fields or any(tuple(r) != fields for r in records):
        return None
    kinds = [r["type"] for r in records]
    if set(map(type, kinds)) != {str} or not all(kinds):
        return None
    micros = _batch_micros([r["ts"] for r in records])
    if micros is None:
        return None
    columns: dict[str, list[Any]] = {}
    if "attrs" in fields:
        nested = [r["attrs"] for r in records]
        if set(map(type, nested)) != {dict}:
            return None
        names = tuple(nested[0])
        if any(tuple(a) != names for a in nested):
            return None
        columns = {name: [a[name] for a in nested] for name in names}
    for name in fields:
        if name not in ("type", "ts", "attrs"):
            if name in columns:  # (given twice: equal or refused, record by record)
                return None
            columns[name] = [r[name] for r in records]
    arrays = {}
    for name, values in columns.items():
        array = _batch_attr(values, stored.get(name))
        if array is None:
            return None
        arrays[name] = array
    return finish_table(make_table(pa.array(micros, pa.int64()), pa.array(kinds, pa.string()), arrays))


def _batch_micros(values: list[Any]) -> np.ndarray | None:
    """UTC microseconds of a batch's ``ts`` values, as :func:`parse_timestamp` makes them (numbers of
    seconds: rounded half to even; text: one by one); None when one is refused or they mix numbers kinds."""
    kinds = set(map(type, values))
    try:
        if kinds == {float}:
            seconds = np.array(values, dtype=np.float64)
            # (well inside the years 1-9999, where the rounded microseconds are exact in a double; the rest,
            # and what is not finite, one by one)
            if not (seconds.min() > _SAFE_SECONDS[0] and seconds.max() < _SAFE_SECONDS[1]):
                return None
            return np.rint(seconds * 1_000_000).astype(np.int64)
        if kinds == {int}:
            checked_micros(min(values) * 1_000_000)
            checked_micros(max(values) * 1_000_000)
            return np.array(values, dtype=np.int64) * 1_000_000
        if kinds == {str}:
            return np.array([parse_timestamp(v) for v in values], dtype=np.int64)
    except (ValueError, OverflowError):
        return None
    return None


#: epoch seconds a batch's float ``ts`` converts at once: years 1970-2255 (within them, seconds times 10**6 rounds
#: exactly as one by one and stays in range; before or after, one by one)
_SAFE_SECONDS = (0.0, 9.0e9)


def _batch_attr(values: list[Any], stored: str | None) -> pa.Array | None:
    """One attribute column of a batch as :func:`~exact.events.attr_array` types it, when
    :func:`check_attr_kinds` accepts every value (``stored``: the dataset's type of it, None if new); else
    None."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if not kinds:
        return pa.nulls(len(values))
    accepted = _ACCEPTS.get(stored or "")
    if accepted is not None and not kinds <= accepted:
        return None
    present = values if len(kinds) == len(set(map(type, values))) else [v for v in values if v is not None]
    if kinds == {str}:
        return pa.array(values, pa.string())
    if kinds == {bool}:
        return pa.array(values, pa.bool_())
    if kinds == {float} or kinds == {int, float}:
        if float in kinds and not all(map(math.isfinite, (v for v in present if type(v) is float))):
            return None
        if int in kinds and max(abs(min(present)), abs(max(present))) > _EXACT_IN_DOUBLE:
            return None  # (an integer a double cannot hold exactly, beside floats)
        return pa.array(values, pa.float64())
    if kinds == {int}:
        if min(present) < _INT64[0] or max(present) > _INT64[1]:
            return None
        if stored == "double" and max(abs(min(present)), abs(max(present))) > _EXACT_IN_DOUBLE:
            return None
        return pa.array(values, pa.int64())
    return None


#: The JSON kinds an attribute of each stored type accepts (ints into a double only where exact).
_ACCEPTS: dict[str, set[type]] = {"string": {str}, "int64": {int}, "double": {int, float}, "bool": {bool}}
_INT64 = (-(1 << 63), (1 << 63) - 1)
_EXACT_IN_DOUBLE = 1 << 53


def check_attr_kinds(records: Sequence[Mapping[str, Any]], stored: Mapping[str, str]) -> None:
    """Refuse a batch whose attribute values would change type silently: an integer beyond 64 bits, a value
    of another JSON kind than the attribute has in the dataset (``stored``: name → type name), or, for a new
    attribute, values of different kinds (numbers may mix only where every integer is exact in a double).
    """
    kinds: dict[str, tuple[type, int]] = {}  # attribute → first kind seen, and where
    floats: set[str] = set()  # new attributes that hold a float
    big: dict[str, tuple[int, int]] = {}  # new attribute → an integer past 2**53 in it, and where
    for i, rec in enumerate(records):
        for key, value in rec["attrs"].items():
            if value is None:
                continue
            kind = type(value)
            where = f"record {i}, attribute {key!r}"
            if kind is int and not _INT64[0] <= value <= _INT64[1]:
                raise InputError(f"{value} does not fit a 64-bit integer; send it as a string (or a float, "
                                 "if precision may be lost)", where=where)
            if kind is float and not math.isfinite(value):
                raise InputError(f"{value!r} is not a finite number; send a missing value as null", where=where)
            accepted = _ACCEPTS.get(stored.get(key, ""))
            if accepted is not None:
                inexact = kind is int and float in accepted and abs(value) > _EXACT_IN_DOUBLE
                if kind not in accepted or inexact:
                    raise InputError(f"the dataset holds {key!r} as {stored[key]}; this value is "
                                     f"{_kind_name(kind)} {value!r}", where=where)
                continue
            first = kinds.setdefault(key, (kind, i))
            numbers = {first[0], kind} <= {int, float}
            if kind is not first[0] and not numbers:
                raise InputError(f"{key!r} is {_kind_name(first[0])} in record {first[1]} and "
                                 f"{_kind_name(kind)} {value!r} here; one attribute holds one kind of value",
                                 where=where)
            if kind is float:
                floats.add(key)
            elif kind is int and abs(value) > _EXACT_IN_DOUBLE:
                big.setdefault(key, (value, i))
    for key in floats & set(big):  # (in whichever order the two came)
        value, i = big[key]
        raise InputError(f"{value} mixed with floats would lose precision as a double; send it as a string",
                         where=f"record {i}, attribute {key!r}")


def _kind_name(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a float", bool: "a boolean"}.get(kind, kind.__name__)
