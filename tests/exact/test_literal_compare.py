"""A condition on a literal compares numbers exactly, also where a double cannot hold the literal: an integer
past 2**53 against a double attribute (the nearest double is not the literal), past int64 against an integer
one, and a double against integers past 2**53 — as Python compares an int with a float, which the
brute-force reference does.  Before, such a literal
raised from the Arrow cast: a server error on a user's query."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from exact.prefilter import _literal_mask
from tests.generators import OPS, scaled

BIG = st.one_of(st.integers(1 << 53, 1 << 80), st.integers(-(1 << 80), -(1 << 53)),
                st.sampled_from([(1 << 53) + 1, 1 << 63, -(1 << 63) - 1, 10**400, -(10**400)]))
DOUBLES = st.one_of(st.none(), st.floats(allow_nan=True), st.sampled_from([2.0**53, 2.0**53 + 2, 2.0**63, -0.0]))
INTS = st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1))


def truth(x: object, op: str, v: float) -> bool:
    if x is None:
        return False
    if isinstance(x, float) and math.isnan(x) or isinstance(v, float) and math.isnan(v):
        return op == "!="  # NaN equals nothing
    return {"=": x == v, "!=": x != v, "<": x < v, "<=": x <= v, ">": x > v, ">=": x >= v}[op]  # type: ignore[operator]


@scaled(100)
@given(doubles=st.lists(DOUBLES, max_size=12), ints=st.lists(INTS, max_size=12), value=BIG,
       op=st.sampled_from(OPS))
def test_a_big_integer_literal_compares_exactly(doubles: list, ints: list, value: int, op: str) -> None:
    for values, typ in ((doubles, pa.float64()), (ints, pa.int64())):
        got = _literal_mask(pa.array(values, typ), op, value).tolist()
        assert got == [truth(x, op, value) for x in values], (typ, op, value)


@scaled(100)
@given(ints=st.lists(st.one_of(INTS, st.sampled_from([(1 << 53) + 1, (1 << 63) - 1, -(1 << 63)])), max_size=12),
       value=st.one_of(st.floats(allow_nan=True), st.sampled_from([2.0**53, 2.0**63, -(2.0**63), 0.5, -0.0])),
       op=st.sampled_from(OPS))
def test_a_double_literal_compares_exactly_with_big_integers(ints: list, value: float, op: str) -> None:
    got = _literal_mask(pa.array(ints, pa.int64()), op, value).tolist()
    assert got == [truth(x, op, value) for x in ints], (op, value)
