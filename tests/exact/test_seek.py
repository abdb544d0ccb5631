"""Seek files: a part's ts and types, fixed-width, read in place.  Held to the arrays they were made from on
random parts (every width of codes and steps), and to a brute-force selection of rows in ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import exact.store.seek as seek_module
import exact.store.seek_format as seek_format
from exact.store.seek import open_seek, select, ts_of
from exact.store.seek_format import BLOCK, SeekUnavailable, encode, file_version, write, write_bytes
from tests.generators import index_queries, index_streams, scaled

SETTINGS = scaled(60, HealthCheck.function_scoped_fixture)


@st.composite
def parts(draw: st.DrawFn) -> tuple[np.ndarray, list[str]]:
    """ts (not decreasing, in one of several granularities and gap sizes) and types of a part."""
    n = draw(st.integers(1, 3 * BLOCK + 7))
    unit = draw(st.sampled_from([1, 1000, 1_000_000]))
    big = draw(st.sampled_from([3, 10**6, 10**9]))  # gaps in units: µs jitter … days between events
    gaps = np.asarray(draw(st.lists(st.integers(0, big), min_size=n, max_size=n)), dtype=np.int64)
    ts = 1_600_000_000_000_000 + np.cumsum(gaps) * unit
    alphabet = draw(st.sampled_from([["A"], ["A", "B", "C"], [f"t{i}" for i in range(300)]]))
    types = [alphabet[i] for i in draw(st.lists(st.integers(0, len(alphabet) - 1), min_size=n, max_size=n))]
    return ts, types


@SETTINGS
@given(part=parts(), data=st.data())
def test_a_seek_file_gives_back_its_rows(tmp_path_factory: pytest.TempPathFactory,
                                         part: tuple[np.ndarray, list[str]], data: st.DataObject) -> None:
    ts, types = part
    n = len(ts)
    path = tmp_path_factory.mktemp("seek") / "p.seek"
    version = data.draw(st.sampled_from([5, seek_format.VERSION]))  # (plain, and bit-packed where 6 packs)
    size = write_bytes(path, encode(ts, pa.array(types), version=version))
    assert size == path.stat().st_size
    seek = open_seek(path, n)
    assert seek.types == tuple(sorted(set(types)))
    assert [seek.types[c] for c in seek.codes.tolist()] == types
    assert ts_of([seek], [np.arange(n)]).tolist() == ts.tolist()
    # rows in random sorted, disjoint ranges, of random wanted types, as a brute force picks them
    points = sorted(data.draw(st.sets(st.integers(0, n), max_size=40)))
    ranges = [(a, b - 1) for a, b in zip(points[::2], points[1::2], strict=False)]  # some of one row
    wanted = data.draw(st.one_of(st.none(), st.frozensets(st.sampled_from(sorted(set(types)) + ["absent"]))))
    bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    compared = data.draw(st.sampled_from([0, 8, 10**9]))  # test codes by table look-up or by comparisons
    # find the rows from the rows by type always, never, or where the read's shape says so
    by_type = data.draw(st.sampled_from([(1.0, 0), (-1.0, 0), (seek_module._BY_TYPE_SHARE,
                                                                seek_module._LOOKUP_ROWS)]))
    # a packed type's rows searched by their blocks at each range's ends, or decoded whole
    searched = data.draw(st.sampled_from([0, seek_module._SEARCHED_ROWS]))
    saved = (seek_module._COMPARED_CODES, seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS,
             seek_module._SEARCHED_ROWS)
    seek_module._COMPARED_CODES = compared
    seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS = by_type
    seek_module._SEARCHED_ROWS = searched
    try:
        [(rows, codes)] = select([seek], [bounds], wanted)
    finally:
        (seek_module._COMPARED_CODES, seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS,
         seek_module._SEARCHED_ROWS) = saved
    want = [i for a, b in ranges for i in range(a, b + 1) if wanted is None or types[i] in wanted]
    assert rows.tolist() == want
    assert [seek.types[c] for c in codes.tolist()] == [types[i] for i in want]
    assert ts_of([seek], [rows]).tolist() == ts[want].tolist()


def test_files_are_selected_from_together_as_each_alone(tmp_path: Path) -> None:
    """Rows of several files at once (those of the same types tested together) and their ts are each
    file's own, a file without ranges giving none; files may differ in ts unit and in wide rows."""
    rng = np.random.default_rng(7)
    files = []
    for i, alphabet in enumerate([["A", "B", "C"], ["A", "B", "C"], ["B", "D"], ["A", "B", "C"]]):
        types = [alphabet[k] for k in rng.integers(0, len(alphabet), 500).tolist()]
        gaps = rng.integers(0, 10, 500) * (1000 if i % 2 else 1)
        gaps[rng.integers(0, 500, 5 * i)] = 10**13  # long pauses: rows kept apart as wide
        ts = 1_600_000_000_000_000 + np.cumsum(gaps)
        write(tmp_path / f"{i}.seek", ts, pa.array(types))
        files.append((open_seek(tmp_path / f"{i}.seek", 500), types, ts))
    ranges = [np.asarray(r, dtype=np.int64).reshape(-1, 2)
              for r in ([(0, 9), (40, 40), (100, 499)], [(3, 5)], [(0, 499)], [])]
    cases = [(w, share) for w in (frozenset({"B"}), frozenset({"A", "D"}), None) for share in (-1.0, 1.0)]
    for wanted, share in cases:  # by each row's code, or from the rows by type
        saved = seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS
        seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS = share, 0
        try:
            got = select([f for f, _, _ in files], ranges, wanted)
        finally:
            seek_module._BY_TYPE_SHARE, seek_module._LOOKUP_ROWS = saved
        for (seek, types, _), r, (rows, codes) in zip(files, ranges, got, strict=True):
            want = [i for a, b in r.tolist() for i in range(a, b + 1) if wanted is None or types[i] in wanted]
            assert rows.tolist() == want
            assert [seek.types[c] for c in codes.tolist()] == [types[i] for i in want]
        rows = [rows for rows, _ in got]
        assert ts_of([f for f, _, _ in files], rows).tolist() == np.concatenate(
            [ts[r] for (_, _, ts), r in zip(files, rows, strict=True)]).tolist()


