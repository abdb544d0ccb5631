"""Writing an event store: parts written invisibly, then published with one manifest replace.

Writers hold an exclusive lock on ``.lock`` (:meth:`StoreWriter.writing`, re-entrant within one object).
A part (:meth:`StoreWriter.write_part`) is a Parquet file of a contiguous seq range in seq order — row
groups of the snapshot's ``row_group_size``, seq and ts delta-encoded, page checksums on — with its seek
file (:mod:`exact.store.seek`) beside it, each written under a temporary name, fsynced and renamed.
:meth:`StoreWriter.commit` publishes parts and the ``extra`` that goes with them (the index version) in
one manifest replace (:func:`~exact.store.durable.write_manifest`); :meth:`StoreWriter.append` orders a
batch by time, numbers it after the stream and writes and commits it, all or nothing.  Files in
``parts/`` that the manifest does not name are deleted by a later write (:data:`CLEAN_EVERY_S`).
"""

from __future__ import annotations

import dataclasses
import fcntl
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exact.errors import Conflict
from exact.events import (
    ATTRS,
    SEQ,
    TS,
    TYPE,
    attr_types,
    finish_table,
    iso_of_micros,
    type_from_name,
    type_name,
    unify_attr_types,
)
from exact.ingest import order_by_time, with_seq
from exact.store.append_checks import (
    check_not_older,
    check_part_table,
    check_watermark,
    keep_stored_types,
    last_ts_after,
)
from exact.store.durable import drop_log, fsync_all, write_change, write_manifest
from exact.store.footprint import DEFAULT_FOOTPRINT
from exact.store.manifest import (
    CHECKPOINT_EVERY,
    DEFAULT_PART_ROWS,
    FOOTPRINT_KEY,
    INDEX_ATTRS_KEY,
    MANIFEST,
    PARTS,
    REMOVED_GRACE_S,
    Change,
    PartInfo,
    Snapshot,
    StoreBase,
)
from exact.store.replica import upload_written
from exact.store.seek_format import SUFFIX as SEEK_SUFFIX
from exact.store.seek_format import encode as encode_seek
from exact.store.seek_format import seek_name, served_bytes, structure_bytes
from exact.store.seek_format import write_bytes as write_seek_bytes

_LOCK = ".lock"
#: A commit deletes the files no snapshot needs (:meth:`StoreWriter._clean_orphans`, a listing of the parts'
#: folder) at a checkpoint, and otherwise when this many seconds passed since this process last did for the
#: store: a feed of small appends does not list the folder per append.
CLEAN_EVERY_S = 10.0
#: when this process last cleaned each store (monotonic), by store folder
_CLEANED: dict[str, float] = {}


