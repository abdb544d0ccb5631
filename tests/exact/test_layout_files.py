"""Partition layout files: the packed layout (version 3) and the plain one a dataset written before holds
(version 2) read back equal to the layout built, on random streams (groups of one event, events without a
key, many types, a stream starting after a retention); a damaged packed section is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exact.errors import StoreCorrupt
from exact.events import records_to_table
from exact.store.grouping import build_layout, load_layout, write_layout

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ARRAYS = ("group_of", "order", "group_off", "type_off", "type_codes", "type_counts")


@st.composite
def streams(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(1, 400))
    groups = draw(st.integers(1, 60))
    types = draw(st.integers(1, 70))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    keyless = draw(st.floats(0, 0.3))
    records = [{"ts": i, "type": f"T{int(rng.integers(0, types))}",
                "attrs": {} if rng.random() < keyless else {"case": f"c{int(rng.integers(0, groups))}"}}
               for i in range(n)]
    records[0]["attrs"] = {"case": "c0"}  # (some event has the key)
    table = records_to_table(records)
    first = draw(st.integers(0, 3))  # (a stream kept after a retention starts later)
    return table.set_column(0, "seq", pa.array(np.arange(first, first + n), pa.int64())) if first else table


@SETTINGS
@given(table=streams(), file_version=st.sampled_from([2, 3]))
def test_a_layout_file_reads_back_as_built(tmp_path_factory: pytest.TempPathFactory, table: pa.Table,
                                           file_version: int) -> None:
    folder = tmp_path_factory.mktemp("layout")
    built = build_layout(table, "case")
    entry = write_layout(folder, built, 1, file_version=file_version)
    read = load_layout(folder / entry["file"])
    for name in ARRAYS:
        assert np.asarray(getattr(read, name)).tolist() == np.asarray(getattr(built, name)).tolist(), name
        assert np.asarray(getattr(read, name)).dtype == np.asarray(getattr(built, name)).dtype, name
    assert (read.key, read.events, read.types, read.keys.to_pylist()) == \
        (built.key, built.events, built.types, built.keys.to_pylist())


def test_packed_sections_are_smaller_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    records = [{"ts": i, "type": f"T{int(rng.integers(0, 20))}", "attrs": {"case": f"c{int(rng.integers(0, 500))}"}}
               for i in range(20_000)]
    built = build_layout(records_to_table(records), "case")
    plain = write_layout(tmp_path, built, 1, file_version=2)
    packed = write_layout(tmp_path, built, 2)
    assert packed["bytes"] < 0.6 * plain["bytes"]
    path = tmp_path / packed["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "layout-000009-damaged.sqpl"
    damaged.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt):
        load_layout(damaged)


@SETTINGS
@given(table=streams(), k=st.integers(1, 4), data=st.data())
def test_the_events_after_an_event_in_its_group_are_found_in_its_group_alone(table: pa.Table, k: int,
                                                                             data: st.DataObject) -> None:
    """``Layout.following`` (what ``RETURN next k`` reads under the layout's key) equals the definition:
    the next ``k`` events of the same case in stream order, by a walk of the whole stream."""
    layout = build_layout(table, "case")
    seqs = table.column("seq").to_pylist()
    cases = [a.get("case") if a else None for a in table.column("attrs").to_pylist()]
    kinds = table.column("type").to_pylist()
    ends = data.draw(st.lists(st.sampled_from(seqs), min_size=1, max_size=20))
    after, codes = layout.following(np.asarray(ends, dtype=np.int64), k)
    for i, end in enumerate(ends):
        at = seqs.index(end)
        mine = [j for j in range(at + 1, len(seqs)) if cases[at] is not None and cases[j] == cases[at]][:k]
        assert after[i].tolist() == [seqs[j] for j in mine] + [-1] * (k - len(mine)), (end, i)
        assert [layout.types[c] for c in codes[i] if c >= 0] == [kinds[j] for j in mine]
