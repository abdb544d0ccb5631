"""The event store: exact round trips, range reads that open only the row groups they need (checked against
the Parquet files' own metadata), all-or-nothing appends, schema evolution and atomic publication."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import exact.store.seek as seek_module
from exact.errors import Conflict, InputError, NotFound, StoreCorrupt
from exact.events import SEQ, micros, records_to_table, to_records
from exact.ingest import ingest, ingest_tables
from exact.store import (
    MANIFEST,
    PARTS,
    TYPE_DICTIONARY,
    EventStore,
    check_dataset_name,
    dataset_names,
    staged_dataset,
)
from exact.store.manifest import REMOVED_GRACE_S
from exact.store.seek import open_seek
from exact.store.seek_format import seek_name
from tests.generators import scaled

SETTINGS = scaled(25, HealthCheck.function_scoped_fixture)


@st.composite
def streams(draw: st.DrawFn, min_size: int = 1, max_size: int = 120) -> pa.Table:
    """A stream table (seq from 0) with ties in ts and a few typed attributes, some absent."""
    n = draw(st.integers(min_size, max_size))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    ts, t = [], 1_600_000_000_000_000
    for g in gaps:
        t += g
        ts.append(t)
    recs = []
    for i in range(n):
        attrs = {}
        if draw(st.booleans()):
            attrs["k"] = draw(st.integers(-5, 5))
        if draw(st.booleans()):
            attrs["s"] = draw(st.sampled_from(["x", "y"]))
        recs.append({"ts": ts[i], "type": draw(st.sampled_from("ABC")), "attrs": attrs})
    return records_to_table(recs)


def open_groups(store: EventStore, start: int, end: int) -> set[tuple[str, int]]:
    return {(part.file, g) for part, groups in store.plan(start, end) for g in groups}


def groups_by_metadata(root: Path, start: int, end: int) -> set[tuple[str, int]]:
    """Row groups whose seq statistics (from the Parquet footer) overlap ``[start, end]``."""
    out: set[tuple[str, int]] = set()
    if start > end:
        return out
    for path in sorted((root / PARTS).glob("part-*.parquet")):
        md = pq.ParquetFile(path).metadata
        col = md.schema.to_arrow_schema().get_field_index(SEQ)
        for g in range(md.num_row_groups):
            stats = md.row_group(g).column(col).statistics
            if stats.min <= end and stats.max >= start:
                out.add((path.name, g))
    return out


@SETTINGS
@given(stream=streams(), data=st.data())
def test_round_trip_and_range_reads(tmp_path_factory: pytest.TempPathFactory, stream: pa.Table,
                                    data: st.DataObject) -> None:
    root = tmp_path_factory.mktemp("store")
    store = EventStore.create(root, stream, row_group_size=data.draw(st.integers(1, 16)),
                              part_rows=data.draw(st.integers(5, 60)))
    assert store.read_table().equals(stream)
    n = stream.num_rows
    start = data.draw(st.integers(-2, n + 2))
    end = data.draw(st.integers(start - 1, n + 3))
    lo, hi = max(start, 0), min(end, n - 1)
    got = store.read_table(start, end)
    assert got.equals(stream.slice(lo, max(hi - lo + 1, 0)))
    assert open_groups(store, start, end) == groups_by_metadata(root, start, end)
    only = store.read_table(start, end, columns=["seq", "type"])
    assert only.column_names == ["seq", "type"]
    assert only.column("type").equals(got.column("type"))
    encoded = store.read_table(start, end, type_dictionary=True)
    assert encoded.schema.field("type").type == TYPE_DICTIONARY
    assert decoded_types(encoded).equals(got)


def decoded_types(table: pa.Table) -> pa.Table:
    """``table`` with a dictionary-encoded ``type`` decoded to strings."""
    at = table.column_names.index("type")
    return table.set_column(at, table.schema.field("type").with_type(pa.string()),
                            table.column("type").cast(pa.string()))


@SETTINGS
@given(stream=streams(min_size=2), data=st.data())
def test_reads_of_many_ranges_equal_the_rows_they_name(tmp_path_factory: pytest.TempPathFactory,
                                                       stream: pa.Table, data: st.DataObject) -> None:
    """read_ranges == the stream's rows whose seq lies in a range (and whose type is wanted), in seq order,
    over parts from a build and from appends; the rows decoded are the whole row groups met."""
    root = tmp_path_factory.mktemp("store")
    n = stream.num_rows
    cut = data.draw(st.integers(1, n))
    store = EventStore.create(root, stream.slice(0, cut), row_group_size=data.draw(st.integers(1, 9)),
                              part_rows=data.draw(st.integers(3, 40)))
    if cut < n:
        store.append(stream.slice(cut).drop_columns([SEQ]))
    # some parts lose their seek files (damage; a reader falls back to Parquet for those)
    lost = data.draw(st.sets(st.sampled_from([p.file for p in store.snapshot().parts])))
    for f in lost:
        (root / "parts" / seek_name(f)).unlink()
    points = sorted(data.draw(st.sets(st.integers(-1, n), max_size=8)))
    ranges = [(a, b) for a, b in zip(points[::2], points[1::2], strict=False) if a <= b]
    types = data.draw(st.one_of(st.none(), st.frozensets(st.sampled_from("ABCZ"))))
    columns = data.draw(st.sampled_from([["seq", "ts", "type"], ["seq", "ts", "type", "attrs"], ["ts"]]))
    # the rows of the wanted types are found from the seek files' rows by type always, or never
    by_type = data.draw(st.booleans())
    saved = seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS
    seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS = (1.0, 0) if by_type else (-1.0, 0)
    try:
        check_reads(store, root, lost, ranges, types, columns, by_type and types is not None)
    finally:
        seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS = saved


def check_reads(store: EventStore, root: Path, lost: set[str], ranges: list[tuple[int, int]],
                types: frozenset[str] | None, columns: list[str], by_type: bool) -> None:
    n = store.snapshot().events
    got, decoded = store.read_ranges(ranges, columns, types)
    full = store.read_table()
    seq = full.column(SEQ).to_pylist()
    kinds = full.column("type").to_pylist()
    keep = [i for i in range(n) if any(a <= seq[i] <= b for a, b in ranges)
            and (types is None or kinds[i] in types)]
    # a store without attributes has no attrs column to give
    want = full.select([c for c in columns if c in full.column_names]).take(pa.array(keep, pa.int64()))
    assert got.equals(want)
    encoded, decoded_too = store.read_ranges(ranges, columns, types, type_dictionary=True)
    assert decoded_too == decoded
    if "type" in columns:
        assert encoded.schema.field("type").type == TYPE_DICTIONARY
        encoded = decoded_types(encoded)
    assert encoded.equals(want)
    if columns[:3] == ["seq", "ts", "type"]:
        # the same rows as the exact engine's frame: made of the seek files' columns when they serve every
        # part, else of the table
        frame, decoded_frame = store.read_frame(ranges, columns, types)
        assert decoded_frame == decoded
        assert frame.seq.tolist() == want.column(SEQ).to_pylist()
        assert frame.ts.tolist() == micros(want.column("ts")).tolist()
        codes, distinct = frame.type_codes()
        names = distinct.to_pylist()
        assert [names[c] for c in codes.tolist()] == want.column("type").to_pylist()
        assert decoded_types(frame.table).select(want.column_names).equals(want)
    # Parquet decodes whole row groups; a seek file touches the rows in the ranges only — with attributes
    # where it serves every one asked for (its header says which)
    parts = store.snapshot().parts
    asked = tuple(store.snapshot().attrs) if "attrs" in columns else ()
    seeking = {p.file for p in parts if p.file not in lost
               and open_seek(root / "parts" / seek_name(p.file), p.rows).serves(asked)}
    met = sum(b - a + 1 for part in parts if part.file not in seeking for a, b in part.row_groups
              if any(a <= hi and lo <= b for lo, hi in ranges))
    touched = sum(max(0, min(hi, p.last_seq) - max(lo, p.first_seq) + 1) for p in parts if p.file in seeking
                  for lo, hi in ranges)
    if by_type:  # only the rows of the wanted types are looked at
        first_seek = {p.first_seq for p in parts if p.file in seeking}
        owner = {s: p.first_seq for p in parts for s in range(p.first_seq, p.last_seq + 1)}
        touched = sum(1 for i in keep if owner[seq[i]] in first_seek)
    assert decoded == met + touched


def test_reads_of_ranges_report_a_damaged_part(tmp_path: Path) -> None:
    # "i" is served from the seek files (1 byte a row), "text" is not (over the budget): Parquet reads it
    stream = records_to_table([{"ts": i, "type": "AB"[i % 2], "attrs": {"i": i, "text": f"{i:040d}"}}
                               for i in range(200)])
    store = EventStore.create(tmp_path / "s", stream, row_group_size=16, part_rows=100)
    victim = sorted((tmp_path / "s" / PARTS).glob("part-*.parquet"))[1]
    victim.write_bytes(victim.read_bytes()[:-40] + bytes(40))
    assert store.read_ranges([(3, 9)], ["seq", "ts"])[0].column(SEQ).to_pylist() == list(range(3, 10))
    with pytest.raises(StoreCorrupt, match="damaged event-store part"):
        store.read_ranges([(3, 9), (150, 151)], ["seq", "ts", "attrs"])
    got = store.read_ranges([(3, 9), (150, 151)], ["seq", "attrs.i"])[0]
    assert got.column("attrs").to_pylist() == [{"i": i} for i in [*range(3, 10), 150, 151]]
    # the part's seek file serves the rows it holds, and it is intact; without it, the damage shows
    (tmp_path / "s" / PARTS / seek_name(victim.name)).unlink()
    with pytest.raises(StoreCorrupt, match="damaged event-store part"):
        store.read_ranges([(3, 9), (150, 151)], ["seq", "ts"])


def test_a_store_written_before_seek_files_reads_from_parquet(tmp_path: Path) -> None:
    """A manifest without seek files (an older store) reads its parts from Parquet, and an append to it
    writes seek files for its new parts only; the rows are the same either way."""
    stream = records_to_table([{"ts": i, "type": "AB"[i % 2], "attrs": {}} for i in range(300)])
    store = EventStore.create(tmp_path / "s", stream.slice(0, 200), row_group_size=16, part_rows=100)
    manifest = tmp_path / "s" / MANIFEST
    data = json.loads(manifest.read_text())
    for part in data["parts"]:
        del part["seek_bytes"]
        (tmp_path / "s" / PARTS / seek_name(part["file"])).unlink()
    manifest.write_text(json.dumps(data))
    store = EventStore(tmp_path / "s")
    store.append(stream.slice(200).drop_columns([SEQ]))
    parts = store.snapshot().parts
    assert [p.seek_bytes > 0 for p in parts] == [False, False, True]
    got, decoded = store.read_ranges([(10, 12), (150, 250)], ["seq", "ts", "type"], frozenset({"A"}))
    assert got.column(SEQ).to_pylist() == [10, 12, *range(150, 251, 2)]
    # whole row groups from Parquet (part 1 groups from seq 100 by 16: 148..199); from the seek file the
    # rows of type A in range (200, 202 … 250), found among its rows by type
    assert decoded == 16 + (200 - 148) + 26
    on_disk = sorted(f.name for f in (tmp_path / "s" / PARTS).iterdir())
    assert on_disk == sorted(f for p in parts for f in p.files)


@pytest.mark.parametrize("damage", ["flip", "truncate", "version", "empty", "other_part"])
def test_a_damaged_seek_file_falls_back_to_parquet(tmp_path: Path, damage: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A seek file that cannot serve costs a Parquet read, never a wrong row; the log names the part."""
    stream = records_to_table([{"ts": i * 1000, "type": "ABC"[i % 3], "attrs": {}} for i in range(600)])
    store = EventStore.create(tmp_path / "s", stream, row_group_size=16, part_rows=300)
    ranges, want_types = [(5, 40), (290, 333), (590, 599)], frozenset({"A", "C"})
    want, _ = store.read_ranges(ranges, ["seq", "ts", "type"], want_types)
    parts = store.snapshot().parts
    victim = tmp_path / "s" / PARTS / seek_name(parts[1].file)
    data = victim.read_bytes()
    if damage == "flip":  # one bit of a ts step
        victim.write_bytes(data[:-7] + bytes([data[-7] ^ 1]) + data[-6:])
    elif damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "version":
        victim.write_bytes(data[:8] + (99).to_bytes(4, "little") + data[12:])
    elif damage == "empty":
        victim.write_bytes(b"")
    else:  # a seek file of the wrong part (other rows)
        victim.write_bytes((tmp_path / "s" / PARTS / seek_name(parts[0].file)).read_bytes()[:-64])
    with caplog.at_level("WARNING", logger="exact.store"):
        got, decoded = store.read_ranges(ranges, ["seq", "ts", "type"], want_types)
    assert got.equals(want)
    assert any(parts[1].file in r.getMessage() for r in caplog.records)
    # the Parquet part decodes its whole row groups: 290..299 is group 18 (288..299), 300..333 groups 0..2
    assert decoded == (40 - 5 + 1) + 12 + 48 + (599 - 590 + 1)


