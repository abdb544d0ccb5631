"""The event store: a dataset's stream as seq-sorted Parquet parts behind one atomically replaced manifest.

Layout under ``$SEQSKETCH_HOME/datasets/<name>/store/``::

    manifest.json            the one snapshot pointer (replaced atomically: temp file, fsync, os.replace)
    parts/part-<first_seq>-<id>.parquet
    .lock                    advisory lock held by writers

A part holds a contiguous seq range in seq order, written in row groups of ``row_group_size`` rows.  The
manifest records each part's row-group seq ranges, so a read of ``[start_seq, end_seq]`` opens only the parts
and row groups that overlap it (:meth:`EventStore.plan`).  Parts are immutable once written; an append adds
parts and publishes them with one manifest replace, together with any ``extra`` the index wants published
with them (its current version), so readers never see events without the index that covers them or the
reverse.

Writers (``append``, ``commit``) hold an exclusive lock on ``.lock``; a caller that calls
:meth:`EventStore.write_part` and then :meth:`EventStore.commit` itself holds :meth:`EventStore.writing`
across both.  Files in ``parts/`` that the manifest does not name (left by a crash or a rejected batch) are
never read and are deleted by the next write.

Each part keeps its own schema; a snapshot's ``attrs`` is the widening of all parts' attribute types
(:func:`exact.events.widen`), and reads cast every batch to it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exact.errors import Conflict, InputError, NotFound, SeqsketchError, StoreCorrupt
from exact.events import (
    ATTRS,
    SEQ,
    SEQ_TYPE,
    TS,
    TS_TYPE,
    TYPE,
    attr_types,
    conform_attrs,
    event_schema,
    finish_table,
    iso_of_micros,
    type_from_name,
    type_name,
    unify_attr_types,
)
from exact.ingest import order_by_time, with_seq
from exact.prefilter import EventFrame
from exact.runs import joined, run_positions
from exact.seek import SUFFIX as SEEK_SUFFIX
from exact.seek import SeekFile, SeekUnavailable, open_seek, seek_name, ts_of
from exact.seek import select as select_rows
from exact.seek import write as write_seek

_log = logging.getLogger(__name__)

FORMAT = "seqsketch-event-store"
FORMAT_VERSION = 1
DEFAULT_ROW_GROUP_SIZE = 8192
#: Rows per part file when a large table is written at once (a build); appends make one part each.
DEFAULT_PART_ROWS = 1 << 20
MANIFEST = "manifest.json"
PARTS = "parts"
_LOCK = ".lock"
_DATASET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
COLUMNS = (SEQ, TS, TYPE, ATTRS)


# --------------------------------------------------------------------------------------- dataset paths


def seqsketch_home() -> Path:
    """The data root: ``$SEQSKETCH_HOME``, default ``./.seqsketch``."""
    return Path(os.environ.get("SEQSKETCH_HOME") or ".seqsketch").absolute()


def check_dataset_name(name: str) -> str:
    """``name`` if it is a valid dataset name (``[a-z0-9][a-z0-9_-]{0,63}``), else an :class:`InputError`."""
    if not isinstance(name, str) or not _DATASET_NAME.fullmatch(name):
        raise InputError(f"invalid dataset name {name!r}: use 1-64 characters of a-z, 0-9, '_' and '-', "
                         "starting with a letter or digit", where="dataset name")
    return name


def datasets_dir(home: Path | None = None) -> Path:
    return (home or seqsketch_home()) / "datasets"


def dataset_dir(name: str, home: Path | None = None) -> Path:
    return datasets_dir(home) / check_dataset_name(name)


def store_dir(dataset: Path) -> Path:
    """The event store's root inside a dataset directory."""
    return dataset / "store"


def dataset_names(home: Path | None = None) -> list[str]:
    """Names of the datasets under ``home`` that have a committed store, sorted."""
    root = datasets_dir(home)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if _DATASET_NAME.fullmatch(p.name) and (store_dir(p) / MANIFEST).is_file())


@contextmanager
def staged_dataset(name: str, home: Path | None = None, *, replace: bool = False) -> Iterator[Path]:
    """A fresh directory in which to build dataset ``name``; it becomes the dataset when the block succeeds.

    A failing block removes the directory, so a failed build leaves nothing behind.  An existing dataset is
    refused with :class:`Conflict` unless ``replace``; then it is swapped out only once the new one is
    complete.  The stage is owned through a lock file beside it that the system releases when its process
    dies, so that what a killed build left is found and swept by the next one (:func:`sweep_abandoned`).
    """
    final = dataset_dir(name, home)
    if final.exists() and not replace:
        raise Conflict(f"dataset {name!r} exists already (use --replace to rebuild it)", where=str(final))
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_abandoned(final.parent)
    key = f"{name}-{uuid.uuid4().hex[:8]}"
    stage = final.parent / f"{_STAGING}{key}"
    with _owned(final.parent / f"{_STAGING}{key}{_OWNER}"):
        stage.mkdir()
        try:
            yield stage
            if final.exists() and not replace:
                raise Conflict(f"dataset {name!r} was created meanwhile", where=str(final))
            if final.exists():
                if _exchange(stage, final):  # one atomic step: the stage now holds the old dataset
                    shutil.rmtree(stage, ignore_errors=True)
                else:
                    # Two steps where the system cannot swap directories: a crash between them leaves the
                    # old dataset in .trash-KEY, which the next sweep renames back.
                    trash = final.parent / f"{_TRASH}{key}"
                    os.replace(final, trash)
                    os.replace(stage, final)
                    shutil.rmtree(trash, ignore_errors=True)
            else:
                os.replace(stage, final)
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)