def test_an_event_takes_the_bits_of_its_offsets_unless_it_follows_a_long_pause(tmp_path: Path) -> None:
    """A 1-byte type code, its ts offset from its block's first in the bits the offsets of 256 rows need,
    and its row among the rows by type in the bits of the steps between them, per event (and a block base per
    32): five bytes for minutes with µs jitter, two for a second apart, where the plain layout of version 5
    took nine.  Only rows 2^32 units or more (71 minutes in µs) after their block's first row are kept
    apart, at 16 bytes each."""
    n = 10_000
    ts = 1_600_000_000_000_000 + np.arange(n, dtype=np.int64) * 60_000_000 + np.arange(n) % 7  # µs jitter
    types = pa.array(["A", "B"] * (n // 2))
    overhead = 8 * (n // BLOCK + 1) + 1024  # block bases, header, alignment
    assert len(encode(ts, types, version=5)) <= 9 * n + overhead
    assert len(encode(ts, types)) <= 5.5 * n + overhead
    seconds = 1_600_000_000_000_000 + np.arange(n, dtype=np.int64) * 1_000_000
    assert len(encode(seconds, types)) <= 2 * n + overhead
    row = np.arange(n)
    paused = ts + np.where(row >= 5010, 10**11, 0)  # a pause of 28 hours inside a block (4992..5023)
    wide = [i for i in range(n) if paused[i] - paused[i - i % BLOCK] >= 2**32 - 1]
    assert wide == list(range(5010, 5010 - 5010 % BLOCK + BLOCK))
    write(tmp_path / "p.seek", paused, types)
    seek = open_seek(tmp_path / "p.seek", n)
    assert seek.wide_rows.tolist() == wide and seek.wide_ts.tolist() == paused[wide].tolist()
    assert ts_of([seek], [row]).tolist() == paused.tolist()
    assert ts_of([seek], [row[::-7]]).tolist() == paused[::-7].tolist()
    assert len(encode(paused, types)) - len(encode(ts, types)) <= len(wide) * 16 + 2 * 64


def test_a_seek_file_of_another_row_count_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.seek"
    write(path, np.arange(10, dtype=np.int64), pa.array(["A"] * 10))
    with pytest.raises(SeekUnavailable, match="holds 10 rows"):
        open_seek(path, 11)
    with pytest.raises(SeekUnavailable, match="missing"):
        open_seek(tmp_path / "none.seek", 10)


def test_files_deleted_or_replaced_leave_the_open_maps(tmp_path: Path) -> None:
    """A mapped file keeps its disk space: opening another seek file lets go of those deleted or replaced."""
    old, other = tmp_path / "old.seek", tmp_path / "other.seek"
    write(old, np.arange(10, dtype=np.int64), pa.array(["A"] * 10))
    open_seek(old, 10)
    assert any(k[0] == str(old) for k in seek_module._OPEN)
    old.unlink()
    write(other, np.arange(5, dtype=np.int64), pa.array(["B"] * 5))
    open_seek(other, 5)
    assert not any(k[0] == str(old) for k in seek_module._OPEN)
    assert any(k[0] == str(other) for k in seek_module._OPEN)


@pytest.mark.parametrize("older", [5, 6, 7])
def test_a_store_whose_seek_files_are_of_an_older_version_answers_alike_and_compact_upgrades_it(
        tmp_path: Path, older: int) -> None:
    """The same dataset with every seek file written in the plain layout of version 5, or the layout of
    version 6 (its attributes not packed) or 7 (its dictionaries plain) — as a store written before keeps
    them — answers every mode of every question as with the files of this version; ``compact`` rewrites
    those parts in this version, and the answers stay."""
    from api.service.queries import run_query
    from exact.reference import stream_table
    from exact.store import EventStore, dataset_dir, store_dir
    from exact.store.seek_format import seek_name
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset

    rng = np.random.default_rng(11)
    rows = [{"seq": i, "type": "ABCDE"[int(rng.integers(0, 5))], "ts": i * 1000 + int(rng.integers(0, 3)),
             "case": f"c{int(rng.integers(0, 30))}", "x": int(rng.integers(0, 9)), "y": float(rng.random())}
            for i in range(4000)]
    Dataset.build(tmp_path, "d", stream_table(rows), BuildOptions(leaf_size=16), partition_key="case")
    queries = ["PATTERN SEQ(A a, B b) WITHIN 20 EVENTS",
               "PATTERN SEQ(A a, C c, D d) WHERE a.x < d.x AND c.y > 0.5 PARTITION BY case WITHIN 300 EVENTS",
               "PATTERN SEQ(B b, NOT(C c), E e) WHERE b.x = 3 PARTITION BY case WITHIN 100 EVENTS "
               "STRATEGY partition_contiguity",
               "PATTERN SEQ(E e, E f) WHERE e.y < 0.1 WITHIN 50 EVENTS STRATEGY strict_contiguity"]

    def answers() -> list:
        return [(q, m, a.get("count"), a.get("matches")) for q in queries for m in ("exact", "verified")
                for a in [run_query(tmp_path, "d", q, mode=m)]]

    packed = answers()
    store = EventStore.open(store_dir(dataset_dir("d", tmp_path)))
    for part in store.snapshot().parts:
        table = store.read_table(part.first_seq, part.last_seq)
        path = store.root / "parts" / seek_name(part.file)
        assert open_seek(path, part.rows).by_type is not None
        written = encode(table.column("ts").combine_chunks().view(pa.int64()).to_numpy(),
                         table.column("type").combine_chunks(), table.column("attrs"), version=older)
        write_bytes(path, written)
        assert file_version(path) == older
        assert hasattr(open_seek(path, part.rows).by_type, "words") == (older >= 6)  # (plain: a numpy view)
    assert answers() == packed
    Dataset.open(tmp_path, "d").compact()
    store = EventStore.open(store_dir(dataset_dir("d", tmp_path)))
    assert all(file_version(store.root / "parts" / seek_name(p.file)) == seek_format.VERSION
               for p in store.snapshot().parts)
    assert answers() == packed


@scaled(25, HealthCheck.function_scoped_fixture, HealthCheck.too_slow, deadline=None)
@given(query=index_queries(), rows=index_streams(max_events=40), older=st.sampled_from([5, 6, 7]), data=st.data())
def test_random_streams_answer_alike_from_seek_files_of_every_version(
        tmp_path_factory: pytest.TempPathFactory, query, rows: list[dict], older: int, data: st.DataObject) -> None:
    """On random streams (nulls; decimals, raw doubles and int64 extremes beside ``x``), every mode of a random
    query answers the same from the seek files this version writes as from those of an older version."""
    from api.service.queries import run_query
    from exact.reference import stream_table
    from exact.store import EventStore, dataset_dir, store_dir
    from exact.store.seek_format import seek_name
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset

    if not rows:
        return
    extra = data.draw(st.sampled_from(["decimal", "double", "extreme"]))
    for r in rows:
        r["v"] = data.draw(st.one_of(st.none(), {
            "decimal": st.integers(-10**6, 10**6).map(lambda i: i / 100),
            "double": st.floats(allow_nan=True, allow_infinity=True),
            "extreme": st.sampled_from([-(1 << 63), (1 << 63) - 1, 0, -1])}[extra]))
    home = tmp_path_factory.mktemp("formats")
    Dataset.build(home, "d", stream_table(rows), BuildOptions(leaf_size=2, fpq=0.5))

    def answers() -> list:
        return [(m, a.get("count"), a.get("matches")) for m in ("exact", "verified")
                for a in [run_query(home, "d", query, mode=m, limit=1000)]]

    now = answers()
    store = EventStore.open(store_dir(dataset_dir("d", home)))
    for part in store.snapshot().parts:
        table = store.read_table(part.first_seq, part.last_seq)
        path = store.root / "parts" / seek_name(part.file)
        write_bytes(path, encode(table.column("ts").combine_chunks().view(pa.int64()).to_numpy(),
                                 table.column("type").combine_chunks(), table.column("attrs"), version=older))
    assert answers() == now


@scaled(20, HealthCheck.function_scoped_fixture)
@given(n=st.integers(1, 300), part_rows=st.integers(1, 40), data=st.data())
def test_a_frame_read_from_seek_files_decodes_the_ts_asked_for_as_a_whole_read_does(
        tmp_path_factory: pytest.TempPathFactory, n: int, part_rows: int, data: st.DataObject) -> None:
    """A frame read from several parts' seek files decodes its ts where asked (``ts_at``): at positions in
    any order, repeated or not, they are those of the same rows read whole."""
    from exact.reference import stream_table
    from exact.store import EventStore

    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    gaps = rng.integers(0, 3_000_000_000, n) * (rng.random(n) < 0.5)  # (long pauses: rows kept apart as wide)
    rows = [{"seq": i, "ts": int(t), "type": "AB"[int(rng.integers(0, 2))]} for i, t in enumerate(np.cumsum(gaps))]
    store = EventStore.create(tmp_path_factory.mktemp("lazy") / "store", stream_table(rows), part_rows=part_rows)
    frame, _ = store.read_frame([(0, n - 1)], ["seq", "ts", "type"], types=frozenset({"A"}))
    whole, _ = store.read_ranges([(0, n - 1)], columns=["seq", "ts", "type"], types=frozenset({"A"}))
    expected = whole.column("ts").cast(pa.int64()).to_numpy()
    assert frame.seq.tolist() == whole.column("seq").to_pylist()
    positions = np.asarray(data.draw(st.lists(st.integers(0, max(len(expected) - 1, 0)), max_size=30))
                           if len(expected) else [], dtype=np.int64)
    assert frame.ts_at(positions).tolist() == expected[positions].tolist()
    taken = frame.take(np.arange(len(expected)) % 2 == 0)
    assert taken.ts_at(np.arange(len(taken.seq))).tolist() == expected[::2].tolist()
    assert frame.ts.tolist() == expected.tolist()


def test_a_frame_read_from_seek_files_is_freed_without_the_cyclic_collector(tmp_path: Path) -> None:
    """A frame (and the arrays it holds) is freed as soon as it is dropped: nothing it holds refers back to
    it. A cycle left a 10M-event store's frames of 150 MB each to the cyclic collector, which ran too
    seldom: memory grew by that much a query, and the reads slowed with it."""
    import gc
    import weakref

    from exact.reference import stream_table
    from exact.store import EventStore

    rows = [{"seq": i, "ts": i * 1_000, "type": "AB"[i % 2]} for i in range(500)]
    store = EventStore.create(tmp_path / "store", stream_table(rows), part_rows=128)
    was_on = gc.isenabled()
    gc.disable()
    try:
        frame, _ = store.read_frame([(0, 499)], ["seq", "ts", "type"], types=frozenset({"A"}))
        taken = frame.take(frame.seq % 4 == 0)
        assert taken.ts_at(np.arange(3)).tolist() == [0, 4_000, 8_000]
        refs = [weakref.ref(frame), weakref.ref(taken)]
        del frame, taken
        assert [r() for r in refs] == [None, None]
    finally:
        if was_on:
            gc.enable()