def test_range_read_calls_parquet_for_the_needed_row_groups_only(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    stream = records_to_table([{"ts": i // 3, "type": "AB"[i % 2], "attrs": {"i": i}} for i in range(1000)])
    store = EventStore.create(tmp_path / "s", stream, row_group_size=64, part_rows=300)
    calls: list[tuple[int, ...]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self: pq.ParquetFile, row_groups: list[int], *args: object, **kwargs: object) -> pa.Table:
        calls.append(tuple(row_groups))
        return real(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    got = store.read_table(290, 330)
    assert got.column(SEQ).to_pylist() == list(range(290, 331))
    # seq 290..299 lie in part 1 (rows 0..299: groups of 64 → group 4 = 256..299); 300..330 in part 2 group 0
    assert calls == [(4,), (0,)]
    total_groups = sum(pq.ParquetFile(p).metadata.num_row_groups
                       for p in (tmp_path / "s" / PARTS).glob("part-*.parquet"))
    assert total_groups == 5 + 5 + 7


def test_row_groups_have_the_configured_size(tmp_path: Path) -> None:
    stream = records_to_table([{"ts": i, "type": "A"} for i in range(20_000)])
    store = EventStore.create(tmp_path / "s", stream)
    (part,) = store.snapshot().parts
    md = pq.ParquetFile(tmp_path / "s" / PARTS / part.file).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [8192, 8192, 3616]
    assert part.row_groups == ((0, 8191), (8192, 16383), (16384, 19999))


@SETTINGS
@given(stream=streams(min_size=2), data=st.data())
def test_appends_equal_one_build(tmp_path_factory: pytest.TempPathFactory, stream: pa.Table,
                                 data: st.DataObject) -> None:
    n = stream.num_rows
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=4))))
    bounds = [0, *cuts, n]
    root = tmp_path_factory.mktemp("appended")
    store = EventStore.create(root, stream.slice(0, bounds[1]), row_group_size=7)
    for a, b in zip(bounds[1:], bounds[2:], strict=False):
        store.append(stream.slice(a, b - a).drop_columns([SEQ]))
    assert store.read_table().equals(stream)
    snap = store.snapshot()
    assert snap.events == n and snap.version == len(bounds) - 1
    assert sum(snap.type_counts.values()) == n
    assert snap.first_ts == stream.column("ts").cast(pa.int64())[0].as_py()
    assert snap.last_ts == stream.column("ts").cast(pa.int64())[-1].as_py()


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".lock"}


