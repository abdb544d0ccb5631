"""The event store's manifest: a checkpoint of the committed state, and the log of commits after it.

A store's state is a :class:`Snapshot` — the parts of the stream (:class:`PartInfo`: each part's seq and ts
range and its row-group seq ranges), the per-type counts, the unified attribute types, the ``extra``
published with them (the index version), the watermark and the first seq retained.  It is kept as

* ``manifest.json``, a **checkpoint**: a whole snapshot, replaced atomically
  (:func:`~exact.store.durable.write_manifest`: temp file, fsync, ``os.replace``, fsync of the directory); and
* ``log/<version>.json``, one small file per **commit** after it (:class:`Change`: the parts added and
  removed, the counts' change, the new scalars), created exclusively (a second writer of one version fails,
  so versions are published once, in order).

A commit therefore writes what it changes, not the whole state: its cost does not grow with the commits
before it.  Every :data:`CHECKPOINT_EVERY` commits the writer folds the log into a new checkpoint and drops
the log files it covers.  A reader reads the checkpoint (a few kilobytes: merges keep the parts few), then
applies the log files that follow it, in order, while they exist; a reader that loses a race with a
checkpoint sees the state at the older version it did read — a committed one — and the newer one next time.

Part files a commit removes (a merge, retention) stay on disk for :data:`REMOVED_GRACE_S` after the commit, so
that a reader that took its snapshot before keeps reading it (:attr:`Snapshot.removed`).

:class:`StoreBase` is what both sides of the store share: the root and the current snapshot.  Reading events
is :mod:`exact.store.reader`, writing them :mod:`exact.store.writer`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from exact.errors import InputError, NotFound, SeqsketchError
from exact.events import ATTRS, SEQ, TS, TYPE, event_schema, type_from_name
from exact.store.seek_format import seek_name

#: Seq ranges, inclusive, sorted and disjoint: as (first, last) pairs or an (n, 2) integer array.
SeqRanges = Sequence[tuple[int, int]] | np.ndarray

FORMAT = "seqsketch-event-store"
FORMAT_VERSION = 1
DEFAULT_ROW_GROUP_SIZE = 8192
#: Rows per part file when a large table is written at once (a build); appends make one part each.
DEFAULT_PART_ROWS = 1 << 20
MANIFEST = "manifest.json"
PARTS = "parts"
LOG = "log"
#: commits logged between two checkpoints
CHECKPOINT_EVERY = 64
#: how long a part file stays on disk after a commit removed it (s): longer than any query takes
REMOVED_GRACE_S = 120.0
COLUMNS = (SEQ, TS, TYPE, ATTRS)
#: The key of a store's ``extra`` naming the attributes its seek files serve (``build --index-attrs``; absent:
#: the cheapest within the default budget, :data:`exact.store.seek_attrs.DEFAULT_BUDGET`).
INDEX_ATTRS_KEY = "index_attrs"
#: ``extra`` key: the footprint budget a build named (the dataset within this many times its Parquet parts;
#: absent: :data:`exact.store.footprint.DEFAULT_FOOTPRINT`)
FOOTPRINT_KEY = "footprint"


def check_index_attrs(chosen: Sequence[str] | None, attrs: Iterable[str]) -> None:
    """Refuse an ``--index-attrs`` naming an attribute the events do not have."""
    if chosen is None:
        return
    have = set(attrs)
    unknown = [a for a in chosen if a not in have]
    if unknown:
        known = ", ".join(sorted(have)) or "none"
        raise InputError(f"no event has the attribute {unknown[0]!r} to index; the attributes are: {known}",
                         where="--index-attrs")
#: ``type`` as parts store it and :meth:`EventStore.read` keeps it on request.
TYPE_DICTIONARY = pa.dictionary(pa.int32(), pa.string())


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
    #: Size of the part's seek file (:mod:`exact.store.seek`); 0 = none (a part written before seek files).
    seek_bytes: int = 0
    #: The attributes the seek file serves in place, with the bytes of their columns.
    seek_attrs: tuple[tuple[str, int], ...] = ()
    #: The seek file's bytes by structure (:func:`exact.store.seek.structure_bytes`); empty for a part written
    #: before they were recorded.
    seek_sections: tuple[tuple[str, int], ...] = ()
    #: Per-type counts of this part; carried from write_part to commit, not persisted per part.
    type_counts: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "first_seq": self.first_seq, "last_seq": self.last_seq,
                "rows": self.rows, "min_ts": self.min_ts, "max_ts": self.max_ts,
                "row_groups": [list(r) for r in self.row_groups], "attrs": dict(self.attrs),
                "bytes": self.bytes} | ({"seek_bytes": self.seek_bytes} if self.seek_bytes else {}) | (
                    {"seek_attrs": dict(self.seek_attrs)} if self.seek_attrs else {}) | (
                    {"seek_sections": dict(self.seek_sections)} if self.seek_sections else {})

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
                   seek_bytes=d.get("seek_bytes", 0),
                   seek_attrs=tuple((str(k), int(v)) for k, v in d.get("seek_attrs", {}).items()),
                   seek_sections=tuple((str(k), int(v)) for k, v in d.get("seek_sections", {}).items()))


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
    #: made once when the store is created and kept by every commit: a store built anew (its seqs then mean
    #: other events) has another; None for a store written before it was kept
    lineage: str | None = None
    #: the writer's word that event time has reached this ts (UTC µs): no event at or before it will be
    #: appended (docs/semantics.md §5.5); None until one is given.  It closes windows without an event.
    watermark: int | None = None
    #: the first seq the store still holds: the events before it were retired (their seqs are never reused)
    retained_from: int = 0
    #: part files commits removed, with when (Unix time): kept on disk a while for readers of older snapshots
    removed: tuple[tuple[str, float], ...] = ()
    #: the version of the checkpoint this snapshot was read from (0: none yet)
    checkpoint: int = field(default=0, compare=False)
    #: when its last commit was published (Unix time; 0: not known, a store written before it was kept)
    committed: float = field(default=0.0, compare=False)

    @property
    def event_time(self) -> int | None:
        """How far event time is known to have come: the watermark when it is past the last event, else None
        (the last event's ts says it, and an event of the same ts may still come)."""
        if self.watermark is not None and (self.last_ts is None or self.watermark >= self.last_ts):
            return self.watermark
        return None

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

    def groups_of(self, ranges: SeqRanges) -> list[tuple[PartInfo, list[int]]]:
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

    def attr_subset(self, names: Sequence[str] | None) -> dict[str, pa.DataType]:
        """The attribute types of a read of only the attributes ``names`` (None: all of them); an attribute
        the stream never had is left out (it reads as null)."""
        every = self.attr_types()
        return every if names is None else {n: t for n, t in every.items() if n in names}

    def read_schema(self, cols: Sequence[str], type_dictionary: bool,
                    attrs: Sequence[str] | None = None) -> pa.Schema:
        """The schema of a read of ``cols`` (``type`` as :data:`TYPE_DICTIONARY` with ``type_dictionary``;
        only the attributes ``attrs``, unless None), made once per snapshot: a read of a few hundred rows
        costs little more than making it."""
        key = (tuple(cols), type_dictionary, None if attrs is None else tuple(attrs))
        found = self._read_schemas.get(key)
        if found is None:
            schema = self._schema if attrs is None else event_schema(self.attr_subset(attrs))
            fields = [schema.field(c) for c in cols if c in schema.names]
            if type_dictionary:
                fields = [f.with_type(TYPE_DICTIONARY) if f.name == TYPE else f for f in fields]
            found = self._read_schemas[key] = pa.schema(fields)
        return found

    @cached_property
    def _read_schemas(self) -> dict[tuple[tuple[str, ...], bool, tuple[str, ...] | None], pa.Schema]:
        return {}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "events": self.events, "first_ts": self.first_ts,
                "last_ts": self.last_ts, "row_group_size": self.row_group_size,
                "parts": [p.to_json() for p in self.parts], "type_counts": dict(self.type_counts),
                "attrs": dict(self.attrs), "extra": dict(self.extra), "format_version": FORMAT_VERSION,
                **({"lineage": self.lineage} if self.lineage is not None else {}),
                **({"watermark": self.watermark} if self.watermark is not None else {}),
                **({"retained_from": self.retained_from} if self.retained_from else {}),
                **({"removed": [list(r) for r in self.removed]} if self.removed else {}),
                **({"committed": self.committed} if self.committed else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Snapshot:
        return cls(version=d["version"], events=d["events"], first_ts=d["first_ts"], last_ts=d["last_ts"],
                   parts=tuple(PartInfo.from_json(p) for p in d["parts"]),
                   # read-only views: a snapshot is shared (cached) and must not change under its readers
                   type_counts=MappingProxyType(d["type_counts"]), attrs=MappingProxyType(d["attrs"]),
                   extra=MappingProxyType(d.get("extra", {})),
                   row_group_size=d.get("row_group_size", DEFAULT_ROW_GROUP_SIZE), lineage=d.get("lineage"),
                   watermark=d.get("watermark"), retained_from=int(d.get("retained_from", 0)),
                   removed=tuple((str(f), float(t)) for f, t in d.get("removed", ())),
                   checkpoint=int(d["version"]), committed=float(d.get("committed", 0.0)))

    def apply(self, change: Change) -> Snapshot:
        """The snapshot ``change`` (the next version's commit) makes of this one."""
        if change.version != self.version + 1:
            raise SeqsketchError(f"commit {change.version} does not follow version {self.version}",
                                 where=LOG)
        gone = set(change.remove)
        parts = [p for p in self.parts if p.file not in gone] + list(change.add)
        parts.sort(key=lambda p: p.first_seq)
        counts = dict(self.type_counts)
        for typ, n in change.counts.items():
            left = counts.get(typ, 0) + n
            if left:
                counts[typ] = left
            else:
                counts.pop(typ, None)
        extra = dict(self.extra)
        for key, value in change.extra.items():
            if value is None:
                extra.pop(key, None)
            else:
                extra[key] = value
        removed = self.removed + tuple((f, change.time) for p in self.parts if p.file in gone
                                       for f in p.files)
        return dataclasses.replace(
            self, version=change.version, events=change.events, first_ts=change.first_ts,
            last_ts=change.last_ts, parts=tuple(parts), type_counts=MappingProxyType(counts),
            attrs=MappingProxyType(dict(change.attrs)), extra=MappingProxyType(extra),
            watermark=change.watermark, retained_from=change.retained_from, removed=removed,
            committed=change.time)


@dataclass(frozen=True)
class Change:
    """One commit as the log keeps it: what it changes in the snapshot of the version before."""

    version: int
    #: when it was published (Unix time)
    time: float
    events: int
    first_ts: int | None
    last_ts: int | None
    attrs: Mapping[str, str]
    add: tuple[PartInfo, ...] = ()
    #: part files (Parquet names) removed
    remove: tuple[str, ...] = ()
    #: per type, how many events the commit adds (negative: removes)
    counts: Mapping[str, int] = field(default_factory=dict)
    #: keys of ``extra`` set (None: removed)
    extra: Mapping[str, Any] = field(default_factory=dict)
    watermark: int | None = None
    retained_from: int = 0

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot, time: float) -> Change:
        """The commit that makes ``after`` of ``before``."""
        had = {p.file for p in before.parts}
        has = {p.file for p in after.parts}
        counts = {t: after.type_counts.get(t, 0) - before.type_counts.get(t, 0)
                  for t in set(before.type_counts) | set(after.type_counts)}
        extra = {k: v for k, v in after.extra.items() if before.extra.get(k) != v}
        extra.update({k: None for k in before.extra if k not in after.extra})
        return cls(version=after.version, time=time, events=after.events, first_ts=after.first_ts,
                   last_ts=after.last_ts, attrs=dict(after.attrs),
                   add=tuple(p for p in after.parts if p.file not in had),
                   remove=tuple(sorted(had - has)), counts={t: n for t, n in counts.items() if n},
                   extra=extra, watermark=after.watermark, retained_from=after.retained_from)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "time": self.time, "events": self.events,
                "first_ts": self.first_ts, "last_ts": self.last_ts, "attrs": dict(self.attrs),
                "add": [p.to_json() for p in self.add], "remove": list(self.remove), "counts": dict(self.counts),
                "extra": dict(self.extra), "watermark": self.watermark, "retained_from": self.retained_from}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Change:
        return cls(version=int(d["version"]), time=float(d["time"]), events=int(d["events"]),
                   first_ts=d["first_ts"], last_ts=d["last_ts"], attrs=dict(d["attrs"]),
                   add=tuple(PartInfo.from_json(p) for p in d["add"]), remove=tuple(d["remove"]),
                   counts={str(k): int(v) for k, v in d["counts"].items()}, extra=dict(d["extra"]),
                   watermark=d.get("watermark"), retained_from=int(d.get("retained_from", 0)))


