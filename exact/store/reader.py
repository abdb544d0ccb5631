"""Reading an event store: ranges of seqs, from the row groups that hold them or in place from seek files.

A read of ``[start_seq, end_seq]`` opens only the parts and row groups that overlap it
(:meth:`StoreReader.plan`, from the manifest's row-group seq ranges); a read of many short ranges
(:meth:`StoreReader.read_ranges`, verification's reads) takes the rows it needs from each part's seek file
(:mod:`exact.store.seek`) when no attribute is asked for, and otherwise decodes each part's needed row groups in
one call.  Every batch is cast to the snapshot's unified schema (:func:`conform_columns`); a part that is
missing, of the wrong size, or fails its page checksums is :class:`~exact.errors.StoreCorrupt`, never
read.  Readers take no lock: they see one snapshot, whose parts never change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from exact.arrays import run_positions
from exact.errors import Conflict, StoreCorrupt
from exact.events import ATTRS, SEQ, TS, TYPE, conform_attrs, event_schema
from exact.frame import EventFrame
from exact.store.fetch import refetch
from exact.store.manifest import COLUMNS, PARTS, TYPE_DICTIONARY, PartInfo, SeqRanges, Snapshot, StoreBase
from exact.store.parts import PartMissing, read_part
from exact.store.rowfilter import JoinedValues, RowFilter, SeekValues, ValueProbe
from exact.store.seek import code_mask, open_seek, select_counted
from exact.store.seek_format import SeekFile, SeekUnavailable, seek_name
from exact.store.seek_tables import SeekRows, columns_table, pieces_table, seek_columns, seek_ts_at

_log = logging.getLogger(__name__)

#: The rows of one part read from its seek file: the part, its seek file, the rows, their type codes.


class StoreReader(StoreBase):
    """The reading side of :class:`~exact.store.EventStore`: events by seq range, as batches, one table, or
    the exact engine's frame."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._seek_paths: dict[str, str] = {}  # part file → its seek file path (names are never reused)

    def plan(self, start_seq: int = 0, end_seq: int | None = None,
             snapshot: Snapshot | None = None) -> list[tuple[PartInfo, list[int]]]:
        """The parts and row-group indices a read of ``[start_seq, end_seq]`` (inclusive) opens."""
        snap = snapshot or self.snapshot()
        end = snap.events - 1 if end_seq is None else min(end_seq, snap.events - 1)
        start = max(start_seq, 0)
        return snap.groups_of([(start, end)]) if start <= end else []

    def read(self, start_seq: int = 0, end_seq: int | None = None, columns: Sequence[str] | None = None,
             snapshot: Snapshot | None = None, *, type_dictionary: bool = False) -> Iterator[pa.RecordBatch]:
        """Batches of the events with ``start_seq <= seq <= end_seq`` (inclusive; ``None`` = to the end).

        ``columns`` picks among ``seq``, ``ts``, ``type``, ``attrs`` (default all; ``attrs.NAME`` reads
        only the attributes named so, which Parquet decodes alone); every batch has the
        snapshot's unified schema, but with ``type_dictionary`` ``type`` stays dictionary-encoded as
        stored (one dictionary per part; the exact engine works on the codes, and decoding every row to a
        string costs more than the rest of a scan).  Only the row groups that overlap the range are read.
        """
        snap = snapshot or self.snapshot()
        cols, names = _columns(columns, snap)
        attrs = snap.attr_subset(names)
        end = snap.events - 1 if end_seq is None else end_seq
        for part, groups in self.plan(start_seq, end, snap):
            if not groups:
                continue
            table = self._read_groups(part, groups, cols, names)
            first = part.row_groups[groups[0]][0]
            lo = max(start_seq - first, 0)
            hi = min(end - first + 1, table.num_rows)
            table = table.slice(lo, max(hi - lo, 0))
            yield from conform_columns(table, cols, attrs, type_dictionary=type_dictionary).to_batches()

    def read_ranges(self, ranges: SeqRanges, columns: Sequence[str] | None = None,
                    types: frozenset[str] | None = None, snapshot: Snapshot | None = None, *,
                    type_dictionary: bool = False, keep: RowFilter | None = None) -> tuple[pa.Table, int]:
        """The events inside the seq ``ranges`` (inclusive, sorted, disjoint) — only those of ``types``
        unless None — as one seq-sorted table in the snapshot's schema, and the rows decoded to find them.

        Without ``attrs``, a part with a seek file (:mod:`exact.store.seek`) is read in place: only the rows in
        the ranges are touched, and only those of ``types`` converted; "decoded" counts the rows in the
        ranges.  Otherwise each part meeting a range is opened once and every row group it needs decoded in
        one call.  ``seq`` is never decoded (a part's rows are consecutive seqs, so a row's seq is its
        position), rows are selected before anything is converted, and ``type`` is tested once per row
        group's dictionary, so the cost beyond decoding follows the rows kept.  ``type_dictionary`` as in
        :meth:`read`.  ``keep`` drops the rows no variable of a query can bind
        (:mod:`exact.store.rowfilter`), from the seek files before their other columns are gathered.
        """
        snap = snapshot or self.snapshot()
        cols, names = _columns(columns, snap)
        schema = snap.read_schema(cols, type_dictionary, names)
        pieces, decoded = self._range_pieces(snap, ranges, cols, names, types, type_dictionary, keep)
        return pieces_table(pieces, schema), decoded

    def read_frame(self, ranges: SeqRanges, columns: Sequence[str] | None = None,
                   types: frozenset[str] | None = None, snapshot: Snapshot | None = None,
                   keep: RowFilter | None = None) -> tuple[EventFrame, int]:
        """:meth:`read_ranges` (``type`` dictionary-encoded) as the exact engine's frame.  When every part
        is read from its seek file the frame is made of the numpy columns directly (its table only if a
        condition asks for one): the reads of a verification are small, and converting them to Arrow and
        back cost as much as finding them.  The frame is ``sparse``: seqs are stream positions."""
        snap = snapshot or self.snapshot()
        cols, names = _columns(columns, snap)
        schema = snap.read_schema(cols, True, names)
        pieces, decoded = self._range_pieces(snap, ranges, cols, names, types, True, keep)
        if len(pieces) == 1 and isinstance(pieces[0], list) and schema.names == [SEQ, TS, TYPE]:
            # (the ts are decoded where the engine asks for them: a pattern without a time window needs
            # those of its matches' ends only)
            seq, _, codes, dictionary, type_names = seek_columns(pieces[0], (SEQ, TYPE))
            ts_at = seek_ts_at(pieces[0])
            # (the table, made only if a condition asks for a column, decodes the ts itself: a closure that
            # held the frame would make a cycle, and the frame's arrays would wait for the cyclic collector)
            frame = EventFrame.of_columns(seq, ts_at, codes, dictionary, type_names,
                                          lambda: columns_table(seq, ts_at(np.arange(len(seq), dtype=np.int64)),
                                                                codes, dictionary, schema))
        else:
            frame = EventFrame.build(pieces_table(pieces, schema))
        frame.sparse = True  # a part's rows are consecutive seqs: a row left out is a gap
        return frame, decoded

    def _range_pieces(self, snap: Snapshot, ranges: SeqRanges, cols: list[str],
                      names: tuple[str, ...] | None, types: frozenset[str] | None, type_dictionary: bool,
                      keep: RowFilter | None = None) -> tuple[list[pa.Table | list[SeekRows]], int]:
        """What :meth:`read_ranges` reads, in stream order: tables of parts read from Parquet, and for each
        run of consecutive parts read from seek files, their rows and type codes (part by part); and the
        rows decoded (for a seek file: the rows whose type was looked at)."""
        bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        bounds = bounds[bounds[:, 0] <= bounds[:, 1]]
        # a part's seek file serves a read of attributes when it holds every one asked for (version 3)
        wanted_attrs = (names if names is not None else tuple(snap.attrs)) if ATTRS in cols else ()
        value_set = None  # ``types`` as an Arrow array, made for the first part read from Parquet
        pieces: list[pa.Table | list[SeekRows]] = []
        decoded = 0
        # consecutive parts read from seek files: their rows are selected together
        seeking: list[tuple[PartInfo, SeekFile, np.ndarray]] = []
        attr_types = snap.attr_types() if keep is not None else {}
        # a part read from Parquet is filtered when its read holds the attributes the filter tests
        parquet_keep = keep if keep is not None and keep.attributes() <= set(wanted_attrs) else None
        probe = ValueProbe(keep) if keep is not None else None

        def flush() -> None:
            nonlocal decoded
            if seeking:
                # a filtered read takes the rows its conditions may keep from the value indexes where they
                # narrow the read; the other files' rows of the wanted types are selected together
                by_index = {i: probe.candidates(s, r) for i, (_, s, r) in enumerate(seeking)
                            } if probe is not None else {}
                rest = [i for i in range(len(seeking)) if by_index.get(i) is None]
                selected = iter(select_counted([seeking[i][1] for i in rest], [seeking[i][2] for i in rest], types))
                found = []
                for i, (_, s, _) in enumerate(seeking):
                    rows = by_index.get(i)
                    found.append(next(selected) if rows is None else (rows, s.codes[rows], len(rows)))
                decoded += sum(looked_at for _, _, looked_at in found)
                if keep is not None:
                    found = _filtered(keep, [s for _, s, _ in seeking], found, attr_types)
                kept = [(part, seek, rows, codes)
                        for (part, seek, _), (rows, codes, _) in zip(seeking, found, strict=True) if len(rows)]
                if kept:
                    pieces.append(kept)
                seeking.clear()

        for part, inside in snap.parts_in(bounds):
            if part.seek_bytes:
                try:
                    seek = open_seek(self._seek_path(part), part.rows)
                except SeekUnavailable as err:
                    _log.warning("reading part %s from Parquet: its seek file cannot serve (%s)",
                                 part.file, err)
                else:
                    if not wanted_attrs or seek.serves(wanted_attrs):
                        seeking.append((part, seek, inside - part.first_seq))
                        continue
            flush()
            if types is not None and value_set is None:
                value_set = pa.array(sorted(types), pa.string())
            kept, rows_read = self._parquet_ranges(snap, part, inside, cols, names, types, value_set,
                                                   type_dictionary)
            decoded += rows_read
            if kept is not None and parquet_keep is not None:
                kept = kept.filter(pa.array(parquet_keep.frame_mask(EventFrame.build(kept))))
            if kept is not None and kept.num_rows:
                pieces.append(kept)
        flush()
        return pieces, decoded

    def seqs_within(self, lo_us: np.ndarray, hi_us: np.ndarray, snapshot: Snapshot | None = None
                    ) -> np.ndarray:
        """Per pair of times (int64 µs, ``lo_us <= hi_us``), a seq range (inclusive, an (n, 2) array) that
        holds every event with ``lo <= ts <= hi`` — a little more at its ends, never less: the store is
        ordered by ts, so each bound is found among the parts' ts ranges, then among the ts of its part's
        blocks of rows (a seek file's ``base``: each block's first ts, read in place); the range runs from
        the start of the last block that begins before ``lo`` to the end of the last one that begins at or
        before ``hi`` (a part without a seek file: the part).  A range may be empty (lo > hi) where no event
        lies in the times."""
        snap = snapshot or self.snapshot()
        lo_us, hi_us = np.asarray(lo_us, np.int64), np.asarray(hi_us, np.int64)
        out = np.empty((len(lo_us), 2), dtype=np.int64)
        parts = snap.parts
        if not parts or not len(lo_us):
            out[:, 0], out[:, 1] = 0, -1
            return out
        max_ts = np.asarray([p.max_ts for p in parts], dtype=np.int64)
        min_ts = np.asarray([p.min_ts for p in parts], dtype=np.int64)
        # the first event at or after lo lies in the first part that ends at or after it
        first_part = np.searchsorted(max_ts, lo_us, "left")
        # the last event at or before hi lies in the last part that begins at or before it
        last_part = np.searchsorted(min_ts, hi_us, "right") - 1
        firsts, lasts = snap.part_seqs
        out[:, 0] = np.append(firsts, snap.events)[first_part]
        out[:, 1] = np.where(last_part >= 0, lasts[np.maximum(last_part, 0)], -1)
        for i in np.unique(np.concatenate([first_part, last_part])).tolist():
            if not 0 <= i < len(parts) or not parts[i].seek_bytes:
                continue
            part = parts[i]
            try:
                seek = open_seek(self._seek_path(part), part.rows)
            except SeekUnavailable:
                continue  # (the whole part, as above)
            base = seek.base
            at = np.flatnonzero(first_part == i)
            if len(at):  # from the last block whose first ts is below lo (the rows before it are too)
                block = np.maximum(np.searchsorted(base, lo_us[at], "left") - 1, 0)
                out[at, 0] = part.first_seq + block * seek.block
            at = np.flatnonzero(last_part == i)
            if len(at):  # to the end of the last block whose first ts is at most hi
                block = np.searchsorted(base, hi_us[at], "right") - 1
                out[at, 1] = part.first_seq + np.minimum((block + 1) * seek.block, part.rows) - 1
        return out

    def clause_rows(self, keep: RowFilter, ranges: SeqRanges, snapshot: Snapshot | None = None,
                    sample: int = 8) -> list[int]:
        """Per clause of ``keep``, about how many rows in ``ranges`` it keeps, by the value indexes
        (:meth:`ValueProbe.estimates`), from at most ``sample`` parts spread over the ranges and scaled to
        all of them: a planner's estimate, whole parts counted.  Parts without rows by type count every
        row."""
        snap = snapshot or self.snapshot()
        bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        met = [part for part, _ in snap.parts_in(bounds[bounds[:, 0] <= bounds[:, 1]])]
        if not met:
            return [0] * len(keep.clauses)
        picked = [met[i] for i in sorted({round(k * (len(met) - 1) / max(sample - 1, 1))
                                           for k in range(min(sample, len(met)))})]
        probe = ValueProbe(keep)
        totals = [0.0] * len(keep.clauses)
        for part in picked:
            counts: list[float] | None = None
            if part.seek_bytes:
                try:
                    counts = probe.estimates(open_seek(self._seek_path(part), part.rows))
                except SeekUnavailable:
                    counts = None
            for k, n in enumerate(counts if counts is not None else [float(part.rows)] * len(totals)):
                totals[k] += n
        scale = sum(p.rows for p in met) / max(sum(p.rows for p in picked), 1)
        return [round(t * scale) for t in totals]

    def _parquet_ranges(self, snap: Snapshot, part: PartInfo, inside: np.ndarray, cols: list[str],
                        names: tuple[str, ...] | None, types: frozenset[str] | None,
                        value_set: pa.Array | None, type_dictionary: bool
                        ) -> tuple[pa.Table | None, int]:
        """The rows of ``part`` in ``inside`` (ranges within the part; of ``types``, as the Arrow array
        ``value_set``, unless None) from its Parquet file, in the snapshot's schema (None when there are
        none), and the rows decoded."""
        [(_, groups)] = snap.groups_of(inside)
        read_cols = [c for c in cols if c != SEQ]
        if types is not None and TYPE not in read_cols:
            read_cols.append(TYPE)
        raw = self._read_groups(part, groups, read_cols, names)
        rows, seq = _rows_in_ranges(part, groups, inside)
        if types is not None and len(rows):
            keep = type_mask(raw.column(TYPE), value_set, rows)
            rows, seq = rows[keep], seq[keep]
        if not len(rows):
            return None, raw.num_rows
        kept = raw.take(pa.array(rows)).append_column(SEQ, pa.array(seq))
        return (conform_columns(kept, cols, snap.attr_subset(names), type_dictionary=type_dictionary),
                raw.num_rows)

    def _seek_path(self, part: PartInfo) -> str:
        """The path of ``part``'s seek file (kept: a part's name is never reused)."""
        path = self._seek_paths.get(part.file)
        if path is None:
            path = self._seek_paths[part.file] = str(self.root / PARTS / seek_name(part.file))
        return path

    def _read_groups(self, part: PartInfo, groups: list[int], cols: list[str],
                     names: tuple[str, ...] | None = None) -> pa.Table:
        path = self.root / PARTS / part.file
        try:
            try:
                return read_part(path, part, groups, cols, names)
            except PartMissing:
                raise
            except StoreCorrupt:
                if self.remote is None or not refetch(path):
                    raise
                _log.warning("a damaged local copy of %s was fetched again", path)
                return read_part(path, part, groups, cols, names)  # (a replica's copy was damaged)
        except PartMissing:
            if any(p.file == part.file for p in self.snapshot().parts):
                raise
            # The live manifest no longer names the part: the dataset was replaced or deleted while this
            # snapshot was being read, which a retry resolves; nothing is damaged.
            raise Conflict("the dataset was replaced or deleted while it was being read; retry",
                           where=str(self.root)) from None

    def read_table(self, start_seq: int = 0, end_seq: int | None = None, columns: Sequence[str] | None = None,
                   snapshot: Snapshot | None = None, *, type_dictionary: bool = False) -> pa.Table:
        """:meth:`read` as one table (empty with the right schema when nothing is in range)."""
        snap = snapshot or self.snapshot()
        cols, names = _columns(columns, snap)
        asked = cols if names is None else [c for c in cols if c != ATTRS] + [f"{ATTRS}.{n}" for n in names]
        batches = list(self.read(start_seq, end_seq, asked, snap, type_dictionary=type_dictionary))
        return pa.Table.from_batches(batches, schema=snap.read_schema(cols, type_dictionary, names))