class StoreWriter(StoreBase):
    """The writing side of :class:`~exact.store.EventStore`: parts, commits, appends, under the lock."""

    def __init__(self, root: Path, *, part_rows: int = DEFAULT_PART_ROWS) -> None:
        super().__init__(root)
        self.part_rows = part_rows
        self._lock = threading.RLock()
        self._lock_depth = 0
        self._lock_file: Any = None
        self._held: Snapshot | None = None  # the committed state, known while the lock is held
        #: the bucket location of the build stage this new store is in (its parts are uploaded as written)
        self.bound_for: str | None = None

    def snapshot(self) -> Snapshot:
        """The current committed state; while this object holds the lock nobody else commits, so the state
        it read or published under the lock is the current one (not read again)."""
        held = self._held
        if held is not None and self._lock_depth:
            return held
        snap = super().snapshot()
        if self._lock_depth and self._lock._is_owned():  # type: ignore[attr-defined]
            self._held = snap
        return snap

    def _fresh(self) -> bool:
        return self._lock_depth > 0

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the store's writer lock (re-entrant within this object; exclusive across processes)."""
        with self._lock:
            if self._lock_depth == 0:
                self.root.mkdir(parents=True, exist_ok=True)
                self._lock_file = open(self.root / _LOCK, "a+")  # noqa: SIM115 - held across the block
                fcntl.flock(self._lock_file, fcntl.LOCK_EX)
                self._held = None
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    self._held = None
                    fcntl.flock(self._lock_file, fcntl.LOCK_UN)
                    self._lock_file.close()
                    self._lock_file = None

    def write_part(self, table: pa.Table, first_seq: int, *, row_group_size: int | None = None,
                   index_attrs: Sequence[str] | None = None, footprint: float | None = None) -> PartInfo:
        """Write one part (not yet visible: :meth:`commit` publishes it).  Its seek file serves the attributes
        ``index_attrs``, or those the store's ``extra`` names (:data:`INDEX_ATTRS_KEY`), or by default the
        cheapest within the budget (:mod:`exact.store.seek_attrs`) and the footprint budget (``footprint``,
        or the store's :data:`FOOTPRINT_KEY`, or :data:`~exact.store.footprint.DEFAULT_FOOTPRINT`), with the
        share of the trees and layout the store names (:func:`index_bytes_per_event`).

        ``table`` is a stream table whose ``seq`` runs ``first_seq, first_seq+1, …`` and whose ts never
        decreases.  Its Parquet file and its seek file (:mod:`exact.store.seek`) are each written under a
        temporary name, fsynced, then renamed.
        """
        check_part_table(table, first_seq)
        snap = self.snapshot_or_empty()
        size = row_group_size or snap.row_group_size
        chosen = index_attrs if index_attrs is not None else (snap.extra or {}).get(INDEX_ATTRS_KEY)
        parts_dir = self.root / PARTS
        parts_dir.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex[:12]
        tmp = parts_dir / f".tmp-{token}.parquet"
        final = parts_dir / f"part-{first_seq:012d}-{token}.parquet"
        seek_tmp = parts_dir / f".tmp-{token}{SEEK_SUFFIX}"
        seek_final = parts_dir / seek_name(final.name)
        table = finish_table(table).combine_chunks()
        try:
            # Page checksums (CRC-32) let a read detect damaged data pages instead of decoding them.  seq and
            # ts only grow, so delta encoding stores them in a few bits per row (a dictionary of unique
            # values would store each twice); type and attribute values repeat, so they keep dictionaries.
            # Half the bytes of the all-dictionary layout, and row groups decode in about half the time.
            # Every query decodes ts, and its delta encoding leaves little for zstd to find, so seq and ts
            # are not compressed again (a part grows 1-4 %; they decode in about half the time).  Types
            # stay compressed: a stream of many distinct types (words) has large dictionary pages.
            dictionary = _dictionary_columns(table)
            compression = {c: "zstd" for c in dictionary} | {SEQ: "none", TS: "none"}
            pq.write_table(table, tmp, row_group_size=size, compression=compression, write_statistics=True,
                           write_page_checksum=True, use_dictionary=dictionary,
                           column_encoding={SEQ: "DELTA_BINARY_PACKED", TS: "DELTA_BINARY_PACKED"})
            # The seek file after: the footprint budget weighs it against the Parquet file's bytes.  Both
            # are renamed into place seek file first, so a part on disk always has its seek file beside it.
            attrs = table.column(ATTRS) if ATTRS in table.column_names else None
            budget = float(footprint or (snap.extra or {}).get(FOOTPRINT_KEY) or DEFAULT_FOOTPRINT)
            per_event = index_bytes_per_event(snap.extra, snap.events)
            seek_data = encode_seek(table.column(TS).combine_chunks().view(pa.int64()).to_numpy(),
                                    table.column(TYPE).combine_chunks(), attrs, chosen,
                                    footprint=(budget, tmp.stat().st_size,
                                               None if per_event is None else int(per_event * table.num_rows)))
            seek_bytes = write_seek_bytes(seek_tmp, seek_data, sync=False)
            fsync_all([seek_tmp, tmp])
            os.replace(seek_tmp, seek_final)
            os.replace(tmp, final)
            # (the folder's new entries are flushed by the commit that names the part, with its log entry)
        except BaseException:
            for f in (tmp, final, seek_tmp, seek_final):
                f.unlink(missing_ok=True)
            raise
        if self.bound_for:  # (a build's stage bound for a bucket: its parts' uploads go on as it writes)
            upload_written(self.root, self.bound_for, (final.name, seek_final.name))
        return _part_info(final, table, first_seq, seek_bytes, tuple(served_bytes(seek_data).items()),
                          tuple(structure_bytes(seek_data).items()))

    def commit(self, parts: Sequence[PartInfo] = (), extra_update: Mapping[str, Any] | None = None, *,
               expect_version: int | None = None, watermark: int | None = None,
               replace: Sequence[str] = (), retire: Sequence[str] = (),
               retired_counts: Mapping[str, int] | None = None) -> Snapshot:
        """Publish one commit: ``parts`` (which continue the stream — or, with ``replace``, take the place of
        the parts of those files, a contiguous run holding exactly their seqs: a merge), ``retire`` (part
        files to drop from the front of the stream, ``retired_counts`` their events per type: retention),
        ``extra_update`` merged into ``extra`` (a key whose value is ``None`` is removed) and, with
        ``watermark``, event time having reached it after these parts (:func:`check_watermark`).

        With ``expect_version``, raises :class:`Conflict` if another commit happened since that version
        (optimistic concurrency); a merge or retention whose parts are gone meanwhile raises it too.
        """
        with self.writing():
            current = self.snapshot()
            if expect_version is not None and current.version != expect_version:
                raise Conflict(f"the dataset changed meanwhile (version {current.version}, expected "
                               f"{expect_version}); retry", where=str(self.root))
            for p in parts:
                for f in p.files:
                    if not (self.root / PARTS / f).is_file():
                        raise Conflict(f"part file {f} is missing; was it written outside writing()?",
                                       where=str(self.root))
            if replace:
                snap = self._replaced(current, parts, replace, extra_update)
            elif retire:
                snap = self._retired(current, retire, retired_counts or {}, extra_update)
            else:
                snap = self._next_snapshot(current, parts, extra_update, watermark)
            return self._publish(snap, current)

    def append(self, table: pa.Table, *, extra_update: Mapping[str, Any] | None = None,
               watermark: int | None = None) -> Snapshot:
        """Add events (a stream table without ``seq``) at the end of the stream, all or nothing; with
        ``watermark``, event time has reached it after them (published in the same commit).

        The batch is ordered by ts (stable) and numbered after the last event.  If any event is older than
        the dataset's last ts, or not after its watermark, the whole batch is rejected with :class:`Conflict`
        and nothing is written (equal ts is fine without a watermark: ties keep input order, after the events
        already stored).
        """
        with self.writing():
            snap = self.snapshot()
            if table.num_rows == 0 and not extra_update and watermark is None:
                return snap
            if SEQ in table.column_names:
                table = table.drop_columns([SEQ])
            table = order_by_time(keep_stored_types(table, snap))
            check_not_older(table, snap)
            if watermark is not None:  # (refused before anything is written)
                check_watermark(watermark, last_ts_after(table, snap), snap.watermark)
            stream = with_seq(table, snap.events)
            written: list[PartInfo] = []
            try:
                if stream.num_rows:
                    written = self._write_parts(stream, snap.events, snap.row_group_size)
                return self.commit(written, extra_update, expect_version=snap.version, watermark=watermark)
            except BaseException:
                for p in written:
                    for f in p.files:
                        (self.root / PARTS / f).unlink(missing_ok=True)
                raise

    def _write_parts(self, table: pa.Table, first_seq: int, row_group_size: int,
                     index_attrs: Sequence[str] | None = None, footprint: float | None = None) -> list[PartInfo]:
        """Write ``table`` as parts of at most ``part_rows`` rows; all of them, or none remain."""
        parts: list[PartInfo] = []
        try:
            for offset in range(0, table.num_rows, self.part_rows):
                chunk = table.slice(offset, self.part_rows)
                parts.append(self.write_part(chunk, first_seq + offset, row_group_size=row_group_size,
                                             index_attrs=index_attrs, footprint=footprint))
        except BaseException:
            for p in parts:
                for f in p.files:
                    (self.root / PARTS / f).unlink(missing_ok=True)
            raise
        return parts

    def _next_snapshot(self, current: Snapshot, parts: Sequence[PartInfo],
                       extra_update: Mapping[str, Any] | None, watermark: int | None = None) -> Snapshot:
        events, last_ts = current.events, current.last_ts
        if parts and current.watermark is not None and parts[0].min_ts <= current.watermark:
            raise Conflict(f"part {parts[0].file} is not after the watermark ({iso_of_micros(parts[0].min_ts)} <= "
                           f"{iso_of_micros(current.watermark)})", where=str(self.root))
        counts = dict(current.type_counts)
        attrs = current.attr_types()
        for p in parts:
            if p.first_seq != events:
                raise Conflict(f"part {p.file} starts at seq {p.first_seq}, the stream continues at {events}",
                               where=str(self.root))
            if last_ts is not None and p.min_ts < last_ts:
                raise Conflict(f"part {p.file} goes back in time ({iso_of_micros(p.min_ts)} < last event "
                               f"{iso_of_micros(last_ts)})", where=str(self.root))
            events, last_ts = p.last_seq + 1, p.max_ts
            for typ, n in p.type_counts:
                counts[typ] = counts.get(typ, 0) + n
            attrs = unify_attr_types(attrs, {k: type_from_name(v) for k, v in p.attrs})
        extra = _updated(current.extra, extra_update)
        first_ts = current.first_ts if current.first_ts is not None else (parts[0].min_ts if parts else None)
        if watermark is not None:
            check_watermark(watermark, last_ts, current.watermark)
        return dataclasses.replace(
            current, version=current.version + 1, events=events, first_ts=first_ts, last_ts=last_ts,
            parts=current.parts + tuple(parts), type_counts=MappingProxyType(counts),
            attrs=MappingProxyType({k: type_name(v) for k, v in attrs.items()}), extra=MappingProxyType(extra),
            watermark=current.watermark if watermark is None else watermark)

    def _replaced(self, current: Snapshot, parts: Sequence[PartInfo], replace: Sequence[str],
                  extra_update: Mapping[str, Any] | None) -> Snapshot:
        """``current`` with the parts of the files ``replace`` (a contiguous run) replaced by ``parts`` (a
        merge: the same seqs in fewer files)."""
        files = set(replace)
        run = [i for i, p in enumerate(current.parts) if p.file in files]
        if len(run) != len(files) or run != list(range(run[0], run[0] + len(run))):
            raise Conflict("the parts to replace are no longer a run of this dataset (a retention or another "
                           "merge took some meanwhile)", where=str(self.root))
        old = current.parts[run[0]:run[-1] + 1]
        new = sorted(parts, key=lambda p: p.first_seq)
        seqs = [(p.first_seq, p.last_seq) for p in new]
        if (not new or seqs[0][0] != old[0].first_seq or seqs[-1][1] != old[-1].last_seq
                or any(a[1] + 1 != b[0] for a, b in zip(seqs, seqs[1:], strict=False))):
            raise Conflict("a merged part must hold exactly the seqs of the parts it replaces", where=str(self.root))
        attrs = current.attr_types()
        for p in new:
            attrs = unify_attr_types(attrs, {k: type_from_name(v) for k, v in p.attrs})
        return dataclasses.replace(
            current, version=current.version + 1,
            parts=current.parts[:run[0]] + tuple(new) + current.parts[run[-1] + 1:],
            attrs=MappingProxyType({k: type_name(v) for k, v in attrs.items()}),
            extra=MappingProxyType(_updated(current.extra, extra_update)),
            removed=current.removed + tuple((f, time.time()) for p in old for f in p.files))

    def _retired(self, current: Snapshot, retire: Sequence[str], counts: Mapping[str, int],
                 extra_update: Mapping[str, Any] | None) -> Snapshot:
        """``current`` without its first parts, the files ``retire`` (retention: a prefix of the stream)."""
        files = set(retire)
        k = len(files)
        if [p.file for p in current.parts[:k]] != [p.file for p in current.parts if p.file in files] \
                or len([p for p in current.parts if p.file in files]) != k:
            raise Conflict("the parts to retire are no longer the first of this dataset", where=str(self.root))
        gone, kept = current.parts[:k], current.parts[k:]
        left = dict(current.type_counts)
        for typ, n in counts.items():
            if left.get(typ, 0) < n:
                raise Conflict(f"retiring {n} events of type {typ!r} where the dataset counts "
                               f"{left.get(typ, 0)}", where=str(self.root))
            left[typ] -= n
            if not left[typ]:
                del left[typ]
        if sum(counts.values()) != sum(p.rows for p in gone):
            raise Conflict("the counts of the retired events do not add up to their parts' rows",
                           where=str(self.root))
        return dataclasses.replace(
            current, version=current.version + 1, parts=kept, type_counts=MappingProxyType(left),
            first_ts=kept[0].min_ts if kept else None,
            retained_from=kept[0].first_seq if kept else current.events,
            extra=MappingProxyType(_updated(current.extra, extra_update)),
            removed=current.removed + tuple((f, time.time()) for p in gone for f in p.files))

    def _publish(self, snap: Snapshot, before: Snapshot | None = None) -> Snapshot:
        """Publish ``snap`` — as the next logged commit after ``before``, or as a checkpoint when there is no
        ``before`` (a new store) or enough commits were logged — then delete files no snapshot needs.
        Returns the snapshot as a reader sees it."""
        self._held = None  # (read again should this fail half-way)
        if self.remote is not None:
            return self._publish_remote(snap, before)
        had = {p.file for p in before.parts} if before is not None else set()
        # a commit that names new parts flushes their folder's entries with its own file, before publishing
        sync = [self.root / PARTS] if any(p.file not in had for p in snap.parts) else []
        logged = before is not None and before.version > 0
        if logged:
            assert before is not None
            change = Change.between(before, snap, time.time())
            write_change(self.root, change, sync_dirs=sync)
            snap = before.apply(change)
        checkpoint = before is None or before.version == 0 or snap.version - snap.checkpoint >= CHECKPOINT_EVERY
        key = str(self.root)
        if checkpoint or time.monotonic() - _CLEANED.get(key, -math.inf) >= CLEAN_EVERY_S:
            self._clean_orphans(snap)  # (a listing of the parts' folder: once in a while, not per append)
            _CLEANED[key] = time.monotonic()
        if checkpoint:
            here = {f.name for f in (self.root / PARTS).iterdir()} if (self.root / PARTS).is_dir() else set()
            kept = tuple(r for r in snap.removed if r[0] in here)
            snap = dataclasses.replace(snap, removed=kept, checkpoint=snap.version,
                                       committed=snap.committed or time.time())
            write_manifest(self.root, snap, sync_dirs=() if logged else sync)
            drop_log(self.root, snap.version)
        self._held = snap
        return snap

    def _publish_remote(self, snap: Snapshot, before: Snapshot | None) -> Snapshot:
        """Publish ``snap`` after ``before`` on a replica's bucket: the files it names anew uploaded, then its
        change as the log's next version (:class:`Conflict` if another server published that version first:
        nothing of this commit is then visible)."""
        from exact.store.replica import commit_files, upload

        assert self.remote is not None
        if before is None or before.version == 0:
            raise Conflict("a store on object storage is created by a build, not by a commit",
                           where=self.remote.uri)
        upload(self.remote, self.root.parent, commit_files(before, snap))
        snap = self.remote.commit(before, dataclasses.replace(snap, version=before.version + 1))
        key = str(self.root)
        if time.monotonic() - _CLEANED.get(key, -math.inf) >= CLEAN_EVERY_S:
            self._clean_orphans(snap)  # (this server's copies of parts no commit names)
            _CLEANED[key] = time.monotonic()
        self._held = snap
        return snap

    def _clean_orphans(self, snap: Snapshot | None = None) -> None:
        """Delete the part files commits removed more than :data:`REMOVED_GRACE_S` ago, and part and temp
        files no snapshot names that are older than that (left by a write or merge that died); only ever
        called holding the lock."""
        snap = snap or self.snapshot_or_empty()
        named = {f for p in snap.parts for f in p.files}
        now = time.time()
        removed = dict(snap.removed)
        parts_dir = self.root / PARTS
        if parts_dir.is_dir():
            for f in parts_dir.iterdir():
                if f.name in named or not (f.name.startswith(".tmp-") or f.name.startswith("part-")):
                    continue
                since = removed.get(f.name)
                if since is None:
                    try:
                        since = f.stat().st_mtime  # (not removed by a commit: a dead write's, or one under way)
                    except FileNotFoundError:
                        continue
                if now - since > REMOVED_GRACE_S:
                    f.unlink(missing_ok=True)
        for f in self.root.glob(f".{MANIFEST}.*.tmp"):
            f.unlink(missing_ok=True)
        # a Spark job's staging beside the store is made and removed under this lock: any left is a dead job's
        for d in self.root.parent.glob(".spark-staging-*"):
            shutil.rmtree(d, ignore_errors=True)