_STAGING, _TRASH, _OWNER = ".staging-", ".trash-", ".owner"
_STAGE_KEY = re.compile(rf"(?P<name>{_DATASET_NAME.pattern})-[0-9a-f]{{8}}")  # a stage's dataset and token


@contextmanager
def _owned(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the file ``path`` (made if missing) for the block, then delete the file.

    Yields False at once (holding nothing) when ``wait`` is off and another process holds it.  A lock taken on
    a file that was deleted meanwhile (by a sweeper that held it) is retaken on a new file.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            yield False
            return
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield True
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def sweep_abandoned(datasets: Path) -> list[str]:
    """Clean up after builds whose process died (the owner lock of their stage is free): their stage is
    deleted and, where a ``--replace`` died between its two renames, the old dataset moved back from its
    trash directory.  Stages of running builds are left alone.  Returns the stage keys swept."""
    if not datasets.is_dir():
        return []
    keys = set()
    for entry in datasets.iterdir():
        if entry.name.startswith(_STAGING):
            key = entry.name[len(_STAGING):].removesuffix(_OWNER)
        elif entry.name.startswith(_TRASH):
            key = entry.name[len(_TRASH):]
        else:
            continue
        if _STAGE_KEY.fullmatch(key):
            keys.add(key)
    swept = []
    for key in sorted(keys):
        with _owned(datasets / f"{_STAGING}{key}{_OWNER}", wait=False) as free:
            if not free:
                continue  # its build is running
            final = datasets / _STAGE_KEY.fullmatch(key)["name"]  # type: ignore[index]
            trash = datasets / f"{_TRASH}{key}"
            if trash.is_dir():
                if final.exists():
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    os.replace(trash, final)  # the replace died between its renames: keep the old dataset
            shutil.rmtree(datasets / f"{_STAGING}{key}", ignore_errors=True)
            swept.append(key)
    return swept


# ------------------------------------------------------------------------------------------ snapshots


@dataclass(frozen=True)
class PartInfo:
    """One part file: its seq range, row count, ts range, row-group seq ranges and attribute types."""

    file: str
    first_seq: int
    last_seq: int
    rows: int
    min_ts: int
    max_ts: int
    row_groups: tuple[tuple[int, int], ...]
    attrs: tuple[tuple[str, str], ...] = ()
    bytes: int = 0
    #: Size of the part's seek file (:mod:`exact.seek`); 0 = none (a part written before seek files).
    seek_bytes: int = 0
    #: Per-type counts of this part; carried from write_part to commit, not persisted per part.
    type_counts: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "first_seq": self.first_seq, "last_seq": self.last_seq,
                "rows": self.rows, "min_ts": self.min_ts, "max_ts": self.max_ts,
                "row_groups": [list(r) for r in self.row_groups], "attrs": dict(self.attrs),
                "bytes": self.bytes} | ({"seek_bytes": self.seek_bytes} if self.seek_bytes else {})

    @property
    def files(self) -> tuple[str, ...]:
        """Every file of the part: the Parquet file and its seek file."""
        return (self.file,) if not self.seek_bytes else (self.file, seek_name(self.file))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PartInfo:
        return cls(file=d["file"], first_seq=d["first_seq"], last_seq=d["last_seq"], rows=d["rows"],
                   min_ts=d["min_ts"], max_ts=d["max_ts"],
                   row_groups=tuple((int(a), int(b)) for a, b in d["row_groups"]),
                   attrs=tuple(d.get("attrs", {}).items()), bytes=d.get("bytes", 0),
                   seek_bytes=d.get("seek_bytes", 0))


