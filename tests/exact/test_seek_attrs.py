"""Attribute columns of seek files: every value comes back exactly (NaN, -0.0, int64 extremes, nulls, empty and
non-ASCII strings), a read of attributes by ranges from seek files equals the Parquet read of the same rows,
the budget picks the cheapest attributes, a part whose seek file does not serve an attribute asked for is
read from Parquet instead, and the value indexes hand a filtered read every row its conditions keep."""

from __future__ import annotations

import functools
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
import exact.store.seek_format as seek_format
from exact.events import records_to_table
from exact.query.ast import Condition, Field, Literal
from exact.store import EventStore
from exact.store.rowfilter import Clause, RowFilter, SeekValues, index_candidates
from exact.store.seek import code_mask, open_seek
from exact.store.seek_attrs import DEFAULT_BUDGET, encode_attrs
from exact.store.seek_format import encode, seek_name, write_bytes
from tests.generators import OPS, scaled

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_I64 = (-(1 << 63), (1 << 63) - 1)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, math.nan, 1e308]))
STRINGS = st.one_of(st.text(max_size=6), st.sampled_from(["", "é", "A_SUBMITTED", "50000", "\u2603"]))


def column_values(draw: st.DrawFn, n: int) -> tuple[pa.DataType, list[Any]]:
    """One attribute's values over ``n`` rows: its type and its values, some null."""
    kind = draw(st.sampled_from(["small_int", "wide_int", "float", "decimal", "bool", "string", "null"]))
    values: st.SearchStrategy[Any]
    if kind == "small_int":
        lo = draw(st.integers(-10**6, 10**6))
        values, typ = st.integers(lo, lo + draw(st.sampled_from([0, 200, 60_000, 3 * 10**9]))), pa.int64()
    elif kind == "wide_int":
        values, typ = st.integers(*_I64), pa.int64()
    elif kind == "float":
        values, typ = FLOATS, pa.float64()
    elif kind == "decimal":  # (a few places: version 7 keeps them as integers of that scale; -0.0 keeps its sign)
        places = draw(st.integers(0, 8))
        top = draw(st.sampled_from([10, 10**6, 2**53]))
        values = st.one_of(st.integers(-top, top).map(lambda i, k=places: i / 10.0**k),
                           st.sampled_from([0.0, -0.0, 0.1, 1e15]))
        values, typ = values, pa.float64()
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
    version = data.draw(st.sampled_from([5, 6, 7, seek_format.VERSION]))  # (plain, ts packed, attributes
    # packed, dictionaries compressed)
    write_bytes(path, encode(np.arange(n, dtype=np.int64), pa.array(["A"] * n), struct, chosen=list(columns),
                             version=version))
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
    served, unserved, _, _ = encode_attrs(struct, n, budget=8.0)
    assert [e["name"] for e in served] == ["small", "flag"] and unserved == ["double", "unique"]
    served, unserved, _, _ = encode_attrs(struct, n, budget=10.0)
    assert [e["name"] for e in served] == ["small", "double", "flag"] and unserved == ["unique"]
    served, unserved, _, _ = encode_attrs(struct, n)
    assert DEFAULT_BUDGET >= 1 + 1 + 8 + 11 and len(served) == 4  # by default a few doubles are served
    served, unserved, _, _ = encode_attrs(struct, n, chosen=["double", "unique"])
    assert [e["name"] for e in served] == ["double", "unique"] and unserved == ["flag", "small"]
    served, unserved, _, _ = encode_attrs(struct, n, budget=100.0)
    assert len(served) == 4 and not unserved


def test_too_many_distinct_strings_are_not_served() -> None:
    n = 70_000
    struct = pa.StructArray.from_arrays([pa.array([str(i) for i in range(n)])], names=["id"])
    served, unserved, sections, _ = encode_attrs(struct, n, chosen=["id"])
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


