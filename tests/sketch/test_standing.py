"""Standing queries against the brute-force reference: random streams appended in random batches, the certain
matches drained after each append — together, exactly the reference's matches whose windows have closed, in
answer order, none twice; resuming from any delivered match's cursor gives exactly the rest."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from exact.errors import QuerySemanticError
from exact.query.ast import Query, Return, WithinEvents, WithinTime
from exact.query.language import parse
from exact.reference import reference_matches, stream_table
from exact.store import EventStore, dataset_dir, store_dir
from sketch.answer.standing import Cursor, Standing, check_standing
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from tests.generators import engine_queries, keyed_streams, scaled

TINY = BuildOptions(leaf_size=2, fpq=0.9)


def table_of(rows: list[dict], first_seq: int = 0) -> pa.Table:
    return stream_table([{"seq": first_seq + i, **r} for i, r in enumerate(rows)])


def windowed(query: Query, within: WithinEvents | WithinTime) -> Query:
    return dataclasses.replace(query, within=query.within or within, returns=Return.MATCHES)


def key(match: dict) -> tuple:
    return match["start_seq"], match["end_seq"], tuple(sorted((k, tuple(v)) for k, v in match["bindings"].items()))


def drain(standing: Standing, cursor: Cursor) -> tuple[list[tuple[Cursor, dict]], Cursor]:
    snap = standing.store.snapshot()
    upto = standing.frontier(snap)
    got = list(standing.matches(snap, cursor, upto))
    return got, Cursor(max(upto, cursor.start), 0 if upto > cursor.start else cursor.skip)


@scaled(40, HealthCheck.function_scoped_fixture)
@given(rows=keyed_streams(), more=st.lists(keyed_streams(6), min_size=1, max_size=4), data=st.data())
def test_standing_matches_are_the_reference_once_each(rows: list[dict], more: list[list[dict]],
                                                      data: st.DataObject) -> None:
    within = data.draw(st.one_of(st.builds(WithinEvents, st.integers(2, 6)),
                                 st.builds(WithinTime, st.integers(0, 4))))
    query = windowed(data.draw(engine_queries()), within)
    home = Path(tempfile.mkdtemp(prefix="seqsketch-standing-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        dataset = Dataset.open(home, "d")
        standing = Standing(EventStore.open(store_dir(dataset_dir("d", home))), query)
        every = list(rows)
        delivered: list[tuple[Cursor, dict]] = []
        cursor = Cursor(0)
        try:
            got, cursor = drain(standing, cursor)
        except QuerySemanticError as refused:  # a comparison of kinds the dataset cannot hold: refused alike
            assert "in this dataset" in str(refused)
            return
        delivered += got
        for batch in more:
            shifted = [{**r, "ts": r["ts"] + every[-1]["ts"]} for r in batch]  # ties the last ts at first
            dataset.append(table_of(shifted).drop_columns(["seq"]))
            every += shifted
            got, cursor = drain(standing, cursor)
            delivered += got
        frontier = standing.frontier(standing.store.snapshot())
        expected = [m for m in sorted(reference_matches(query, table_of(every))) if m.start_seq < frontier]
        assert [key(m) for _, m in delivered] == [
            (m.start_seq, m.end_seq, tuple(sorted((n, tuple(s)) for n, s in m.bindings))) for m in expected], query
        if delivered:  # resuming after any delivered match gives exactly the rest
            j = data.draw(st.integers(0, len(delivered) - 1))
            rest = list(standing.matches(standing.store.snapshot(), delivered[j][0], frontier))
            assert [key(m) for _, m in rest] == [key(m) for _, m in delivered[j + 1:]]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_standing_query_needs_within() -> None:
    with pytest.raises(QuerySemanticError, match="needs WITHIN"):
        check_standing(parse("PATTERN SEQ(A a, B b)"))
    with pytest.raises(QuerySemanticError, match="not a cursor"):
        Cursor.parse("12")
    assert Cursor.parse("12:3") == Cursor(12, 3) and Cursor(12, 3).text() == "12:3"