def _updated(extra: Mapping[str, Any], update: Mapping[str, Any] | None) -> dict[str, Any]:
    """``extra`` with ``update`` merged in (a key whose value is None removed)."""
    out = dict(extra)
    for key, value in (update or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _dictionary_columns(table: pa.Table) -> list[str]:
    """Leaf column paths of ``table`` to dictionary-encode: every one but seq and ts."""
    out = [TYPE]
    if ATTRS in table.column_names:
        out += [f"{ATTRS}.{f.name}" for f in table.schema.field(ATTRS).type]
    return out


def index_bytes_per_event(extra: Mapping[str, Any] | None, events: int | None) -> float | None:
    """The bytes per event of the files a store's ``extra`` names beside its parts (the trees, the partition
    layout, a decayed summary: each entry with a ``file`` and its ``bytes``), over ``events``; None when it
    names none or there are no events (not known yet)."""
    sizes = [int(v["bytes"]) for v in (extra or {}).values()
             if isinstance(v, Mapping) and "file" in v and isinstance(v.get("bytes"), int)]
    if not sizes or not events:
        return None
    return sum(sizes) / events


def _part_info(path: Path, table: pa.Table, first_seq: int, seek_bytes: int = 0,
               seek_attrs: tuple[tuple[str, int], ...] = (),
               seek_sections: tuple[tuple[str, int], ...] = ()) -> PartInfo:
    md = pq.ParquetFile(path).metadata
    groups = []
    start = first_seq
    for i in range(md.num_row_groups):
        n = md.row_group(i).num_rows
        groups.append((start, start + n - 1))
        start += n
    ts = table.column(TS).combine_chunks().view(pa.int64())
    counts = pc.value_counts(table.column(TYPE).combine_chunks())
    type_counts = tuple(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(),
                            strict=True))
    return PartInfo(file=path.name, first_seq=first_seq, last_seq=first_seq + table.num_rows - 1,
                    rows=table.num_rows, min_ts=ts[0].as_py(), max_ts=ts[-1].as_py(),
                    row_groups=tuple(groups),
                    attrs=tuple((k, type_name(v)) for k, v in attr_types(table.schema).items()),
                    bytes=path.stat().st_size, seek_bytes=seek_bytes, seek_attrs=seek_attrs,
                    seek_sections=seek_sections, type_counts=type_counts)