def log_name(version: int) -> str:
    return f"{LOG}/{version:012d}.json"


def empty_snapshot(row_group_size: int, lineage: str | None = None) -> Snapshot:
    """The state of a store before its first commit."""
    return Snapshot(version=0, events=0, first_ts=None, last_ts=None, parts=(), type_counts={}, attrs={},
                    extra={}, row_group_size=row_group_size, lineage=lineage)


#: The checkpoints last read in this process, by path: their text and the latest snapshot reached from them.
#: Every store object of a path shares them, so a service that opens a dataset per request parses its
#: checkpoint once and each logged commit once.
_READ: OrderedDict[str, tuple[bytes, Snapshot]] = OrderedDict()
_READ_LOCK = threading.Lock()
_READ_KEEP = 64


class StoreBase:
    """A store's root and its committed snapshots (the part of :class:`~exact.store.EventStore` that its
    reading and its writing side share)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # The last checkpoint read, with its text, and the latest snapshot reached from it.  Known by its text,
        # not by the file's identity: a commit's new file may get a freed inode number and the same size and
        # mtime as one before it.
        self._cached: tuple[bytes, Snapshot] | None = None
        #: the bucket side of a replica's store (:class:`exact.store.replica.Remote`, set by
        #: :class:`~exact.store.EventStore`); None for a store on local disk
        self.remote: Any = None

    def _fresh(self) -> bool:
        """Whether a replica's state must be read afresh (not within :data:`~exact.store.replica.READ_AGE_S`
        of the last read): while a writer holds the lock."""
        return False

    def snapshot(self) -> Snapshot:
        """The current committed state: the checkpoint (parsed again only when its text changed), then the
        logged commits after it — or, for a replica, the bucket's commit log."""
        if self.remote is not None:
            remote: Snapshot = self.remote.snapshot(fresh=self._fresh())
            return remote
        path = self.root / MANIFEST
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise NotFound("no event store here", where=str(self.root)) from None
        snap: Snapshot | None = None
        if self._cached is not None and self._cached[0] == raw:
            snap = self._cached[1]
        else:
            with _READ_LOCK:
                known = _READ.get(str(path))
            if known is not None and known[0] == raw:
                snap = known[1]
        if snap is None:
            snap = _parse_checkpoint(raw, path)
        latest = self._follow_log(snap)
        if self._cached is None or self._cached[1] is not latest:
            self._cached = (raw, latest)
            with _READ_LOCK:
                held = _READ.get(str(path))
                if held is None or held[0] != raw or held[1].version < latest.version:
                    _READ[str(path)] = self._cached
                _READ.move_to_end(str(path))
                while len(_READ) > _READ_KEEP:
                    _READ.popitem(last=False)
        return latest

    def _follow_log(self, snap: Snapshot) -> Snapshot:
        """``snap`` with the logged commits after it applied, in order, while they exist."""
        while True:
            entry = self.root / log_name(snap.version + 1)
            try:
                data = json.loads(entry.read_bytes().decode("utf-8"))
            except FileNotFoundError:
                return snap
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise SeqsketchError(f"unreadable commit: {err}", where=str(entry)) from None
            snap = snap.apply(Change.from_json(data))

    def seek_bytes(self, snapshot: Snapshot | None = None) -> int:
        """Bytes on disk of the snapshot's seek files (a part of :meth:`size_bytes`)."""
        return sum(p.seek_bytes for p in (snapshot or self.snapshot()).parts)

    def size_bytes(self, snapshot: Snapshot | None = None) -> int:
        """Bytes on disk of the snapshot's parts (with their seek files) and the manifest."""
        snap = snapshot or self.snapshot()
        manifest = 0 if self.remote is not None else (self.root / MANIFEST).stat().st_size
        return sum(p.bytes + p.seek_bytes for p in snap.parts) + manifest

    def snapshot_or_empty(self) -> Snapshot:
        try:
            return self.snapshot()
        except NotFound:
            return empty_snapshot(DEFAULT_ROW_GROUP_SIZE)


def _parse_checkpoint(raw: bytes, path: Path) -> Snapshot:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SeqsketchError(f"unreadable manifest: {err}", where=str(path)) from None
    if data.get("format") != FORMAT:
        raise SeqsketchError(f"not a seqsketch event store manifest (format {data.get('format')!r})",
                             where=str(path))
    return Snapshot.from_json(data)