def _filtered(keep: RowFilter, files: list[SeekFile], found: list[tuple[np.ndarray, np.ndarray, int]],
              attr_types: dict[str, pa.DataType]) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """The rows of ``found`` (per file: rows, their type codes, rows looked at) that ``keep`` keeps, tested in
    one pass over the files together: a few rows in each of many parts cost one comparison per condition,
    not one per condition and part."""
    sizes = [len(rows) for rows, _, _ in found]
    if not sum(sizes):
        return found
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    parts = [(f, rows, codes) for f, (rows, codes, _) in zip(files, found, strict=True)]

    def type_test(types: frozenset[str]) -> np.ndarray:
        return np.concatenate([code_mask(f.types, types, codes) for f, _, codes in parts])

    values = JoinedValues([SeekValues(f.attrs, f.unserved, rows, attr_types) for f, rows, _ in parts], starts)
    at = keep.mask(int(starts[-1]), type_test, values)
    return [(rows[at[a:b]], codes[at[a:b]], looked) for (rows, codes, looked), a, b
            in zip(found, starts[:-1].tolist(), starts[1:].tolist(), strict=True)]


def _columns(columns: Sequence[str] | None, snap: Snapshot) -> tuple[list[str], tuple[str, ...] | None]:
    """The stream columns of a read (in schema order), and the attributes to read (None: all of them);
    ``attrs.NAME`` asks for the ``attrs`` column with only the attributes so named."""
    wanted = list(COLUMNS) if columns is None else list(columns)
    fields = [c[len(ATTRS) + 1:] for c in wanted if c.startswith(ATTRS + ".")]
    plain = [c for c in wanted if not c.startswith(ATTRS + ".")]
    unknown = [c for c in plain if c not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; choose from {COLUMNS} or attrs.NAME")
    if fields and ATTRS not in plain:
        plain.append(ATTRS)
    names = None if not fields or ATTRS in [c for c in wanted if c == ATTRS] else tuple(dict.fromkeys(fields))
    cols = [c for c in COLUMNS if c in plain and (c != ATTRS or snap.attrs)]
    return cols, names


def conform_columns(table: pa.Table, cols: list[str], attrs: dict[str, pa.DataType], *,
                    type_dictionary: bool = False) -> pa.Table:
    """``cols`` of a part's rows in the snapshot's unified schema (attributes widened, missing ones null;
    ``type`` dictionary-encoded with ``type_dictionary``)."""
    schema = event_schema(attrs)
    fields, arrays = [], []
    for c in cols:
        field = schema.field(c)
        if c == ATTRS:
            struct = table.column(ATTRS).combine_chunks() if ATTRS in table.column_names else None
            arrays.append(conform_attrs(struct, table.num_rows, attrs))
        elif c == TYPE and type_dictionary:
            column = table.column(c)
            if column.type != TYPE_DICTIONARY:
                column = pc.dictionary_encode(column.cast(pa.string())).cast(TYPE_DICTIONARY)
            field = field.with_type(TYPE_DICTIONARY)
            arrays.append(column)
        else:
            arrays.append(table.column(c).cast(field.type))
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _rows_in_ranges(part: PartInfo, groups: list[int], bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows (positions in the table of ``groups`` of ``part`` read together) whose seqs lie in the
    sorted, disjoint, inclusive ``bounds`` (n, 2), and those seqs.  Every row group a bound meets is among
    ``groups`` (see :meth:`Snapshot.groups_of`), so a bound's rows in the part are one run of the table."""
    layout = np.asarray([part.row_groups[g] for g in groups], dtype=np.int64).reshape(-1, 2)
    sizes = layout[:, 1] - layout[:, 0] + 1
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    lo = np.maximum(bounds[:, 0], layout[0, 0])
    hi = np.minimum(bounds[:, 1], layout[-1, 1])
    ok = lo <= hi
    lo, hi = lo[ok], hi[ok]
    group = np.searchsorted(layout[:, 0], lo, "right") - 1
    first = offsets[group] + lo - layout[group, 0]  # the table row of each run's first seq
    counts = hi - lo + 1
    if not len(counts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = run_positions(first, counts)
    return rows, rows + np.repeat(lo - first, counts)


def type_mask(column: pa.ChunkedArray | pa.Array, value_set: pa.Array, rows: np.ndarray | None = None
              ) -> NDArray[np.bool_]:
    """Per row (of ``rows`` only, when given): is its type in ``value_set``?  Dictionary-encoded chunks (as
    the store reads ``type``) share one dictionary, which is tested once; rows are then looked up by index."""
    if isinstance(column, pa.ChunkedArray):
        if pa.types.is_dictionary(column.type):
            column = column.unify_dictionaries()
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type) and column.null_count == 0:
        lut = pc.is_in(column.dictionary, value_set=value_set).to_numpy(zero_copy_only=False)
        index = column.indices.to_numpy(zero_copy_only=False)
        by_index: NDArray[np.bool_] = lut[index if rows is None else index[rows]]
        return by_index
    if rows is not None:
        column = column.take(pa.array(rows))
    mask: NDArray[np.bool_] = pc.fill_null(pc.is_in(column, value_set=value_set), False).to_numpy(
        zero_copy_only=False)
    return mask

