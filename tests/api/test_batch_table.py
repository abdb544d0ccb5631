"""A feed's batch is converted a column at a time (``batch_table``); held to the record-at-a-time conversion
on random batches: whenever the columnar one answers, its table is the one the records make, and a batch the
record-at-a-time checks refuse is never answered by it (it leaves the batch to them, which name the record)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.service.batches import batch_table, check_attr_kinds, records_for_append
from exact.errors import InputError
from exact.events import records_to_table

#: values an attribute may take in JSON: the kinds mixed, edges of each
SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4),
    st.integers(min_value=-(1 << 64), max_value=1 << 64),
    st.sampled_from([0, 1, -1, (1 << 53) + 1, -(1 << 63), (1 << 63) - 1, 1 << 63]),
    st.floats(allow_nan=False, allow_infinity=False, width=64), st.sampled_from([0.5, -0.0, 1e300, 2.5]))
TIMES = st.one_of(
    st.floats(min_value=-1e11, max_value=3e11, allow_nan=False),
    st.integers(min_value=-10**11, max_value=10**11),
    st.sampled_from([0.0000005, 1.0000015, 1_700_000_000.123456, 8_999_999_999.9999995, "2024-02-29T12:00:00Z",
                     "2024-02-29 12:00:00+02:00", "1700000000.25", "not a time", True, None]))
STORED = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["string", "int64", "double", "bool"]),
                         max_size=3)


#: an attribute's values within one batch: mostly of one kind, as a feed sends them, or any mix
COLUMN_KINDS = {"str": st.none() | st.text(max_size=4), "int": st.none() | st.integers(-(1 << 63), (1 << 63) - 1),
                "float": st.floats(allow_nan=False, allow_infinity=False, width=64), "bool": st.booleans(),
                "number": st.integers(-(1 << 54), 1 << 54) | st.floats(-1e6, 1e6), "any": SCALARS}


@st.composite
def batches(draw: Any) -> list[dict[str, Any]]:
    """Batches of records with the same fields (the ones converted at once), and now and then one that
    differs."""
    n = draw(st.integers(1, 6))
    top = draw(st.lists(st.sampled_from(["a", "b", "seq"]), unique=True, max_size=2))
    nested = draw(st.none() | st.lists(st.sampled_from(["a", "c"]), unique=True, max_size=2))
    same_times = draw(st.sampled_from(["float", "int", "any"]))
    kind_of = {"float": st.floats(min_value=0, max_value=9e9), "int": st.integers(0, 10**10), "any": TIMES}
    values = {name: COLUMN_KINDS[draw(st.sampled_from(sorted(COLUMN_KINDS)))] for name in ["a", "b", "c", "seq"]}
    records = []
    for _ in range(n):
        rec: dict[str, Any] = {"type": draw(st.sampled_from(["A", "B"])), "ts": draw(kind_of[same_times])}
        for name in top:
            rec[name] = draw(values[name])
        if nested is not None:
            rec["attrs"] = {name: draw(values[name]) for name in nested}
        records.append(rec)
    if draw(st.integers(0, 9)) == 0:
        records[-1]["extra"] = 1
    if draw(st.integers(0, 9)) == 0:
        records[0]["type"] = ""
    return records


def careful(records: list[dict[str, Any]], stored: dict[str, str]) -> Any:
    stream = records_for_append(records)
    check_attr_kinds(stream, stored)
    return records_to_table(stream, first_seq=None, where="events")


@settings(max_examples=400, deadline=None)
@given(batches(), STORED)
def test_a_batch_converted_at_once_equals_one_converted_record_by_record(records: list[dict[str, Any]],
                                                                        stored: dict[str, str]) -> None:
    fast = batch_table(records, stored)
    try:
        expected = careful(records, stored)
    except InputError:
        assert fast is None  # refused: left to the checks that name the record
        return
    if fast is not None:
        assert fast.schema == expected.schema and fast.equals(expected)


def test_a_plain_feed_batch_is_converted_at_once() -> None:
    records = [{"type": "T1", "ts": 1_700_000_000.5 + i, "case": f"c{i % 3}", "amount": i} for i in range(50)]
    table = batch_table(records, {"amount": "int64", "case": "string"})
    assert table is not None and table.equals(careful(records, {"amount": "int64", "case": "string"}))
    nested = [{"type": "T1", "ts": "2024-01-01T00:00:00Z", "attrs": {"x": 1.5, "y": None}}] * 3
    table = batch_table(nested, {})
    assert table is not None and table.equals(careful(nested, {}))


@pytest.mark.parametrize("records", [
    [{"type": "A", "ts": 1.0}, {"type": "A", "ts": 2.0, "x": 1}],  # fields differ
    [{"type": "A", "ts": 1.0, "x": 1, "attrs": {"x": 1}}],  # given twice
    [{"type": "A", "ts": 1.0, "x": (1 << 53) + 1}, {"type": "A", "ts": 2.0, "x": 0.5}],  # inexact beside floats
    [{"type": "A", "ts": 1, "x": 1}, {"type": "A", "ts": 2.5, "x": 2}],  # ts of two kinds
])
def test_batches_left_to_the_record_by_record_path(records: list[dict[str, Any]]) -> None:
    assert batch_table(records, {}) is None