def test_append_older_than_last_ts_is_rejected_whole(tmp_path: Path) -> None:
    first = records_to_table([{"ts": 10, "type": "A"}, {"ts": 20, "type": "B"}])
    store = EventStore.create(tmp_path / "s", first)
    before, before_files = store.snapshot(), files(tmp_path / "s")
    batch = records_to_table([{"ts": 25, "type": "C"}, {"ts": 19, "type": "D"}, {"ts": 30, "type": "E"}],
                             first_seq=None)
    with pytest.raises(Conflict, match="older than the dataset's last event"):
        store.append(batch)
    assert store.snapshot() == before
    assert files(tmp_path / "s") == before_files
    # equal ts is fine and keeps input order after the stored events; the batch itself is ordered by ts
    store.append(records_to_table([{"ts": 21, "type": "F"}, {"ts": 20, "type": "G"}, {"ts": 20, "type": "H"}],
                                  first_seq=None))
    assert [(r["seq"], r["ts"], r["type"]) for r in to_records(store.read_table())] == [
        (0, 10, "A"), (1, 20, "B"), (2, 20, "G"), (3, 20, "H"), (4, 21, "F")]


def test_a_watermark_is_kept_and_nothing_at_or_before_it_comes_after(tmp_path: Path) -> None:
    """Event time reached W: the snapshot keeps it (and says it is past the last event until a later event
    comes); an event at or before W, a watermark before the last event or before W, is refused and nothing
    is written; a batch with a watermark publishes both in one commit."""
    store = EventStore.create(tmp_path / "s", records_to_table([{"ts": 10, "type": "A"}]))
    assert store.snapshot().watermark is None and store.snapshot().event_time is None
    with pytest.raises(Conflict, match="before the dataset's last event"):
        store.commit((), watermark=9)
    store.commit((), watermark=10)  # (the last event's own ts: no more events at it)
    assert store.snapshot().event_time == 10
    store.commit((), watermark=12)
    before, before_files = store.snapshot(), files(tmp_path / "s")
    for late in (12, 11, 5):
        with pytest.raises(Conflict, match="not after the dataset's watermark"):
            store.append(records_to_table([{"ts": late, "type": "B"}], first_seq=None))
    with pytest.raises(Conflict, match="before the dataset's watermark"):
        store.commit((), watermark=11)
    with pytest.raises(Conflict, match="before the dataset's last event"):  # (the batch's own last event)
        store.append(records_to_table([{"ts": 30, "type": "B"}], first_seq=None), watermark=20)
    assert store.snapshot() == before and files(tmp_path / "s") == before_files
    snap = store.append(records_to_table([{"ts": 13, "type": "B"}], first_seq=None), watermark=15)
    assert (snap.events, snap.version, snap.watermark, snap.event_time) == (2, before.version + 1, 15, 15)
    snap = store.append(records_to_table([{"ts": 16, "type": "C"}], first_seq=None))
    assert snap.watermark == 15 and snap.event_time is None  # (a later event says more than it)
    assert EventStore.open(tmp_path / "s").snapshot().watermark == 15


