"""``RETURN cases`` and the columnar answer, held to the brute-force reference on random keyed streams.

A case's expected row is made here from the reference's matches (the definition's, in answer order): the
partition value of each match's first event, grouped in the order of first matches, counted.  The columnar
rows (an Arrow table) must say what the JSON answer says, row for row, in every mode that answers exactly —
through the partition layout, its tail of appended events, and the stream index."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from api.formats import arrow_stream, json_lines, split_answer
from api.service import run_query
from exact.engine import answer, evaluate_table
from exact.engine.answer_columns import python_values, rows_json
from exact.engine.matchtable import match_times
from exact.errors import QuerySemanticError
from exact.query.ast import Query, Return
from exact.query.language import parse
from exact.reference import reference_matches, stream_table
from sketch.answer.cases import case_lookup
from sketch.answer.event_sources import TableSource
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from tests.generators import engine_queries, keyed_streams, scaled

TINY = BuildOptions(leaf_size=2, fpq=0.9)
SETTINGS = scaled(30, HealthCheck.function_scoped_fixture)


def table_of(rows: list[dict], first_seq: int = 0) -> pa.Table:
    return stream_table([{"seq": first_seq + i, **r} for i, r in enumerate(rows)])


def per_case(query: Query) -> Query:
    return dataclasses.replace(query, partition_by=("case",) + tuple(p for p in query.partition_by if p != "case"))


def expected_cases(query: Query, rows: list[dict]) -> list[dict[str, Any]]:
    """The cases of the reference's matches, straight from the definition of RETURN cases."""
    table = table_of(rows)
    by_seq = {i: r for i, r in enumerate(rows)}
    out: dict[Any, dict[str, Any]] = {}
    for m in sorted(reference_matches(query, table)):
        first = by_seq[m.start_seq]
        values = tuple(first.get(a) for a in query.partition_by)
        key = values[0] if len(values) == 1 else dict(zip(query.partition_by, values, strict=True))
        hashable = values
        if hashable not in out:
            out[hashable] = {"case": key, "matches": 0, "start_seq": m.start_seq, "end_seq": m.end_seq}
        out[hashable]["matches"] += 1
    return list(out.values())


def without_ts(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k not in ("start_ts", "end_ts")} for c in cases]


def _refused(home: Path, query: Query) -> bool:
    try:
        run_query(home, "d", query, mode="exact")
    except QuerySemanticError as refused:
        assert "in this dataset" in str(refused), refused
        return True
    return False


def check(home: Path, query: Query, rows: list[dict]) -> None:
    cases_query = dataclasses.replace(query, returns=Return.CASES)
    if _refused(home, cases_query):
        return
    expected = expected_cases(cases_query, rows)
    for mode in ("exact", "verified"):
        got = run_query(home, "d", cases_query, mode=mode)
        assert without_ts(got["cases"]) == expected, (mode, cases_query)
        assert got["case_count"] == len(expected) and not got["truncated"]
        assert got["count"] == sum(c["matches"] for c in expected)
        columnar = run_query(home, "d", cases_query, mode=mode, columnar=True)
        assert rows_json(columnar["rows"]) == got["cases"], mode
        if expected:  # a limit cuts cases, not matches: the count stays whole
            head = run_query(home, "d", cases_query, mode=mode, limit=1)
            assert without_ts(head["cases"]) == expected[:1]
            assert head["count"] == got["count"] and head["truncated"] == (len(expected) > 1)
    matches_query = dataclasses.replace(query, returns=Return.MATCHES)
    for mode in ("exact", "verified"):
        listed = run_query(home, "d", matches_query, mode=mode)
        columnar = run_query(home, "d", matches_query, mode=mode, columnar=True)
        assert rows_json(columnar["rows"]) == listed["matches"], (mode, matches_query)
        for m in listed["matches"]:  # each match's case is its first event's partition value
            first = rows[m["start_seq"]]
            values = [first.get(a) for a in query.partition_by]
            assert m["case"] == (values[0] if len(values) == 1 else dict(zip(query.partition_by, values,
                                                                              strict=True)))


