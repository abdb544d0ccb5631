"""Each kept event's next event in its partition, told from the seek files' codes
(:mod:`exact.store.links`), equals what the general path finds over a full read of the events
(:func:`exact.engine.ordering.partition_links`): over stores of several parts whose partition attribute is an
integer (narrow codes with each part's own base, nulls, ranges too wide to number), a string (each part's own
dictionary), a boolean, a double or all null, with appends of another kind, on random ranges and random kept
events."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exact.engine.ordering import partition_links
from exact.events import records_to_table
from exact.store import EventStore
from exact.store.links import store_partition_next

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KINDS = ("int", "wide_int", "string", "bool", "double", "null")


def values_of(draw: st.DrawFn, kind: str) -> st.SearchStrategy[Any]:
    if kind == "int":
        lo = draw(st.integers(-10**6, 10**6))
        return st.integers(lo, lo + draw(st.sampled_from([0, 3, 200, 70_000])))
    if kind == "wide_int":
        return st.integers(-(1 << 40), 1 << 40)
    if kind == "string":
        return st.sampled_from(draw(st.lists(st.text(max_size=3), min_size=1, max_size=6, unique=True)))
    if kind == "bool":
        return st.booleans()
    if kind == "double":
        return st.sampled_from([0.0, -0.0, 1.5, math.nan, -2.0])
    return st.none()


@st.composite
def batches(draw: st.DrawFn) -> tuple[str, list[list[dict]]]:
    """A stream in one to three batches; the first batch's kind of ``p``, sometimes another in a later one."""
    kind = draw(st.sampled_from(KINDS))
    out = []
    ts = 0
    for b in range(draw(st.integers(1, 3))):
        own = kind if b == 0 or draw(st.integers(0, 3)) else draw(st.sampled_from(KINDS))
        values = values_of(draw, own)
        if draw(st.booleans()):
            values = st.one_of(st.none(), values)
        batch = []
        for _ in range(draw(st.integers(1, 60))):
            value = draw(values)
            attrs = {} if value is None else {"p": value}
            batch.append({"ts": ts, "type": draw(st.sampled_from("AB")), "attrs": attrs})
            ts += 1
        out.append(batch)
    return kind, out


@SETTINGS
@given(stream=batches(), data=st.data())
def test_successors_from_the_codes_equal_those_of_a_full_read(tmp_path_factory: pytest.TempPathFactory,
                                                              stream: tuple[str, list[list[dict]]],
                                                              data: st.DataObject) -> None:
    kind, parts = stream
    root = tmp_path_factory.mktemp("store")
    first, *more = parts
    store = EventStore.create(root, records_to_table(first), row_group_size=data.draw(st.integers(1, 16)),
                              part_rows=data.draw(st.integers(3, 40)))
    for batch in more:
        store.append(records_to_table(batch))
    snap = store.snapshot()
    n = snap.events
    if "p" not in snap.attrs:
        return  # every value null: there is no attribute to partition by
    points = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=8)))
    if len(points) % 2:
        points.append(points[-1])
    ranges = [(a, b) for a, b in zip(points[::2], points[1::2], strict=True)]
    inside = np.asarray([s for a, b in ranges for s in range(a, b + 1)], dtype=np.int64)
    seqs = np.asarray(sorted(data.draw(st.sets(st.sampled_from(inside.tolist())))), dtype=np.int64)
    told = store_partition_next(store, ranges, ("p",), seqs)
    full, _ = store.read_frame(ranges, ["seq", "ts", "type", "attrs.p"])
    want = partition_links(full, ("p",), seqs)
    if told is not None:
        got, looked = told
        assert got.tolist() == want.tolist()
        assert looked == len(inside)
    # in one batch, the kinds the codes number are told so; the others are left to the full read
    if not more and kind in ("int", "string", "bool"):
        assert told is not None, kind


def test_doubles_and_several_attributes_are_left_to_a_full_read(tmp_path: Path) -> None:
    """-0.0 and 0.0 are one partition, and NaN's is decided as a read compares: the codes do not tell; nor
    do they a partition by two attributes."""
    stream = records_to_table([{"ts": i, "type": "A", "attrs": {"p": [0.0, -0.0, math.nan][i % 3], "q": i % 2}}
                               for i in range(30)])
    store = EventStore.create(tmp_path / "s", stream, part_rows=10)
    seqs = np.arange(30, dtype=np.int64)
    assert store_partition_next(store, [(0, 29)], ("p",), seqs) is None
    assert store_partition_next(store, [(0, 29)], ("q", "q"), seqs) is None
    told = store_partition_next(store, [(0, 29)], ("q",), seqs)
    assert told is not None and told[0].tolist() == [s + 2 if s < 28 else -1 for s in range(30)]


@SETTINGS
@given(stream=batches(), data=st.data())
def test_links_a_run_can_follow_are_those_of_the_whole_stream(tmp_path_factory: pytest.TempPathFactory,
                                                              stream: tuple[str, list[list[dict]]],
                                                              data: st.DataObject) -> None:
    """With a horizon per kept event (below its seq: no run goes on from it) and which ones a run may go on
    to, an event whose partition holds a later kept one at or before its horizon that a run may go on to is
    told its next event in the partition among every event of the stream (kept or not, read or not); the
    others are told -1 (a run from them goes on to no kept event within reach)."""
    kind, parts = stream
    root = tmp_path_factory.mktemp("store")
    first, *more = parts
    store = EventStore.create(root, records_to_table(first), row_group_size=data.draw(st.integers(1, 16)),
                              part_rows=data.draw(st.integers(3, 40)))
    for batch in more:
        store.append(records_to_table(batch))
    snap = store.snapshot()
    n = snap.events
    if "p" not in snap.attrs:
        return
    seqs = np.asarray(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=40))), dtype=np.int64)
    horizon = seqs + n
    joins = np.ones(len(seqs), dtype=bool)
    if data.draw(st.booleans()):  # (else every link is wanted)
        horizon = seqs + np.asarray(data.draw(st.lists(st.integers(-1, n), min_size=len(seqs),
                                                       max_size=len(seqs))), dtype=np.int64)
        joins = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(seqs), max_size=len(seqs))))
    told = store_partition_next(store, [(int(seqs[0]), int(seqs[-1]))], ("p",), seqs, horizon=horizon,
                                joins=joins)
    if not more and kind in ("int", "string", "bool"):
        assert told is not None, kind
    if told is None:
        return
    got, looked = told
    whole, _ = store.read_frame([(0, n - 1)], ["seq", "ts", "type", "attrs.p"])
    values = whole.array("p").to_pylist()
    truth = partition_links(whole, ("p",), seqs)  # the next event of each one's partition in the stream

    def key(seq: int) -> tuple[str, Any] | None:
        value = values[seq]
        return None if value is None else (type(value).__name__, value)

    want = []
    for i, s in enumerate(seqs.tolist()):
        later = [j for j in range(i + 1, len(seqs)) if key(s) is not None and key(int(seqs[j])) == key(s)]
        want.append(int(truth[i]) if later and seqs[later[0]] <= horizon[i] and joins[later[0]] else -1)
    assert got.tolist() == want
    assert len(seqs) <= looked <= len(seqs) + int(seqs[-1] - seqs[0]) + 1