#: The rows of one part read from its seek file: the part, its seek file, the rows, their type codes.
_SeekRows = tuple[PartInfo, SeekFile, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Snapshot:
    """One committed state of the store (a manifest).  ``first_ts``/``last_ts`` are UTC microseconds."""

    version: int
    events: int
    first_ts: int | None
    last_ts: int | None
    parts: tuple[PartInfo, ...]
    type_counts: Mapping[str, int]
    attrs: Mapping[str, str]
    extra: Mapping[str, Any]
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE

    def attr_types(self) -> dict[str, pa.DataType]:
        return {n: type_from_name(t) for n, t in self.attrs.items()}

    @cached_property
    def group_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every row group of the snapshot in seq order: its first and last seq, its part's index in
        ``parts`` and its index within that part (for planning many ranges at once)."""
        firsts, lasts, part_of, index = [], [], [], []
        for i, part in enumerate(self.parts):
            for j, (a, b) in enumerate(part.row_groups):
                firsts.append(a)
                lasts.append(b)
                part_of.append(i)
                index.append(j)
        return (np.asarray(firsts, dtype=np.int64), np.asarray(lasts, dtype=np.int64),
                np.asarray(part_of, dtype=np.int64), np.asarray(index, dtype=np.int64))

    def groups_of(self, ranges: Sequence[tuple[int, int]]) -> list[tuple[PartInfo, list[int]]]:
        """The parts and row groups (sorted) that the seq ``ranges`` (inclusive) meet, each group once."""
        firsts, lasts, part_of, index = self.group_layout
        bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        if not len(firsts) or not len(bounds):
            return []
        lo = np.searchsorted(lasts, bounds[:, 0], "left")
        hi = np.searchsorted(firsts, bounds[:, 1], "right")
        ok = lo < hi
        size = len(firsts) + 1
        marks = np.bincount(lo[ok], minlength=size) - np.bincount(hi[ok], minlength=size)
        wanted = np.flatnonzero(np.cumsum(marks[:-1]) > 0)
        out = []
        for i in np.unique(part_of[wanted]).tolist():
            out.append((self.parts[i], index[wanted[part_of[wanted] == i]].tolist()))
        return out

    def parts_in(self, bounds: np.ndarray) -> list[tuple[PartInfo, np.ndarray]]:
        """The parts that the seq ranges ``bounds`` ((n, 2), inclusive, sorted, disjoint, none empty) meet,
        each with the ranges clipped to it."""
        firsts, lasts = self.part_seqs
        start = np.searchsorted(bounds[:, 1], firsts, "left")  # the first range that ends in or after a part
        stop = np.searchsorted(bounds[:, 0], lasts, "right")  # after the last range that starts in or before
        out = []
        for i in np.flatnonzero(start < stop).tolist():
            inside = bounds[start[i]:stop[i]].copy()
            inside[0, 0] = max(inside[0, 0], firsts[i])
            inside[-1, 1] = min(inside[-1, 1], lasts[i])
            out.append((self.parts[i], inside))
        return out

    @cached_property
    def part_seqs(self) -> tuple[np.ndarray, np.ndarray]:
        """Each part's first and last seq."""
        return (np.asarray([p.first_seq for p in self.parts], dtype=np.int64),
                np.asarray([p.last_seq for p in self.parts], dtype=np.int64))

    def schema(self) -> pa.Schema:
        return self._schema

    @cached_property
    def _schema(self) -> pa.Schema:
        return event_schema(self.attr_types())

    def read_schema(self, cols: Sequence[str], type_dictionary: bool) -> pa.Schema:
        """The schema of a read of ``cols`` (``type`` as :data:`TYPE_DICTIONARY` with ``type_dictionary``),
        made once per snapshot: a read of a few hundred rows costs little more than making it."""
        key = (tuple(cols), type_dictionary)
        found = self._read_schemas.get(key)
        if found is None:
            fields = [self._schema.field(c) for c in cols]
            if type_dictionary:
                fields = [f.with_type(TYPE_DICTIONARY) if f.name == TYPE else f for f in fields]
            found = self._read_schemas[key] = pa.schema(fields)
        return found

    @cached_property
    def _read_schemas(self) -> dict[tuple[tuple[str, ...], bool], pa.Schema]:
        return {}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "events": self.events, "first_ts": self.first_ts,
                "last_ts": self.last_ts, "row_group_size": self.row_group_size,
                "parts": [p.to_json() for p in self.parts], "type_counts": dict(self.type_counts),
                "attrs": dict(self.attrs), "extra": dict(self.extra), "format_version": FORMAT_VERSION}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Snapshot:
        return cls(version=d["version"], events=d["events"], first_ts=d["first_ts"], last_ts=d["last_ts"],
                   parts=tuple(PartInfo.from_json(p) for p in d["parts"]),
                   # read-only views: a snapshot is shared (cached) and must not change under its readers
                   type_counts=MappingProxyType(d["type_counts"]), attrs=MappingProxyType(d["attrs"]),
                   extra=MappingProxyType(d.get("extra", {})),
                   row_group_size=d.get("row_group_size", DEFAULT_ROW_GROUP_SIZE))


def _empty_snapshot(row_group_size: int) -> Snapshot:
    return Snapshot(version=0, events=0, first_ts=None, last_ts=None, parts=(), type_counts={}, attrs={},
                    extra={}, row_group_size=row_group_size)


# ------------------------------------------------------------------------------------------ the store