@SETTINGS
@given(data=st.data())
def test_the_value_index_hands_on_every_row_a_condition_keeps(data: st.DataObject) -> None:
    """A read's candidates from the value indexes (version 5) hold every row of the ranges that the filter
    keeps by the engine's own test — over every kind of value (NaN, ±0.0, infinities, int64 extremes, strings,
    nulls), every comparison, literals of the column's kind and of others — and only rows of the ranges and of
    the clauses' types."""
    n = data.draw(st.integers(1, 300))
    types = ("A", "B", "C")
    type_col = pa.array([data.draw(st.sampled_from(types)) for _ in range(n)])
    columns = {f"c{i}": column_values(data.draw, n) for i in range(data.draw(st.integers(1, 3)))}
    struct = pa.StructArray.from_arrays([pa.array(v, t) for t, v in columns.values()], names=list(columns))
    seek = seek_format.parse_file(encode(np.arange(n, dtype=np.int64), type_col, struct, chosen=list(columns)))
    literals = st.one_of(st.integers(-3, 3), st.integers(*_I64), FLOATS, STRINGS, st.booleans())
    clauses = []
    for _ in range(data.draw(st.integers(1, 3))):
        conds = tuple(Condition(Field("v", data.draw(st.sampled_from(sorted(columns)))),
                                data.draw(st.sampled_from(OPS)), Literal(data.draw(literals)))
                      for _ in range(data.draw(st.integers(1, 2))))
        clauses.append(Clause(data.draw(st.sampled_from([None, frozenset("A"), frozenset("AB")])), conds))
    keep = RowFilter(tuple(clauses))
    cuts = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=8)))
    if len(cuts) % 2:
        cuts.append(n - 1)
    ranges = np.asarray(cuts, dtype=np.int64).reshape(-1, 2)  # (sorted, disjoint, inclusive)
    rows = np.concatenate([np.arange(a, b + 1) for a, b in ranges]).astype(np.int64)
    want = rows[keep.mask(len(rows), functools.partial(code_mask, seek.types, codes=seek.codes[rows]),
                          SeekValues(seek.attrs, seek.unserved, rows, {}))]
    got = index_candidates(keep, seek, ranges)
    if got is None:
        return  # (the index would hand on more rows than the ranges hold: the read tests them all)
    assert set(want.tolist()) <= set(got.tolist())
    assert set(got.tolist()) <= set(rows.tolist()) and np.all(np.diff(got) > 0)
    wanted = set().union(*(set(types) if c.types is None else c.types for c in clauses))
    assert all(seek.types[seek.codes[r]] in wanted for r in got.tolist())