def test_failed_append_leaves_the_store_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    store = EventStore.create(root, records_to_table([{"ts": 1, "type": "A"}]), part_rows=2)
    before, before_files = store.snapshot(), files(root)
    real = pq.write_table
    written = []

    def fail_on_second(table: pa.Table, where: object, **kw: object) -> None:
        written.append(where)
        if len(written) == 2:
            raise OSError("disk full")
        real(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", fail_on_second)
    with pytest.raises(OSError, match="disk full"):
        store.append(records_to_table([{"ts": 2 + i, "type": "B"} for i in range(5)], first_seq=None))
    monkeypatch.undo()
    assert store.snapshot() == before
    assert files(root) == before_files
    assert store.read_table().num_rows == 1


def test_uncommitted_parts_are_invisible_and_cleaned_by_the_next_write(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A part no commit names is never read; the next write (here: every write cleans) deletes it once it is
    older than the grace a write or merge under way gets (younger, it may be one: it stays)."""
    import exact.store.writer as writer_module

    monkeypatch.setattr(writer_module, "CLEAN_EVERY_S", 0.0)
    root = tmp_path / "s"
    store = EventStore.create(root, records_to_table([{"ts": 1, "type": "A"}]))
    orphan = store.write_part(records_to_table([{"ts": 2, "type": "B"}], first_seq=1), 1)
    (root / PARTS / ".tmp-crashed.parquet").write_bytes(b"half a file")
    assert store.snapshot().events == 1
    assert store.read_table().num_rows == 1
    assert (root / PARTS / orphan.file).exists()
    store.append(records_to_table([{"ts": 3, "type": "C"}], first_seq=None))
    assert (root / PARTS / orphan.file).exists()  # (it may be a merge's, still being written)
    past = time.time() - REMOVED_GRACE_S - 1
    for f in (*orphan.files, ".tmp-crashed.parquet"):
        os.utime(root / PARTS / f, (past, past))
    store.append(records_to_table([{"ts": 4, "type": "D"}], first_seq=None))
    assert not (root / PARTS / orphan.file).exists()
    assert not (root / PARTS / ".tmp-crashed.parquet").exists()
    assert [r["type"] for r in to_records(store.read_table())] == ["A", "C", "D"]


def test_commit_publishes_parts_and_extra_together_with_optimistic_check(tmp_path: Path) -> None:
    store = EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]),
                              extra={"index": "v1"})
    snap = store.snapshot()
    with store.writing():
        part = store.write_part(records_to_table([{"ts": 2, "type": "B"}], first_seq=1), 1)
        new = store.commit([part], {"index": "v2", "note": 1}, expect_version=snap.version)
    assert (new.version, new.events, dict(new.extra)) == (snap.version + 1, 2, {"index": "v2", "note": 1})
    with pytest.raises(Conflict, match="changed meanwhile"):
        store.commit([], {"index": "v3"}, expect_version=snap.version)
    assert store.commit([], {"note": None}).extra == {"index": "v2"}
    manifest = json.loads((tmp_path / "s" / MANIFEST).read_text())  # the checkpoint: the store as built
    assert {"format", "version", "events", "first_ts", "last_ts", "parts", "type_counts", "attrs",
            "extra"} <= manifest.keys()
    assert set(manifest["parts"][0]) >= {"file", "first_seq", "last_seq", "rows", "min_ts", "max_ts",
                                         "row_groups"}
    assert (manifest["version"], manifest["type_counts"]) == (1, {"A": 1})
    logged = sorted(p.name for p in (tmp_path / "s" / "log").glob("*.json"))
    assert logged == [f"{v:012d}.json" for v in (2, 3)]  # each commit after it: what it changed
    change = json.loads((tmp_path / "s" / "log" / logged[0]).read_text())
    assert [p["file"] for p in change["add"]] == [part.file] and change["counts"] == {"B": 1}
    assert dict(store.snapshot().type_counts) == {"A": 1, "B": 1}
    assert not list((tmp_path / "s").glob(".manifest*"))


def test_commits_are_logged_and_folded_into_checkpoints(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit writes one small log file, whatever came before; every CHECKPOINT_EVERY commits the log is
    folded into the checkpoint and dropped.  A reader sees the same snapshot whichever it reads from, a
    second publication of one version is refused, and a store written before the log reads as it was."""
    import exact.store.manifest as manifest_module
    import exact.store.writer as writer_module
    from exact.store.durable import write_change
    from exact.store.manifest import Change

    monkeypatch.setattr(writer_module, "CHECKPOINT_EVERY", 5)
    root = tmp_path / "s"
    store = EventStore.create(root, records_to_table([{"ts": 0, "type": "A"}]))
    sizes = []
    for i in range(1, 12):
        store.append(records_to_table([{"ts": i, "type": "AB"[i % 2], "attrs": {"n": i}}], first_seq=None))
        logged = sorted((root / "log").glob("*.json"))
        sizes.append(max((p.stat().st_size for p in logged), default=0))
    snap = store.snapshot()
    assert (snap.version, snap.events, dict(snap.type_counts)) == (12, 12, {"A": 6, "B": 6})
    assert json.loads((root / MANIFEST).read_text())["version"] == 11  # folded at 6 and 11
    assert [p.name for p in (root / "log").glob("*.json")] == [f"{12:012d}.json"]
    assert max(sizes) < 2 * min(s for s in sizes if s)  # (a commit's file does not grow with the commits before)
    fresh = EventStore.open(root).snapshot()
    assert fresh == snap and [r["attrs"] for r in to_records(store.read_table())][-1] == {"n": 11}
    with pytest.raises(Conflict, match="committed meanwhile"):
        write_change(root, Change.between(snap, snap, 0.0))  # (version 12 again)
    manifest_module._READ.clear()
    old = tmp_path / "old"  # a store of the format before the log: a manifest alone
    old_store = EventStore.create(old, records_to_table([{"ts": 0, "type": "A"}]))
    assert not (old / "log").exists() and EventStore.open(old).snapshot() == old_store.snapshot()


def test_snapshot_reads_stay_consistent_after_an_append(tmp_path: Path) -> None:
    store = EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    old = store.snapshot()
    store.append(records_to_table([{"ts": 2, "type": "B"}], first_seq=None))
    assert store.read_table(snapshot=old).num_rows == 1
    assert store.read_table().num_rows == 2


def test_schema_evolution_is_unified_on_read(tmp_path: Path) -> None:
    first = records_to_table([{"ts": 1, "type": "A", "attrs": {"x": 1, "y": 7}}])
    store = EventStore.create(tmp_path / "s", first)
    store.append(records_to_table([{"ts": 2, "type": "B", "attrs": {"x": 2.5, "z": True}}], first_seq=None))
    store.append(records_to_table([{"ts": 3, "type": "C", "attrs": {"y": "seven"}}], first_seq=None))
    snap = store.snapshot()
    assert dict(snap.attrs) == {"x": "double", "y": "string", "z": "bool"}
    assert to_records(store.read_table()) == [
        {"seq": 0, "ts": 1, "type": "A", "attrs": {"x": 1.0, "y": "7"}},
        {"seq": 1, "ts": 2, "type": "B", "attrs": {"x": 2.5, "z": True}},
        {"seq": 2, "ts": 3, "type": "C", "attrs": {"y": "seven"}}]
    assert store.read_table(1, 1).schema == snap.schema()


def test_real_log_round_trips_exactly(shared_data: Path, tmp_path: Path) -> None:
    stream = ingest([shared_data / "running-example.xes"])
    store = EventStore.create(tmp_path / "s", stream, row_group_size=5)
    assert store.read_table().equals(stream)
    assert EventStore.open(tmp_path / "s").read_table(7, 20).equals(stream.slice(7, 14))
    assert len(store.snapshot().parts[0].row_groups) == 9


def test_ingest_tables_matches_a_stable_sort() -> None:
    a = records_to_table([{"ts": 5, "type": "A"}, {"ts": 1, "type": "B"}], first_seq=None)
    b = records_to_table([{"ts": 5, "type": "C"}, {"ts": 1, "type": "D"}], first_seq=None)
    got = ingest_tables([a, b])
    assert got.column("type").to_pylist() == ["B", "D", "A", "C"]


def test_open_create_and_names(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        EventStore.open(tmp_path / "nothing")
    EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    with pytest.raises(Conflict):
        EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    for good in ("a", "bpi2012", "0-x_y", "a" * 64):
        assert check_dataset_name(good) == good
    for bad in ("", "A", "-a", "_a", "a" * 65, "a.b", "a/b", "ü"):
        with pytest.raises(InputError, match="invalid dataset name"):
            check_dataset_name(bad)


def test_staged_dataset_is_published_only_on_success(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), staged_dataset("d1", tmp_path) as stage:
        (stage / "half").write_text("x")
        raise RuntimeError("build failed")
    assert not (tmp_path / "datasets" / "d1").exists()
    assert list((tmp_path / "datasets").iterdir()) == []
    with staged_dataset("d1", tmp_path) as stage:
        EventStore.create(stage / "store", records_to_table([{"ts": 1, "type": "A"}]))
    assert dataset_names(tmp_path) == ["d1"]
    with pytest.raises(Conflict, match="exists already"), staged_dataset("d1", tmp_path):
        pass


def test_cached_snapshot_follows_commits_of_other_writers(tmp_path: Path) -> None:
    reader = EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    writer = EventStore.open(tmp_path / "s")
    first = reader.snapshot()
    assert reader.snapshot() is first  # unchanged manifest: no re-read
    writer.append(records_to_table([{"ts": 2, "type": "B"}], first_seq=None))
    assert reader.snapshot().events == 2 and reader.snapshot().type_counts == {"A": 1, "B": 1}
    with pytest.raises(TypeError):
        first.type_counts["A"] = 5  # type: ignore[index]


def test_store_objects_of_one_path_share_the_manifest_they_read(tmp_path: Path) -> None:
    """A service opens a dataset per request: its manifest is parsed once per commit, not per request."""
    EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    first = EventStore.open(tmp_path / "s").snapshot()
    assert EventStore.open(tmp_path / "s").snapshot() is first
    EventStore.open(tmp_path / "s").append(records_to_table([{"ts": 2, "type": "B"}], first_seq=None))
    again = EventStore.open(tmp_path / "s").snapshot()
    assert again is not first and again.events == 2
    assert EventStore.open(tmp_path / "s").snapshot() is again


def test_a_store_keeps_its_lineage_through_commits_and_a_new_store_has_another(tmp_path: Path) -> None:
    store = EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    lineage = store.snapshot().lineage
    assert lineage is not None and len(lineage) == 32
    store.append(records_to_table([{"ts": 2, "type": "B"}]))
    store.commit([], {"note": 1})
    assert EventStore.open(tmp_path / "s").snapshot().lineage == lineage  # (read back from the manifest)
    other = EventStore.create(tmp_path / "t", records_to_table([{"ts": 1, "type": "A"}]))
    assert other.snapshot().lineage not in (None, lineage)


def test_a_manifest_with_the_same_file_identity_and_new_text_is_read_anew(tmp_path: Path) -> None:
    """A commit's new manifest may get a freed inode number and the size and mtime of one before it (a
    load of quick appends did): the cached snapshot is known by the manifest's text, not by those."""
    store = EventStore.create(tmp_path / "s", records_to_table([{"ts": 1, "type": "A"}]))
    path = tmp_path / "s" / "manifest.json"
    before = store.snapshot()
    st = os.stat(path)
    text = path.read_text(encoding="utf-8")
    changed = text.replace('"type_counts":{"A":1}', '"type_counts":{"A":7}')
    assert changed != text and len(changed) == len(text)
    path.write_text(changed, encoding="utf-8")  # in place: the same inode and size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
    assert os.stat(path).st_ino == st.st_ino
    assert store.snapshot() is not before and store.snapshot().type_counts == {"A": 7}
    assert EventStore.open(tmp_path / "s").snapshot().type_counts == {"A": 7}


@pytest.mark.parametrize(("keep", "retired"), [
    # seqs 0..9 in parts [0..2], [3..5], [6, 7], [8, 9]; event i at i·10 ms
    ("4 events", [0, 1]),     # the latest four start at seq 6
    ("5 events", [0]),        # from seq 5: part [3..5] holds a kept event, so it stays
    ("1 events", [0, 1, 2]),  # never the last part, even when the policy keeps less than it
    ("4 ms", [0, 1, 2]),      # ts ≥ 86 ms kept: [6, 7] (60, 70 ms) goes
    ("21 ms", [0, 1]),        # ts ≥ 69 ms kept: [6, 7] holds 70 ms, so it stays
])
def test_retention_retires_only_whole_parts_past_the_policy(tmp_path: Path, keep: str, retired: list[int]) -> None:
    """A part goes only when every event it holds is past the policy (a span of event time from the latest
    event, or a number of the latest events), oldest first, never the last one."""
    from exact.store.retention import Retention, retirable

    rows = [{"ts": 10_000 * i, "type": "A"} for i in range(10)]
    store = EventStore.create(tmp_path / "s", records_to_table(rows[:3]))
    for lo, hi in ((3, 6), (6, 8), (8, 10)):
        store.append(records_to_table(rows[lo:hi], first_seq=None))
    parts = store.snapshot().parts
    gone = retirable(store.snapshot(), Retention.parse(keep))
    assert [parts.index(p) for p in gone] == retired