@SETTINGS
@given(rows=keyed_streams(), more=st.lists(keyed_streams(6), max_size=2), data=st.data())
def test_cases_and_columns_equal_the_reference(rows: list[dict], more: list[list[dict]],
                                               data: st.DataObject) -> None:
    home = Path(tempfile.mkdtemp(prefix="seqsketch-cases-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        dataset = Dataset.open(home, "d")
        every = list(rows)
        check(home, per_case(data.draw(engine_queries())), every)
        for batch in more:  # appended events: a tail the layout does not cover, new cases among them
            shifted = [{**r, "ts": r["ts"] + every[-1]["ts"] + 1} for r in batch]
            dataset.append(table_of(shifted).drop_columns(["seq"]))
            every += shifted
            check(home, per_case(data.draw(engine_queries())), every)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@scaled(60)
@given(rows=keyed_streams(), data=st.data())
def test_the_engine_groups_cases_as_the_definition(rows: list[dict], data: st.DataObject) -> None:
    """Straight from the engine over an in-memory table, also with two partition attributes (a case is then
    their values together)."""
    query = data.draw(engine_queries())
    attrs = data.draw(st.sampled_from([("case",), ("case", "k")]))
    query = dataclasses.replace(query, partition_by=attrs, returns=Return.CASES)
    table = table_of(rows)
    try:
        found = evaluate_table(query, table)
    except QuerySemanticError:
        return
    got = answer(query, found, match_times(table, found), case_of=case_lookup(query, TableSource(table)))
    assert without_ts(got["cases"]) == expected_cases(query, rows), query


def test_return_cases_needs_partition_by() -> None:
    with pytest.raises(QuerySemanticError, match="RETURN cases needs PARTITION BY") as err:
        parse("PATTERN SEQ(A a, B b)\nRETURN cases")
    assert (err.value.line, err.value.column) == (2, 8)


def test_columns_of_kleene_or_and_bound_events(tmp_path: Path) -> None:
    """A Kleene variable is a list column, an OR alternative that did not bind is null; bound events come as
    ``<var>.type`` and ``<var>.attrs.<name>`` columns, and every form says what the JSON answer says."""
    from api.service.queries import limited_query

    rows = [{"ts": i, "type": t, "case": c, "x": i}
            for i, (t, c) in enumerate(zip("ABBCABDC", ["p", "p", "p", "p", "q", "q", "q", "q"], strict=True))]
    Dataset.build(tmp_path, "d", table_of(rows), TINY)
    query = "PATTERN SEQ(A a, B+ b, OR(C c, D d)) PARTITION BY case"
    listed = limited_query(tmp_path, "d", query, mode="verified", include_events=True)
    columnar = limited_query(tmp_path, "d", query, mode="verified", include_events=True, columnar=True)
    table = columnar["rows"]
    assert pa.types.is_list(table.schema.field("b.seq").type)
    assert pa.types.is_timestamp(table.schema.field("b.ts").type.value_type)
    assert table.column("c.seq").to_pylist() == [3, None] and table.column("d.seq").to_pylist() == [None, 6]
    assert table.column("b.seq").to_pylist() == [[1, 2], [5]]
    assert table.column("b.attrs.x").to_pylist() == [[1, 2], [5]]
    assert table.column("a.type").to_pylist() == ["A", "A"]
    assert table.column("case").to_pylist() == ["p", "q"]
    assert rows_json(table) == listed["matches"]
    head, rows_back = split_answer(columnar)
    assert head["rows"] == "matches" and head["count"] == 2 and "matches" not in head
    stream = pa.ipc.open_stream(arrow_stream(columnar)).read_all()
    assert stream.equals(table.replace_schema_metadata(stream.schema.metadata))
    lines = b"".join(json_lines(columnar)).decode().splitlines()
    import json

    assert json.loads(lines[0])["count"] == 2
    assert [json.loads(line) for line in lines[1:]] == listed["matches"]


_SCALARS = {
    pa.int64(): st.integers(-2**63, 2**63 - 1),
    pa.float64(): st.floats(allow_nan=True, allow_infinity=True),
    pa.string(): st.text(max_size=6),
    pa.bool_(): st.booleans(),
}


@given(data=st.data())
@SETTINGS
def test_python_values_are_what_to_pylist_gives(data: st.DataObject) -> None:
    """The answer's values made column-wise (dictionary decoded by a take, NumPy where there are no nulls)
    equal Arrow's own ``to_pylist``, for plain, dictionary and chunked arrays with and without nulls."""
    typ = data.draw(st.sampled_from(list(_SCALARS)))
    values = data.draw(st.lists(st.one_of(st.none(), _SCALARS[typ]) if data.draw(st.booleans())
                                else _SCALARS[typ], max_size=20))
    array = pa.array(values, typ)
    if typ != pa.bool_() and data.draw(st.booleans()):
        array = array.dictionary_encode()
    chunked = pa.chunked_array([array[:len(values) // 2], array[len(values) // 2:]], array.type)
    expected = array.to_pylist()
    for form in (array, chunked):
        got = python_values(form)
        assert [repr(v) for v in got] == [repr(v) for v in expected]  # (repr: NaN equal, -0.0 told apart)
        assert [type(v) for v in got] == [type(v) for v in expected]
