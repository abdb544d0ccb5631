"""Attribute columns of seek files: every value comes back exactly (NaN, -0.0, int64 extremes, nulls, empty and
non-ASCII strings), a read of attributes by ranges from seek files equals the Parquet read of the same rows,
the budget picks the cheapest attributes, and a part whose seek file does not serve an attribute asked for is
read from Parquet instead."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exact.store.seek as seek_module
from exact.events import records_to_table
from exact.store import EventStore
from exact.store.seek import encode, open_seek, seek_name, write
from exact.store.seek_attrs import DEFAULT_BUDGET, encode_attrs

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_I64 = (-(1 << 63), (1 << 63) - 1)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, math.nan, 1e308]))
STRINGS = st.one_of(st.text(max_size=6), st.sampled_from(["", "é", "A_SUBMITTED", "50000", "\u2603"]))


def column_values(draw: st.DrawFn, n: int) -> tuple[pa.DataType, list[Any]]:
    """One attribute's values over ``n`` rows: its type and its values, some null."""
    kind = draw(st.sampled_from(["small_int", "wide_int", "float", "bool", "string", "null"]))
    values: st.SearchStrategy[Any]
    if kind == "small_int":
        lo = draw(st.integers(-10**6, 10**6))
        values, typ = st.integers(lo, lo + draw(st.sampled_from([0, 200, 60_000, 3 * 10**9]))), pa.int64()
    elif kind == "wide_int":
        values, typ = st.integers(*_I64), pa.int64()
    elif kind == "float":
        values, typ = FLOATS, pa.float64()
    elif kind == "bool":
        values, typ = st.booleans(), pa.bool_()
    elif kind == "string":
        pool = draw(st.lists(STRINGS, min_size=1, max_size=300, unique=True))
        values, typ = st.sampled_from(pool), pa.string()
    else:
        return pa.null(), [None] * n
    if draw(st.booleans()):
        values = st.one_of(st.none(), values)
    return typ, draw(st.lists(values, min_size=n, max_size=n))


def same(a: pa.Array, b: pa.Array) -> bool:
    """Equal values, nulls in the same places, floats bit for bit (NaN and -0.0 included)."""
    if a.type != b.type or len(a) != len(b) or a.is_null().to_pylist() != b.is_null().to_pylist():
        return False
    if pa.types.is_floating(a.type):
        x = a.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.int64)
        y = b.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.int64)
        return bool(np.array_equal(x, y))
    return a.to_pylist() == b.to_pylist()


@SETTINGS
@given(data=st.data())
def test_every_value_comes_back_exactly(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 120))
    columns = {f"c{i}": column_values(data.draw, n) for i in range(data.draw(st.integers(1, 4)))}
    struct = pa.StructArray.from_arrays([pa.array(v, t) for t, v in columns.values()], names=list(columns))
    path = tmp_path_factory.mktemp("seek") / "p.seek"
    write(path, np.arange(n, dtype=np.int64), pa.array(["A"] * n), struct, chosen=list(columns))
    seek = open_seek(path, n)
    assert seek.serves(list(columns))  # named: every one of these kinds and sizes is served
    rows = np.asarray(sorted(data.draw(st.sets(st.integers(0, n - 1)))), dtype=np.int64)
    for name, (typ, values) in columns.items():
        column = seek.attrs[name]
        got = column.values(rows)
        want = pa.array([values[i] for i in rows.tolist()], typ)
        if pa.types.is_null(typ) or all(v is None for v in values):
            assert got.null_count == len(rows)
        else:
            assert same(got, want), name


def test_the_budget_serves_the_cheapest_attributes_first() -> None:
    n = 1000
    struct = pa.StructArray.from_arrays([
        pa.array([i % 3 for i in range(n)], pa.int64()),  # 1 byte per row
        pa.array([float(i) / 7 for i in range(n)], pa.float64()),  # 8
        pa.array([f"id-{i}" for i in range(n)], pa.string()),  # 2 + its dictionary (~9)
        pa.array([i % 2 == 0 for i in range(n)], pa.bool_()),  # 1
    ], names=["small", "double", "unique", "flag"])
    served, unserved, _ = encode_attrs(struct, n, budget=8.0)
    assert [e["name"] for e in served] == ["small", "flag"] and unserved == ["double", "unique"]
    served, unserved, _ = encode_attrs(struct, n, budget=10.0)
    assert [e["name"] for e in served] == ["small", "double", "flag"] and unserved == ["unique"]
    served, unserved, _ = encode_attrs(struct, n)
    assert DEFAULT_BUDGET >= 1 + 1 + 8 + 11 and len(served) == 4  # by default a few doubles are served
    served, unserved, _ = encode_attrs(struct, n, chosen=["double", "unique"])
    assert [e["name"] for e in served] == ["double", "unique"] and unserved == ["flag", "small"]
    served, unserved, _ = encode_attrs(struct, n, budget=100.0)
    assert len(served) == 4 and not unserved


def test_too_many_distinct_strings_are_not_served() -> None:
    n = 70_000
    struct = pa.StructArray.from_arrays([pa.array([str(i) for i in range(n)])], names=["id"])
    served, unserved, sections = encode_attrs(struct, n, chosen=["id"])
    assert not served and unserved == ["id"] and not sections
    data = encode(np.arange(n, dtype=np.int64), pa.array(["A"] * n), struct)
    assert len(data) < 11 * n  # the seek file holds ts, type and the rows by type only