class EventStore:
    """A dataset's event store at ``root`` (see the module docstring); see :meth:`create`, :meth:`open`."""

    def __init__(self, root: Path, *, part_rows: int = DEFAULT_PART_ROWS) -> None:
        self.root = Path(root)
        self.part_rows = part_rows
        self._lock = threading.RLock()
        self._lock_depth = 0
        self._lock_file: Any = None
        # The last manifest read, keyed by its file identity: os.replace gives every commit a new inode.
        self._cached: tuple[tuple[int, int, int], Snapshot] | None = None
        self._seek_paths: dict[str, str] = {}  # part file → its seek file path (names are never reused)

    # -- opening

    @classmethod
    def create(cls, root: str | Path, table: pa.Table | None = None, *,
               row_group_size: int = DEFAULT_ROW_GROUP_SIZE, part_rows: int = DEFAULT_PART_ROWS,
               extra: Mapping[str, Any] | None = None) -> EventStore:
        """A new store at ``root`` holding ``table`` (a stream table with ``seq`` from 0, in stream order).

        Refuses a ``root`` that already holds a store; on failure removes what it wrote.
        """
        root = Path(root)
        if (root / MANIFEST).exists():
            raise Conflict("an event store exists here already", where=str(root))
        if row_group_size < 1 or part_rows < 1:
            raise ValueError("row_group_size and part_rows must be positive")
        created = not root.exists()
        store = cls(root, part_rows=part_rows)
        try:
            (root / PARTS).mkdir(parents=True, exist_ok=True)
            empty = _empty_snapshot(row_group_size)
            with store.writing():
                parts = store._write_parts(table, 0, row_group_size) if table is not None else []
                store._publish(store._next_snapshot(empty, parts, extra))
        except BaseException:
            if created:
                shutil.rmtree(root, ignore_errors=True)
            raise
        return store

    @classmethod
    def open(cls, root: str | Path, *, part_rows: int = DEFAULT_PART_ROWS) -> EventStore:
        root = Path(root)
        if not (root / MANIFEST).is_file():
            raise NotFound("no event store here", where=str(root))
        return cls(root, part_rows=part_rows)

    # -- reading the manifest

    def snapshot(self) -> Snapshot:
        """The current committed state (re-read only when the manifest file was replaced)."""
        path = self.root / MANIFEST
        try:
            st = os.stat(path)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._cached is not None and self._cached[0] == key:
                return self._cached[1]
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound("no event store here", where=str(self.root)) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SeqsketchError(f"unreadable manifest: {err}", where=str(path)) from None
        if data.get("format") != FORMAT:
            raise SeqsketchError(f"not a seqsketch event store manifest (format {data.get('format')!r})",
                                 where=str(path))
        snap = Snapshot.from_json(data)
        self._cached = (key, snap)
        return snap

    def seek_bytes(self, snapshot: Snapshot | None = None) -> int:
        """Bytes on disk of the snapshot's seek files (a part of :meth:`size_bytes`)."""
        return sum(p.seek_bytes for p in (snapshot or self.snapshot()).parts)

    def size_bytes(self, snapshot: Snapshot | None = None) -> int:
        """Bytes on disk of the snapshot's parts (with their seek files) and the manifest."""
        snap = snapshot or self.snapshot()
        return sum(p.bytes + p.seek_bytes for p in snap.parts) + (self.root / MANIFEST).stat().st_size

    # -- writing

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the store's writer lock (re-entrant within this object; exclusive across processes)."""
        with self._lock:
            if self._lock_depth == 0:
                self.root.mkdir(parents=True, exist_ok=True)
                self._lock_file = open(self.root / _LOCK, "a+")  # noqa: SIM115 - held across the block
                fcntl.flock(self._lock_file, fcntl.LOCK_EX)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    fcntl.flock(self._lock_file, fcntl.LOCK_UN)
                    self._lock_file.close()
                    self._lock_file = None

    def write_part(self, table: pa.Table, first_seq: int, *, row_group_size: int | None = None) -> PartInfo:
        """Write one part (not yet visible: :meth:`commit` publishes it).

        ``table`` is a stream table whose ``seq`` runs ``first_seq, first_seq+1, …`` and whose ts never
        decreases.  Its Parquet file and its seek file (:mod:`exact.seek`) are each written under a
        temporary name, fsynced, then renamed.
        """
        _check_part_table(table, first_seq)
        size = row_group_size or self.snapshot_or_empty().row_group_size
        parts_dir = self.root / PARTS
        parts_dir.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex[:12]
        tmp = parts_dir / f".tmp-{token}.parquet"
        final = parts_dir / f"part-{first_seq:012d}-{token}.parquet"
        seek_tmp = parts_dir / f".tmp-{token}{SEEK_SUFFIX}"
        seek_final = parts_dir / seek_name(final.name)
        table = finish_table(table).combine_chunks()
        try:
            # The seek file first: a part on disk always has its seek file beside it.
            seek_bytes = write_seek(seek_tmp, table.column(TS).combine_chunks().view(pa.int64()).to_numpy(),
                                    table.column(TYPE).combine_chunks())
            os.replace(seek_tmp, seek_final)
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
            _fsync_file(tmp)
            os.replace(tmp, final)
            _fsync_dir(parts_dir)
        except BaseException:
            for f in (tmp, final, seek_tmp, seek_final):
                f.unlink(missing_ok=True)
            raise
        return _part_info(final, table, first_seq, seek_bytes)

    def commit(self, parts: Sequence[PartInfo] = (), extra_update: Mapping[str, Any] | None = None, *,
               expect_version: int | None = None) -> Snapshot:
        """Publish ``parts`` (which continue the stream) and merge ``extra_update`` in one manifest replace.

        With ``expect_version``, raises :class:`Conflict` if another commit happened since that version
        (optimistic concurrency).  A key of ``extra_update`` whose value is ``None`` is removed.
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
            snap = self._next_snapshot(current, parts, extra_update)
            self._publish(snap)
            return snap

    def append(self, table: pa.Table, *, extra_update: Mapping[str, Any] | None = None) -> Snapshot:
        """Add events (a stream table without ``seq``) at the end of the stream, all or nothing.

        The batch is ordered by ts (stable) and numbered after the last event.  If any event is older than
        the dataset's last ts the whole batch is rejected with :class:`Conflict` and nothing is written
        (equal ts is fine: ties keep input order, after the events already stored).
        """
        with self.writing():
            snap = self.snapshot()
            if table.num_rows == 0 and not extra_update:
                return snap
            if SEQ in table.column_names:
                table = table.drop_columns([SEQ])
            table = order_by_time(table)
            _check_not_older(table, snap)
            stream = with_seq(table, snap.events)
            written: list[PartInfo] = []
            try:
                if stream.num_rows:
                    written = self._write_parts(stream, snap.events, snap.row_group_size)
                return self.commit(written, extra_update, expect_version=snap.version)
            except BaseException:
                for p in written:
                    for f in p.files:
                        (self.root / PARTS / f).unlink(missing_ok=True)
                raise

    def _write_parts(self, table: pa.Table, first_seq: int, row_group_size: int) -> list[PartInfo]:
        """Write ``table`` as parts of at most ``part_rows`` rows; all of them, or none remain."""
        self._clean_orphans()
        parts: list[PartInfo] = []
        try:
            for offset in range(0, table.num_rows, self.part_rows):
                chunk = table.slice(offset, self.part_rows)
                parts.append(self.write_part(chunk, first_seq + offset, row_group_size=row_group_size))
        except BaseException:
            for p in parts:
                for f in p.files:
                    (self.root / PARTS / f).unlink(missing_ok=True)
            raise
        return parts

    def snapshot_or_empty(self) -> Snapshot:
        try:
            return self.snapshot()
        except NotFound:
            return _empty_snapshot(DEFAULT_ROW_GROUP_SIZE)

    def _next_snapshot(self, current: Snapshot, parts: Sequence[PartInfo],
                       extra_update: Mapping[str, Any] | None) -> Snapshot:
        events, last_ts = current.events, current.last_ts
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
        extra = dict(current.extra)
        for key, value in (extra_update or {}).items():
            if value is None:
                extra.pop(key, None)
            else:
                extra[key] = value
        first_ts = current.first_ts if current.first_ts is not None else (parts[0].min_ts if parts else None)
        return Snapshot(version=current.version + 1, events=events, first_ts=first_ts, last_ts=last_ts,
                        parts=current.parts + tuple(parts), type_counts=counts,
                        attrs={k: type_name(v) for k, v in attrs.items()}, extra=extra,
                        row_group_size=current.row_group_size)

    def _publish(self, snap: Snapshot) -> None:
        """Replace the manifest atomically, then delete files no snapshot names any more."""
        path = self.root / MANIFEST
        tmp = self.root / f".{MANIFEST}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(snap.to_json(), fh, separators=(",", ":"))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            _fsync_dir(self.root)
        finally:
            tmp.unlink(missing_ok=True)
        self._clean_orphans(snap)

    def _clean_orphans(self, snap: Snapshot | None = None) -> None:
        """Delete part and temp files the manifest does not name (only ever called holding the lock)."""
        snap = snap or self.snapshot_or_empty()
        named = {f for p in snap.parts for f in p.files}
        parts_dir = self.root / PARTS
        if parts_dir.is_dir():
            for f in parts_dir.iterdir():
                if f.name not in named and (f.name.startswith(".tmp-") or f.name.startswith("part-")):
                    f.unlink(missing_ok=True)
        for f in self.root.glob(f".{MANIFEST}.*.tmp"):
            f.unlink(missing_ok=True)
        # a Spark job's staging beside the store is made and removed under this lock: any left is a dead job's
        for d in self.root.parent.glob(".spark-staging-*"):
            shutil.rmtree(d, ignore_errors=True)

    # -- reading events

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

        ``columns`` picks among ``seq``, ``ts``, ``type``, ``attrs`` (default all); every batch has the
        snapshot's unified schema, but with ``type_dictionary`` ``type`` stays dictionary-encoded as
        stored (one dictionary per part; the exact engine works on the codes, and decoding every row to a
        string costs more than the rest of a scan).  Only the row groups that overlap the range are read.
        """
        snap = snapshot or self.snapshot()
        cols = _columns(columns, snap)
        attrs = snap.attr_types()
        end = snap.events - 1 if end_seq is None else end_seq
        for part, groups in self.plan(start_seq, end, snap):
            if not groups:
                continue
            table = self._read_groups(part, groups, cols)
            first = part.row_groups[groups[0]][0]
            lo = max(start_seq - first, 0)
            hi = min(end - first + 1, table.num_rows)
            table = table.slice(lo, max(hi - lo, 0))
            yield from conform_columns(table, cols, attrs, type_dictionary=type_dictionary).to_batches()

    def read_ranges(self, ranges: Sequence[tuple[int, int]], columns: Sequence[str] | None = None,
                    types: frozenset[str] | None = None, snapshot: Snapshot | None = None, *,
                    type_dictionary: bool = False) -> tuple[pa.Table, int]:
        """The events inside the seq ``ranges`` (inclusive, sorted, disjoint) — only those of ``types``
        unless None — as one seq-sorted table in the snapshot's schema, and the rows decoded to find them.

        Without ``attrs``, a part with a seek file (:mod:`exact.seek`) is read in place: only the rows in
        the ranges are touched, and only those of ``types`` converted; "decoded" counts the rows in the
        ranges.  Otherwise each part meeting a range is opened once and every row group it needs decoded in
        one call.  ``seq`` is never decoded (a part's rows are consecutive seqs, so a row's seq is its
        position), rows are selected before anything is converted, and ``type`` is tested once per row
        group's dictionary, so the cost beyond decoding follows the rows kept.  ``type_dictionary`` as in
        :meth:`read`.
        """
        snap = snapshot or self.snapshot()
        cols = _columns(columns, snap)
        schema = snap.read_schema(cols, type_dictionary)
        pieces, decoded = self._range_pieces(snap, ranges, cols, types, type_dictionary)
        return _pieces_table(pieces, schema), decoded

    def read_frame(self, ranges: Sequence[tuple[int, int]], columns: Sequence[str] | None = None,
                   types: frozenset[str] | None = None, snapshot: Snapshot | None = None
                   ) -> tuple[EventFrame, int]:
        """:meth:`read_ranges` (``type`` dictionary-encoded) as the exact engine's frame.  When every part
        is read from its seek file the frame is made of the numpy columns directly (its table only if a
        condition asks for one): the reads of a verification are small, and converting them to Arrow and
        back cost as much as finding them."""
        snap = snapshot or self.snapshot()
        cols = _columns(columns, snap)
        schema = snap.read_schema(cols, True)
        pieces, decoded = self._range_pieces(snap, ranges, cols, types, True)
        if len(pieces) == 1 and isinstance(pieces[0], list) and schema.names == [SEQ, TS, TYPE]:
            seq, ts, codes, dictionary, names = _seek_columns(pieces[0])
            return EventFrame.of_columns(seq, ts, codes, dictionary, names,
                                         lambda: _columns_table(seq, ts, codes, dictionary, schema)), decoded
        return EventFrame.build(_pieces_table(pieces, schema)), decoded

    def _range_pieces(self, snap: Snapshot, ranges: Sequence[tuple[int, int]], cols: list[str],
                      types: frozenset[str] | None, type_dictionary: bool
                      ) -> tuple[list[pa.Table | list[_SeekRows]], int]:
        """What :meth:`read_ranges` reads, in stream order: tables of parts read from Parquet, and for each
        run of consecutive parts read from seek files, their rows and type codes (part by part); and the
        rows decoded."""
        bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        bounds = bounds[bounds[:, 0] <= bounds[:, 1]]
        seekable = ATTRS not in cols
        value_set = None  # ``types`` as an Arrow array, made for the first part read from Parquet
        pieces: list[pa.Table | list[_SeekRows]] = []
        decoded = 0
        # consecutive parts read from seek files: their rows are selected together
        seeking: list[tuple[PartInfo, SeekFile, np.ndarray]] = []
        in_place: list[np.ndarray] = []  # the ranges read from seek files (their rows count as decoded)

        def flush() -> None:
            if seeking:
                found = select_rows([s for _, s, _ in seeking], [r for _, _, r in seeking], types)
                kept = [(part, seek, rows, codes)
                        for (part, seek, _), (rows, codes) in zip(seeking, found, strict=True) if len(rows)]
                if kept:
                    pieces.append(kept)
                seeking.clear()

        for part, inside in snap.parts_in(bounds):
            if seekable and part.seek_bytes:
                try:
                    seek = open_seek(self._seek_path(part), part.rows)
                except SeekUnavailable as err:
                    _log.warning("reading part %s from Parquet: its seek file cannot serve (%s)",
                                 part.file, err)
                else:
                    seeking.append((part, seek, inside - part.first_seq))
                    in_place.append(inside)
                    continue
            flush()
            if types is not None and value_set is None:
                value_set = pa.array(sorted(types), pa.string())
            kept, rows_read = self._parquet_ranges(snap, part, inside, cols, types, value_set,
                                                   type_dictionary)
            decoded += rows_read
            if kept is not None:
                pieces.append(kept)
        flush()
        if in_place:
            both = in_place[0] if len(in_place) == 1 else np.concatenate(in_place)
            decoded += int((both[:, 1] - both[:, 0]).sum()) + len(both)
        return pieces, decoded

    def _parquet_ranges(self, snap: Snapshot, part: PartInfo, inside: np.ndarray, cols: list[str],
                        types: frozenset[str] | None, value_set: pa.Array | None, type_dictionary: bool
                        ) -> tuple[pa.Table | None, int]:
        """The rows of ``part`` in ``inside`` (ranges within the part; of ``types``, as the Arrow array
        ``value_set``, unless None) from its Parquet file, in the snapshot's schema (None when there are
        none), and the rows decoded."""
        [(_, groups)] = snap.groups_of(inside)
        read_cols = [c for c in cols if c != SEQ]
        if types is not None and TYPE not in read_cols:
            read_cols.append(TYPE)
        raw = self._read_groups(part, groups, read_cols)
        rows, seq = _rows_in_ranges(part, groups, inside)
        if types is not None and len(rows):
            keep = type_mask(raw.column(TYPE), value_set, rows)
            rows, seq = rows[keep], seq[keep]
        if not len(rows):
            return None, raw.num_rows
        kept = raw.take(pa.array(rows)).append_column(SEQ, pa.array(seq))
        return conform_columns(kept, cols, snap.attr_types(), type_dictionary=type_dictionary), raw.num_rows

    def _seek_path(self, part: PartInfo) -> str:
        """The path of ``part``'s seek file (kept: a part's name is never reused)."""
        path = self._seek_paths.get(part.file)
        if path is None:
            path = self._seek_paths[part.file] = str(self.root / PARTS / seek_name(part.file))
        return path

    def _read_groups(self, part: PartInfo, groups: list[int], cols: list[str]) -> pa.Table:
        try:
            return _read_part(self.root / PARTS / part.file, part, groups, cols)
        except _PartMissing:
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
        cols = _columns(columns, snap)
        batches = list(self.read(start_seq, end_seq, cols, snap, type_dictionary=type_dictionary))
        return pa.Table.from_batches(batches, schema=snap.read_schema(cols, type_dictionary))