def test_the_value_index_narrows_a_selective_condition() -> None:
    """On 20,000 rows of uniform values a 1 % range reads about 1 % of its type's rows, an equality of a
    string one value's rows — not every row of the type — and conditions on two attributes the rows both
    admit."""
    rng = np.random.default_rng(7)
    n = 20_000
    amounts = rng.integers(0, 100_000, n)
    names = rng.choice(np.asarray([f"r{i}" for i in range(50)]), n)
    struct = pa.StructArray.from_arrays([pa.array(amounts), pa.array(names)], names=["amount", "who"])
    seek = seek_format.parse_file(encode(np.arange(n, dtype=np.int64), pa.array(["A", "B"] * (n // 2)), struct))
    whole = np.asarray([[0, n - 1]], dtype=np.int64)
    for cond, fits in ((Condition(Field("v", "amount"), ">=", Literal(99_000)), amounts >= 99_000),
                       (Condition(Field("v", "who"), "=", Literal("r7")), names == "r7")):
        keep = RowFilter((Clause(frozenset("A"), (cond,)),))
        got = index_candidates(keep, seek, whole)
        assert got is not None
        exact = np.flatnonzero(fits & (np.arange(n) % 2 == 0))
        assert set(exact.tolist()) <= set(got.tolist())
        assert len(got) <= 2 * len(exact) + 100, (cond, len(got), len(exact))
    # a two-sided range (two conditions on one attribute) and an equality on another: the rows of the range's
    # buckets that the equality's bucket holds too — a handful, not the 1 % of the range alone
    conds = (Condition(Field("v", "amount"), ">=", Literal(40_000)), Condition(Field("v", "amount"), "<=",
                                                                             Literal(41_000)),
             Condition(Field("v", "who"), "=", Literal("r7")))
    got = index_candidates(RowFilter((Clause(frozenset("A"), conds),)), seek, whole)
    assert got is not None
    exact = np.flatnonzero((amounts >= 40_000) & (amounts <= 41_000) & (names == "r7") & (np.arange(n) % 2 == 0))
    assert set(exact.tolist()) <= set(got.tolist()) and len(got) <= len(exact) + 20, (len(got), len(exact))


@pytest.mark.parametrize("lo_row", [0, 1_000])
@pytest.mark.parametrize("least", [0.6, 0.97])  # the double's bound wider, then narrower, than the range
def test_a_clause_on_two_indexed_attributes_keeps_the_rows_in_both_ranges_of_buckets(lo_row: int, least: float
                                                                                    ) -> None:
    """An integer range (values offset from 0, some null) and a double bound (some NaN) on one type: the rows
    handed on are those of the type whose buckets lie in both attributes' ranges — the rows the index itself
    files under those buckets — each once, in order; in a part read as a whole and as a slice."""
    rng = np.random.default_rng(3)
    n = 6_000
    x = rng.integers(1_000, 3_000, n).astype(object)
    x[rng.random(n) < 0.1] = None
    y = rng.random(n)
    y[rng.random(n) < 0.1] = np.nan
    struct = pa.StructArray.from_arrays([pa.array(list(x), pa.int64()), pa.array(y)], names=["x", "y"])
    types = pa.array(rng.choice(["A", "B"], n).tolist())
    seek = seek_format.parse_file(encode(np.arange(n, dtype=np.int64), types, struct, chosen=["x", "y"]))
    conds = (Condition(Field("v", "x"), ">=", Literal(1_500)), Condition(Field("v", "x"), "<=", Literal(1_700)),
             Condition(Field("v", "y"), ">=", Literal(least)))
    keep = RowFilter((Clause(frozenset("A"), conds),))
    code = seek.types.index("A")

    def filed(attr: str, op_lo: float, op_hi: float) -> set[int]:
        index = seek.attrs[attr].index
        lo, hi = index.bucket(op_lo), index.bucket(op_hi) if op_hi < math.inf else index.width - 2
        a, b = index.span(code, lo, hi)
        return set(index.rows_in(a, b).tolist())

    expected = filed("x", 1_500, 1_700) & filed("y", least, math.inf)
    ranges = np.asarray([[lo_row, n - 1]], dtype=np.int64)
    got = index_candidates(keep, seek, ranges)
    assert got is not None and np.all(np.diff(got) > 0)
    assert set(got.tolist()) == {r for r in expected if r >= lo_row}
    fits = [r for r in range(lo_row, n) if types[r].as_py() == "A" and x[r] is not None and 1_500 <= x[r] <= 1_700
            and y[r] >= least]
    assert fits and set(fits) <= set(got.tolist())


@scaled(60)
@given(data=st.data())
def test_numeric_values_over_parts_are_each_parts_values_joined(data: st.DataObject) -> None:
    """A numeric attribute decoded over several parts at once (narrow codes with a base and nulls, raw
    int64 beyond a narrow width, doubles with NaN and nulls, a part without the attribute) equals each
    part's own values joined; a type it does not decode is refused (None)."""
    from exact.store.seek_attrs import numeric_values

    kind = data.draw(st.sampled_from([pa.int64(), pa.float64()]))
    values = (st.one_of(st.none(), st.integers(-2**62, 2**62), st.integers(1_000, 1_020)) if kind == pa.int64()
              else st.one_of(st.none(), FLOATS))
    parts, expected = [], []
    for _ in range(data.draw(st.integers(1, 4))):
        n = data.draw(st.integers(1, 12))
        rows = np.asarray(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=np.int64)
        if data.draw(st.booleans()) and len(parts):
            parts.append((None, rows))
            expected.append(pa.nulls(len(rows), kind))
            continue
        if kind == pa.int64() and data.draw(st.booleans()):
            column_values = [data.draw(st.one_of(st.none(), st.integers(1_000, 1_020))) for _ in range(n)]
        else:
            column_values = [data.draw(values) for _ in range(n)]
        struct = pa.StructArray.from_arrays([pa.array(column_values, kind)], names=["a"])
        seek = seek_format.parse_file(encode(np.arange(n, dtype=np.int64), pa.array(["A"] * n), struct, chosen=["a"]))
        column = seek.attrs.get("a")
        parts.append((column, rows))
        expected.append(pa.nulls(len(rows), kind) if column is None else column.values(rows).cast(kind))
    got = numeric_values(parts, kind)
    assert got is not None
    assert got.type == kind
    want = pa.concat_arrays(expected)
    assert got.is_null().to_pylist() == want.is_null().to_pylist()
    same = [a == b or (a != a and b != b) for a, b in zip(got.to_pylist(), want.to_pylist(), strict=True)
            if a is not None]
    assert all(same)
    if kind == pa.float64():  # -0.0 and NaN kept bit for bit
        assert np.array_equal(np.asarray(got.fill_null(0.0)).view(np.int64),
                              np.asarray(want.fill_null(0.0)).view(np.int64))
    assert numeric_values(parts, pa.string()) is None


@SETTINGS
@given(data=st.data())
def test_in_buckets_tells_the_rows_the_index_files_under_a_range_of_buckets(data: st.DataObject) -> None:
    """A row is in buckets ``lo … hi`` by ``in_buckets`` exactly when the index files it there: its value as
    the float64 the index was built from, bucketed by the edges, null and NaN in the null bucket — for narrow
    integers with small and with huge bases, raw integers, doubles (NaN, ±0.0, infinities), strings, nulls."""
    n = data.draw(st.integers(1, 200))
    typ, values = column_values(data.draw, n)
    if typ == pa.int64() and data.draw(st.booleans()):  # a narrow column far from 0 (float64 inexact there)
        base = data.draw(st.sampled_from([1 << 53, -(1 << 62), (1 << 52) - 7]))
        values = [None if v is None else base + abs(v) % 1_000 for v in values]
    struct = pa.StructArray.from_arrays([pa.array(values, typ)], names=["x"])
    types = pa.array([data.draw(st.sampled_from(["A", "B"])) for _ in range(n)])
    seek = seek_format.parse_file(encode(np.arange(n, dtype=np.int64), types, struct, chosen=["x"]))
    column = seek.attrs.get("x")
    if column is None or column.index is None:
        return  # (not served, or a kind without an index: bool, null)
    index = column.index
    exact_values = np.asarray([math.nan if v is None else float(column.values(np.asarray([r])).to_pylist()[0]
                                                              if column.kind != "string" else
                                                              column.code_of[v])
                               for r, v in enumerate(values)], dtype=np.float64)
    if column.kind == "int64":  # the index's value of a narrow code is code + base, each as float64
        codes = np.asarray(column.codes).astype(np.float64)
        exact_values = np.where(np.isnan(exact_values), np.nan,
                                codes + float(column.base) if column.null is not None else codes)
    filed = np.searchsorted(index.edges, exact_values, "right")
    filed[np.isnan(exact_values)] = index.width - 1
    rows = np.asarray(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1))), dtype=np.int64)
    lo = data.draw(st.integers(0, index.width - 2))
    hi = data.draw(st.integers(0, index.width - 2))
    got = column.in_buckets(rows, lo, hi)
    assert got.tolist() == ((filed[rows] >= lo) & (filed[rows] <= hi)).tolist()


def test_a_double_of_few_decimal_places_is_kept_at_its_scale_and_others_as_they_are() -> None:
    from exact.store.seek_attrs import _decimal_scale

    assert _decimal_scale(np.asarray([1.25, 3.5, -7.0])) == 2
    assert _decimal_scale(np.asarray([0.1, 0.2, 0.3])) == 1
    assert _decimal_scale(np.asarray([3.0, 1e15])) == 0
    for kept_whole in ([-0.0, 1.0], [math.nan], [math.inf], [1e300], [0.1234567], [2.0**53 + 2], [1 / 3]):
        assert _decimal_scale(np.asarray(kept_whole)) is None, kept_whole
    rng = np.random.default_rng(5)
    amounts = np.round(rng.uniform(0, 10_000, 5000), 2)
    struct = pa.StructArray.from_arrays([pa.array(amounts), pa.array(rng.uniform(0, 1, 5000))], names=["amount", "x"])
    packed = encode(np.arange(5000, dtype=np.int64), pa.array(["A"] * 5000), struct, chosen=["amount", "x"])
    plain = encode(np.arange(5000, dtype=np.int64), pa.array(["A"] * 5000), struct, chosen=["amount", "x"], version=6)
    sizes = {v: seek_format.served_bytes(d) for v, d in (("packed", packed), ("plain", plain))}
    assert sizes["packed"]["amount"] < 0.8 * sizes["plain"]["amount"]  # (20 bits a value where 64 were)
    assert sizes["packed"]["x"] < sizes["plain"]["x"]  # (its value index's rows packed; its values not)