@st.composite
def streams(draw: st.DrawFn) -> pa.Table:
    """A stream whose attributes are of every kind, some absent, one widened across appends."""
    n = draw(st.integers(2, 150))
    recs = []
    for i in range(n):
        attrs: dict[str, Any] = {}
        if draw(st.booleans()):
            attrs["amount"] = draw(st.integers(-3, 10**12))
        if draw(st.booleans()):
            attrs["price"] = draw(FLOATS)
        if draw(st.booleans()):
            attrs["who"] = draw(STRINGS)
        if draw(st.booleans()):
            attrs["ok"] = draw(st.booleans())
        recs.append({"ts": i // 2, "type": draw(st.sampled_from("ABC")), "attrs": attrs})
    return records_to_table(recs)


@SETTINGS
@given(stream=streams(), data=st.data())
def test_range_reads_of_attributes_from_seek_files_equal_parquet(tmp_path_factory: pytest.TempPathFactory,
                                                                  stream: pa.Table, data: st.DataObject) -> None:
    root = tmp_path_factory.mktemp("store")
    store = EventStore.create(root, stream, row_group_size=data.draw(st.integers(1, 16)),
                              part_rows=data.draw(st.integers(5, 60)))
    snap = store.snapshot()
    n = stream.num_rows
    points = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=8)))
    ranges = [(a, b) for a, b in zip(points[::2], points[1::2], strict=False)]
    names = data.draw(st.lists(st.sampled_from(sorted(snap.attrs)), unique=True)) if snap.attrs else []
    columns = ["seq", "ts", "type"] + ([f"attrs.{a}" for a in names] if names else ["attrs"] * bool(snap.attrs))
    types = data.draw(st.one_of(st.none(), st.frozensets(st.sampled_from("ABC"))))
    # every row in the ranges is looked at (the rows by type are held to the same rows in test_store.py)
    saved = seek_module._BY_TYPE_SHARE
    seek_module._BY_TYPE_SHARE = -1.0
    try:
        got, decoded = store.read_ranges(ranges, columns, types)
    finally:
        seek_module._BY_TYPE_SHARE = saved
    full = store.read_table()  # whole row groups from Parquet
    keep = [i for i, (s, t) in enumerate(zip(full.column("seq").to_pylist(), full.column("type").to_pylist(),
                                             strict=True))
            if any(a <= s <= b for a, b in ranges) and (types is None or t in types)]
    want = full.take(pa.array(keep, pa.int64()))
    assert got.column("seq").equals(want.column("seq")) and got.column("type").equals(want.column("type"))
    if snap.attrs:
        fields = got.column("attrs").combine_chunks().flatten()
        expect = {f.name: a for f, a in zip(want.column("attrs").type, want.column("attrs").combine_chunks()
                                            .flatten(), strict=True)}
        asked = names or list(snap.attrs)
        assert [f.name for f in got.schema.field("attrs").type] == [a for a in snap.attrs if a in asked]
        for field, values in zip(got.schema.field("attrs").type, fields, strict=True):
            assert same(values, expect[field.name]), field.name
    # a part whose seek file serves the attributes asked for touches only the rows in the ranges; any other
    # decodes the whole row groups the ranges meet
    asked = tuple(names or snap.attrs)
    expected = 0
    for part in snap.parts:
        inside = [(max(a, part.first_seq), min(b, part.last_seq)) for a, b in ranges
                  if a <= part.last_seq and part.first_seq <= b]
        if open_seek(root / "parts" / seek_name(part.file), part.rows).serves(asked):
            expected += sum(b - a + 1 for a, b in inside)
        else:
            expected += sum(hi - lo + 1 for lo, hi in part.row_groups if any(a <= hi and lo <= b for a, b in inside))
    assert decoded == expected


def test_a_part_whose_seek_file_cannot_serve_an_attribute_reads_parquet(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    stream = records_to_table([{"ts": i, "type": "AB"[i % 2],
                                "attrs": {"small": i % 5, "id": f"case-{i}-{'x' * 40}"}} for i in range(600)])
    store = EventStore.create(tmp_path / "s", stream, row_group_size=50, part_rows=300)
    part = store.snapshot().parts[0]
    seek = open_seek(tmp_path / "s" / "parts" / seek_name(part.file), part.rows)
    assert seek.serves(["small"]) and not seek.serves(["id"])  # 40+ bytes a row: over the budget
    calls: list[tuple[int, ...]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self: pq.ParquetFile, row_groups: list[int], *args: object, **kwargs: object) -> pa.Table:
        calls.append(tuple(row_groups))
        return real(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    got, decoded = store.read_ranges([(10, 12), (400, 401)], ["seq", "type", "attrs.small"])
    assert not calls and decoded == 5
    assert got.column("attrs").to_pylist() == [{"small": i % 5} for i in (10, 11, 12, 400, 401)]
    got, decoded = store.read_ranges([(10, 12), (400, 401)], ["seq", "type", "attrs.id"])
    assert calls == [(0,), (2,)] and decoded == 100  # one row group of 50 in each part
    assert got.column("attrs").to_pylist() == [{"id": f"case-{i}-{'x' * 40}"} for i in (10, 11, 12, 400, 401)]