# ------------------------------------------------------------------------------------------- helpers


#: Footers of the parts read lately, by (path, size, mtime, inode): parts never change once written, and
#: parsing a footer costs about as much as decoding a few row groups.
_FOOTERS: dict[tuple[str, int, int, int], pq.FileMetaData] = {}
_FOOTERS_MAX = 256
_FOOTERS_LOCK = threading.Lock()


def open_part(path: Path, *, verify: bool = True) -> pq.ParquetFile:
    """A part file opened for reading, its footer parsed once per process.  ``type`` is read
    dictionary-encoded (a part stores it so; decoding to strings per row group costs more than one cast of
    the result).  ``verify`` checks the pages' CRCs as they are read."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    with _FOOTERS_LOCK:
        meta = _FOOTERS.get(key)
    pf = pq.ParquetFile(path, metadata=meta, page_checksum_verification=verify, read_dictionary=[TYPE])
    if meta is None:
        with _FOOTERS_LOCK:
            if len(_FOOTERS) >= _FOOTERS_MAX:
                _FOOTERS.pop(next(iter(_FOOTERS)))
            _FOOTERS[key] = pf.metadata
    return pf


class _PartMissing(StoreCorrupt):
    """A part named by a snapshot is not on disk (damage, or a dataset replaced under its reader)."""


def _dictionary_columns(table: pa.Table) -> list[str]:
    """Leaf column paths of ``table`` to dictionary-encode: every one but seq and ts."""
    out = [TYPE]
    if ATTRS in table.column_names:
        out += [f"{ATTRS}.{f.name}" for f in table.schema.field(ATTRS).type]
    return out


def _read_part(path: Path, part: PartInfo, groups: list[int], cols: list[str]) -> pa.Table:
    """Row groups of one part; a part whose size differs from the manifest's, whose pages fail their
    checksums or that cannot be decoded is :class:`StoreCorrupt`, never returned."""
    try:
        size = path.stat().st_size
        if part.bytes and size != part.bytes:
            raise StoreCorrupt(f"damaged event-store part: {size} bytes, the manifest says {part.bytes}",
                               where=str(path))
        pf = open_part(path)
        file_cols = [c for c in cols if c != ATTRS or ATTRS in pf.schema_arrow.names]
        table = pf.read_row_groups(groups, columns=file_cols)
    except FileNotFoundError:
        raise _PartMissing("event-store part is missing", where=str(path)) from None
    except (pa.ArrowException, OSError, ValueError) as err:
        raise StoreCorrupt(f"damaged event-store part: {err}", where=str(path)) from None
    if table.num_rows != sum(part.row_groups[g][1] - part.row_groups[g][0] + 1 for g in groups):
        raise StoreCorrupt("damaged event-store part: row counts differ from the manifest", where=str(path))
    return table


def _columns(columns: Sequence[str] | None, snap: Snapshot) -> list[str]:
    wanted = list(COLUMNS) if columns is None else list(columns)
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; choose from {COLUMNS}")
    return [c for c in COLUMNS if c in wanted and (c != ATTRS or snap.attrs)]


#: ``type`` as parts store it and :meth:`EventStore.read` keeps it on request.
TYPE_DICTIONARY = pa.dictionary(pa.int32(), pa.string())


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


def _pieces_table(pieces: list[pa.Table | list[_SeekRows]], schema: pa.Schema) -> pa.Table:
    """What :meth:`EventStore._range_pieces` read as one table of ``schema``."""
    tables = [_seek_table(p, schema) if isinstance(p, list) else p for p in pieces]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _seek_table(kept: Sequence[_SeekRows], schema: pa.Schema) -> pa.Table:
    """The rows (and their type codes) of consecutive parts read from their seek files as one table of
    ``schema`` (of seq, ts, type: a read's schema); ``type`` dictionary-encoded over the union of the
    parts' types (one dictionary: parts of one stream mostly share their types), or decoded when ``schema``
    says string.  The Arrow arrays wrap the numpy ones (their values are known valid)."""
    seq, ts, codes, dictionary, _ = _seek_columns(kept, schema.names)
    return _columns_table(seq, ts, codes, dictionary, schema)


def _seek_columns(kept: Sequence[_SeekRows], names: Sequence[str] = (SEQ, TS, TYPE)
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array, list[str]]:
    """:func:`_seek_table`'s columns as numpy arrays (those not in ``names`` empty): seq, ts (int64 µs),
    type codes (int32) into a dictionary, the dictionary, and its values."""
    seq = ts = codes = np.zeros(0, dtype=np.int64)
    if SEQ in names:
        seq = joined([rows + part.first_seq for part, _, rows, _ in kept])
    if TS in names:
        ts = ts_of([seek for _, seek, _, _ in kept], [rows for _, _, rows, _ in kept])
    first = kept[0][1]
    dictionary, types = first.dictionary, list(first.types)
    if TYPE in names:
        if all(seek.types == first.types for _, seek, _, _ in kept):
            codes = joined([codes for _, _, _, codes in kept]).astype(np.int32)
        else:
            types = sorted({t for _, seek, _, _ in kept for t in seek.types})
            dictionary = pa.array(types, pa.string())
            at = {t: i for i, t in enumerate(types)}
            codes = np.concatenate([np.asarray([at[t] for t in seek.types], dtype=np.int32)[codes]
                                    for _, seek, _, codes in kept])
    return seq, ts, codes, dictionary, types


def _columns_table(seq: np.ndarray, ts: np.ndarray, codes: np.ndarray, dictionary: pa.Array,
                   schema: pa.Schema) -> pa.Table:
    """seq, ts and type codes (as :func:`_seek_columns` makes them) as a table of ``schema``."""
    n = max(len(seq), len(ts), len(codes))
    arrays = []
    for name in schema.names:
        if name == SEQ:
            arrays.append(pa.Array.from_buffers(SEQ_TYPE, n, [None, pa.py_buffer(seq)]))
        elif name == TS:
            arrays.append(pa.Array.from_buffers(TS_TYPE, n, [None, pa.py_buffer(ts)]))
        else:
            column = pa.DictionaryArray.from_buffers(TYPE_DICTIONARY, n, [None, pa.py_buffer(codes)],
                                                     dictionary)
            arrays.append(column if schema.field(TYPE).type == TYPE_DICTIONARY else column.cast(pa.string()))
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=schema)])


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
              ) -> np.ndarray:
    """Per row (of ``rows`` only, when given): is its type in ``value_set``?  Dictionary-encoded chunks (as
    the store reads ``type``) share one dictionary, which is tested once; rows are then looked up by index."""
    if isinstance(column, pa.ChunkedArray):
        if pa.types.is_dictionary(column.type):
            column = column.unify_dictionaries()
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type) and column.null_count == 0:
        lut = pc.is_in(column.dictionary, value_set=value_set).to_numpy(zero_copy_only=False)
        index = column.indices.to_numpy(zero_copy_only=False)
        return lut[index if rows is None else index[rows]]
    if rows is not None:
        column = column.take(pa.array(rows))
    return pc.fill_null(pc.is_in(column, value_set=value_set), False).to_numpy(zero_copy_only=False)


def _check_part_table(table: pa.Table, first_seq: int) -> None:
    missing = [c for c in (SEQ, TS, TYPE) if c not in table.column_names]
    if missing:
        raise ValueError(f"a part needs columns seq, ts, type; missing {missing}")
    if table.num_rows == 0:
        raise ValueError("a part needs at least one event")
    seq = table.column(SEQ).to_numpy()
    if seq[0] != first_seq or not np.array_equal(seq, np.arange(first_seq, first_seq + len(seq))):
        raise ValueError(f"a part's seq must run {first_seq}, {first_seq + 1}, … without gaps")
    ts = table.column(TS).combine_chunks().view(pa.int64()).to_numpy(zero_copy_only=False)
    if len(ts) > 1 and not np.all(ts[1:] >= ts[:-1]):
        raise ValueError("a part's ts must not decrease along seq")


def _check_not_older(table: pa.Table, snap: Snapshot) -> None:
    if snap.last_ts is None or table.num_rows == 0:
        return
    ts = table.column(TS).combine_chunks().view(pa.int64())
    first = ts[0].as_py()  # ordered: the first is the oldest
    if first < snap.last_ts:
        older = int(pc.sum(pc.less(ts, snap.last_ts)).as_py())
        raise Conflict(f"{older} event(s) of the batch are older than the dataset's last event "
                       f"({iso_of_micros(first)} < {iso_of_micros(snap.last_ts)}); appends must not go back "
                       "in time, so nothing of this batch was written", where="append")


def _part_info(path: Path, table: pa.Table, first_seq: int, seek_bytes: int = 0) -> PartInfo:
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
                    bytes=path.stat().st_size, seek_bytes=seek_bytes, type_counts=type_counts)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Replacing a dataset directory by rename-away-then-rename-in would lose the dataset to a crash between the
    two renames; the exchange has no such gap.  False where the system or file system cannot do it.
    """
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        _fsync_dir(b.parent)
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
