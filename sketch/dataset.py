"""A dataset = its event store + the Bloom-filter tree that covers it, published together.

Layout under ``$SEQSKETCH_HOME/datasets/<name>/``::

    store/                  the event store (exact.store), whose manifest is the one snapshot pointer
    index/tree-<v>.sqt      the tree as index version v wrote it whole (sketch.persist), immutable once written

The store manifest's ``extra["index"]`` names the live index version: the events it covers and the tree file
that holds the first ``file_events`` of them (``{version, file, events, index_digest, bytes, config}``, plus
``file_events`` when they differ; :class:`~sketch.index_files.IndexRef`).  Every append is a new version,
published with its events in ONE commit of the store: a reader sees the old events with the old version or
the new events with the new one, never a mix.  Most appends do not write the tree: the version names the
last file written and a process that loads it adds the events after it from the store (kept in memory,
:data:`~sketch.index_files.LOADED`); every :data:`~sketch.index_files.CHECKPOINT_VERSIONS` versions or
:data:`~sketch.index_files.CHECKPOINT_EVENTS` events, and when upkeep finds the dataset quiet, the tree is
written whole under a temporary name, renamed into place (still unreferenced) and published with the commit.
A failure before the commit leaves the dataset as it was (the unreferenced file is removed); older tree
files are deleted once two newer ones exist (a reader that still maps one keeps its mapping: unlinking does
not invalidate it).

A dataset whose store has no index (built before the index existed, or by hand) is indexed on the first
append, or explicitly with :meth:`Dataset.reindex`; one whose index lags behind its store (events appended
around it) is caught up from the store before the new events are added.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from exact.errors import IndexCorrupt, NotFound
from exact.events import attr_types
from exact.ingest import order_by_time
from exact.store import EventStore, Snapshot, dataset_dir, staged_dataset, store_dir, store_published
from exact.store import writer as store_writer
from exact.store.fetch import fetched, location_of
from exact.store.grouping import LAYOUT_KEY, Layout, default_key, layout_of
from exact.store.manifest import FOOTPRINT_KEY, INDEX_ATTRS_KEY, REMOVED_GRACE_S, check_index_attrs
from exact.store.objectlog import LostRace
from exact.store.retention import policy_of
from sketch.build import DEFAULT_OPTIONS, BuildOptions, build_from_table, build_tree
from sketch.index_files import (
    _INDEX_FILE,
    INDEX_DIR,
    INDEX_KEY,
    LOADED,
    DatasetSnapshot,
    IndexRef,
    _index_ref,
    checkpoint_due,
    index_file_name,
    write_index,
)
from sketch.partition.files import (
    AUTO_KEY,
    PARTITION_DIR,
    PARTITION_KEY,
    PARTITION_LEAVES,
    build_partition_into,
    partition_from_columns,
    partition_options,
    write_partition,
)
from sketch.partition.index import PartitionIndex
from sketch.store_info import attr_index_section, footprint_section
from sketch.tree import BloomTree, TreeConfig
from sketch.tree.decay import DECAY_KEY
from sketch.upkeep import _PRUNED, Upkeep

#: What the rest of the project imports from here: this module's own names and those of the index and
#: partition files (:mod:`sketch.index_files`, :mod:`sketch.partition.files`).
#: files of a dataset's index and partition folders a sweep may delete when no commit names them
_SWEPT = re.compile(r"\.|ptree-|layout-|decay-")

__all__ = ["AUTO_KEY", "INDEX_DIR", "INDEX_KEY", "KEEP_PREVIOUS", "PARTITION_DIR", "PARTITION_KEY",
           "PARTITION_LEAVES", "Dataset", "DatasetSnapshot", "IndexRef", "build_index_into", "build_partition_into",
           "dataset_info", "index_file_name", "index_section", "partition_from_columns", "partition_options",
           "require_index", "write_index", "write_partition"]

#: How often an append to a dataset on object storage tries again after another server published first.
APPEND_TRIES = 50

#: Index checkpoints kept besides the live one, for readers that took a snapshot just before an append.
KEEP_PREVIOUS = 1


def build_index_into(dataset_root: Path, table: pa.Table, options: BuildOptions = DEFAULT_OPTIONS, *,
                     config: TreeConfig | None = None, partition_key: str | None = AUTO_KEY
                     ) -> dict[str, Any]:
    """Build the tree of a whole stream table into ``dataset_root`` as version 1 — and, with a partition key
    (``AUTO_KEY``: :data:`exact.store.grouping.DEFAULT_KEY` when every event has it; None: none), the partition
    layout and the partition-clustered tree (:mod:`sketch.partition.index`).

    Returns the ``extra`` to commit with the events (``EventStore.create(..., extra=...)``).  Used by
    ``seqsketch build`` inside its staged directory, so that the dataset appears with its index or not at all.
    """
    tree, _ = build_from_table(table, options, config=config)
    extra: dict[str, Any] = {INDEX_KEY: write_index(dataset_root, tree, 1).to_json()}
    key = default_key(table) if partition_key == AUTO_KEY else partition_key
    if key:
        extra.update(build_partition_into(dataset_root, table, key, options, version=1))
    return extra


def store_extra(options: BuildOptions, table: pa.Table | None = None) -> dict[str, Any]:
    """What a new store's manifest keeps of the build's options: the attributes its seek files serve, when
    named (checked against ``table``'s attributes), and the footprint budget, when named."""
    extra: dict[str, Any] = {}
    if options.footprint is not None:
        extra[FOOTPRINT_KEY] = float(options.footprint)
    if options.index_attrs is None:
        return extra
    if table is not None:
        check_index_attrs(options.index_attrs, attr_types(table.schema))
    return extra | {INDEX_ATTRS_KEY: list(options.index_attrs)}


class Dataset(Upkeep):
    """One dataset: :meth:`build`, :meth:`open`, :meth:`append`, :meth:`snapshot`, :meth:`reindex`."""

    def __init__(self, root: Path, store: EventStore, name: str) -> None:
        self.root = root
        self.store = store
        self.name = name
        self._trees: dict[str, BloomTree] = {}  # loaded index versions by file name (this object only)

    # ------------------------------------------------------------------------------------------- opening
    @classmethod
    def build(cls, home: Path, name: str, table: pa.Table, options: BuildOptions = DEFAULT_OPTIONS, *,
              config: TreeConfig | None = None, replace: bool = False,
              partition_key: str | None = AUTO_KEY, store: str | None = None) -> Dataset:
        """Create dataset ``name`` from a stream table (``seq`` from 0, in stream order) with its index (and
        partition index, see :func:`build_index_into`).

        The index is built before anything is published; a refused budget or any failure leaves nothing.
        With ``store`` (``s3://bucket/prefix``) the dataset lives there (:mod:`exact.store.replica`).
        """
        with staged_dataset(name, home, replace=replace, store=store) as stage:
            extra = build_index_into(stage, table, options, config=config, partition_key=partition_key)
            EventStore.create(store_dir(stage), table, extra=extra | store_extra(options, table))
        return cls.open(home, name)

    @classmethod
    def open(cls, home: Path, name: str) -> Dataset:
        root = dataset_dir(name, home)
        return cls(root, EventStore.open(store_dir(root)), name)

    # ------------------------------------------------------------------------------------------- reading
    def snapshot(self) -> DatasetSnapshot:
        """The current store snapshot and the index version its manifest names (loaded, verified, cached)."""
        for _ in range(3):
            snap = self.store.snapshot()
            ref = _index_ref(snap)
            if ref is None:
                return DatasetSnapshot(snap, None, None)
            if _held_key(ref) in self._trees or (self.root / ref.file).exists() or fetched(self.root / ref.file):
                return DatasetSnapshot(snap, self._load(ref, snap), ref)
            # Appends published two newer checkpoints since the manifest was read and pruned this one: reread.
        assert ref is not None  # (the loop returned when the manifest named no index)
        return DatasetSnapshot(snap, self._load(ref, snap), ref)  # a missing file is reported as such

    def _load(self, ref: IndexRef, snap: Snapshot) -> BloomTree:
        """The tree of index version ``ref`` (of ``snap``): its checkpoint file with the events after it
        added from the store."""
        tree = self._trees.get(_held_key(ref))
        if tree is None:
            tree = self._extended(ref, snap, ref.events)
            if tree.n_events != ref.events or tree.n_events != snap.events:
                raise IndexCorrupt(f"index version {ref.version} covers {tree.n_events} events; the manifest "
                                   f"says {ref.events} of {snap.events}", where=str(self.root / ref.file))
            self._trees = {_held_key(ref): tree}  # keep only the live version in memory
        return tree

    def _extended(self, ref: IndexRef, snap: Snapshot, events: int) -> BloomTree:
        """The tree of ``ref``'s checkpoint extended to ``events`` events of ``snap`` (shared: not to be
        changed)."""

        def extend(tree: BloomTree) -> None:
            if tree.n_events < ref.covered:
                raise IndexCorrupt(f"index file {ref.file} holds {tree.n_events} events; the manifest says "
                                   f"{ref.covered}", where=str(self.root / ref.file))
            missing = self.store.read_table(tree.n_events, events - 1, columns=["ts", "type"], snapshot=snap)
            tree.update(missing.column("type"), missing.column("ts"))

        return LOADED.at(self.root / ref.file, events, extend)

    def partition(self, snap: Snapshot) -> PartitionIndex | None:
        """The partition index (tree and layout) ``snap``'s manifest names, or None without a key."""
        ref = (snap.extra or {}).get(PARTITION_KEY)
        if not ref:
            return None
        layout = layout_of(self.store.root, snap.extra)
        assert layout is not None  # (a partition build publishes its layout with its tree)
        tree = LOADED.load(self.root / ref["file"])
        return _PARTITIONS.get(tree, layout)

    def index_info(self) -> dict[str, Any] | None:
        """The ``index`` section of ``info`` (docs/contract.md §4) with the version, or None without an index."""
        snap = self.snapshot()
        return None if snap.tree is None else _info_of(snap.tree, snap.index)

    # ------------------------------------------------------------------------------------------- writing
    def append(self, table: pa.Table, *, watermark: int | None = None) -> DatasetSnapshot:
        """Append events (a stream table; ``seq`` is ignored and reassigned) with the index covering them;
        with ``watermark`` (UTC µs), event time has reached it after them (docs/semantics.md §5.5).

        Ordered by ts (stable) as the store does; an event older than the dataset's last ts (or not after its
        watermark), or a watermark that goes back in time, rejects the whole batch (``Conflict``) and nothing
        is written.  Events, index and watermark are published by one manifest replace.
        """
        if "seq" in table.column_names:
            table = table.drop_columns(["seq"])
        if table.num_rows == 0:
            if watermark is not None:
                self.store.commit((), watermark=watermark)
            return self.snapshot()
        table = order_by_time(table)
        for attempt in range(APPEND_TRIES):
            try:
                return self._append_sorted(table, watermark)
            except LostRace:  # (another server over the same bucket published first: go again on its state)
                if attempt == APPEND_TRIES - 1:
                    raise
                time.sleep(random.uniform(0, 0.01 * (attempt + 1)))
        raise AssertionError("unreachable")

    def _append_sorted(self, table: pa.Table, watermark: int | None) -> DatasetSnapshot:
        with self.store.writing():
            snap = self.store.snapshot()
            tree = self._tree_for_update(snap, None)
            tree.update(table.column("type"), table.column("ts"))
            live = _index_ref(snap)
            written = live is None or live.events != snap.events or checkpoint_due(live, tree.n_events)
            if live is None or written:
                ref = self._write_next(tree, snap)
            else:
                ref = live.extended(live.version + 1, tree.n_events)
            try:
                self.store.append(table, extra_update={INDEX_KEY: ref.to_json()}, watermark=watermark)
            except BaseException:
                if written:
                    (self.root / ref.file).unlink(missing_ok=True)
                raise
            # (the next append and query take it as it is in memory)
            LOADED.put(self.root / ref.file, tree, written=written)
            self._trees = {_held_key(ref): tree}
            if written or time.monotonic() - _PRUNED.get(str(self.root), -math.inf) >= store_writer.CLEAN_EVERY_S:
                self._prune(ref.file_version)
        return self.snapshot()

    def checkpoint(self) -> bool:
        """Write the live index whole when appends left its checkpoint behind, and publish it (the same
        events and tree: only readers that load it later add nothing from the store); False when the
        checkpoint was current."""
        with self.store.writing():
            snap = self.store.snapshot()
            ref = _index_ref(snap)
            if ref is None or ref.covered == ref.events:
                return False
            self._publish_tree(self._load(ref, snap), snap)
        return True

    def reindex(self, options: BuildOptions = DEFAULT_OPTIONS, *, config: TreeConfig | None = None
                ) -> DatasetSnapshot:
        """(Re)build the index of the events stored now, with new options, and publish it."""
        with self.store.writing():
            snap = self.store.snapshot()
            if not snap.events:
                tree, _ = build_tree([], [], options, config=config)
            else:
                table = self.store.read_table(snapshot=snap, columns=["seq", "ts", "type"])
                tree, _ = build_from_table(table, options, config=config)
            self._publish_tree(tree, snap)
        return self.snapshot()

    def _publish_tree(self, tree: BloomTree, snap: Snapshot) -> IndexRef:
        """Write ``tree`` whole as the next index version over ``snap``'s events and publish it alone (under
        the lock; a refused commit leaves no file), then prune older versions."""
        ref = self._write_next(tree, snap)
        try:
            self.store.commit((), {INDEX_KEY: ref.to_json()}, expect_version=snap.version)
        except BaseException:
            (self.root / ref.file).unlink(missing_ok=True)
            raise
        LOADED.put(self.root / ref.file, tree, written=True)
        self._prune(ref.version)
        return ref

    def _tree_for_update(self, snap: Snapshot, options: BuildOptions | None) -> BloomTree:
        """A private, writable tree covering ``snap``'s events: the live index (caught up if it lags)."""
        ref = _index_ref(snap)
        if ref is None:
            if not snap.events:
                return BloomTree(_empty_config(options or DEFAULT_OPTIONS))
            table = self.store.read_table(snapshot=snap, columns=["seq", "ts", "type"])
            return build_from_table(table, options or DEFAULT_OPTIONS)[0]
        if ref.events > snap.events or ref.covered > snap.events:
            raise IndexCorrupt(f"index version {ref.version} covers {ref.events} events but the store has "
                               f"{snap.events}", where=str(self.root / ref.file))
        # the live tree, caught up if events were appended around the index; a private copy: the shared one
        # stays as published
        tree = self._extended(ref, snap, snap.events)
        if tree.n_events != snap.events:
            raise IndexCorrupt(f"index file {ref.file} covers {tree.n_events} events but the store has "
                               f"{snap.events}", where=str(self.root / ref.file))
        return tree.copy()

    def _write_next(self, tree: BloomTree, snap: Snapshot) -> IndexRef:
        ref = _index_ref(snap)
        version = (ref.version if ref else max(self._versions_on_disk(), default=0)) + 1
        return write_index(self.root, tree, version)

    def _versions_on_disk(self) -> list[int]:
        return sorted(version for version, _ in self._index_files())

    def _index_files(self) -> list[tuple[int, Path]]:
        """The index files on disk, with the version that wrote each."""
        folder = self.root / INDEX_DIR
        if not folder.is_dir():
            return []
        return [(int(m.group(1)), p) for p in folder.iterdir() if (m := _INDEX_FILE.fullmatch(p.name))]

    def _prune(self, live: int) -> None:
        """Delete the index checkpoints older than the live one's file (version ``live``) but the
        :data:`KEEP_PREVIOUS` newest of them, temp leftovers, and (:meth:`_sweep`) what commits replaced."""
        folder = self.root / INDEX_DIR
        older = sorted({v for v in self._versions_on_disk() if v < live})
        doomed = set(older[:len(older) - KEEP_PREVIOUS])
        for version, path in self._index_files():
            if version in doomed:
                path.unlink(missing_ok=True)
        for leftover in folder.glob(".tree-*.sqt.tmp-*"):  # (trees are written under the lock: a dead one's)
            leftover.unlink(missing_ok=True)
        self._sweep()
        _PRUNED[str(self.root)] = time.monotonic()

    def _sweep(self) -> None:
        """Delete the partition trees, layouts, decayed summaries and temp files no commit names, once they
        are older than the grace a write under way gets (a fold or a retirement writes its files before it
        takes the lock to publish them; one that died leaves them behind)."""
        extra = self.store.snapshot().extra or {}
        named = {ref["file"].rsplit("/", 1)[-1] for key in (PARTITION_KEY, LAYOUT_KEY, DECAY_KEY)
                 if isinstance(ref := extra.get(key), Mapping) and "file" in ref}
        now = time.time()
        for folder in (self.root / INDEX_DIR, self.root / PARTITION_DIR):
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                if f.name in named or _INDEX_FILE.fullmatch(f.name) or not _SWEPT.match(f.name):
                    continue
                try:
                    if now - f.stat().st_mtime > REMOVED_GRACE_S:
                        f.unlink(missing_ok=True)
                except FileNotFoundError:
                    continue


def dataset_info(home: Path, name: str) -> dict[str, Any]:
    """The ``info`` object of a dataset (docs/contract.md §4), from its event store and the index its manifest names.

    ``name, events, start_ts, end_ts, watermark`` (how far event time has come, or None), ``retention`` (how
    much history it keeps, or None), ``retained_from`` (the first seq kept: 0 unless retention retired some),
    ``location`` (where on object storage it lives, or None: on this server's disk), ``decayed`` (the
    summary of the retired history: units, bytes, until which seq; or None), ``types`` (type
    → count, most frequent first), ``store_bytes``,
    ``attrs`` (attribute → type), ``partition_key``, ``attr_index``
    (:func:`sketch.store_info.attr_index_section`), ``index`` (None without one) and ``footprint``
    (:func:`sketch.store_info.footprint_section`).
    """
    from exact.events import iso_of_micros

    root = store_dir(dataset_dir(name, home))
    if store_published(dataset_dir(name, home)) is None:
        raise NotFound(f"no dataset {name!r}", where=str(dataset_dir(name, home)))
    store = EventStore.open(root)
    snap = store.snapshot()
    types = dict(sorted(snap.type_counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"name": name, "events": snap.events,
            "start_ts": None if snap.first_ts is None else iso_of_micros(snap.first_ts),
            "end_ts": None if snap.last_ts is None else iso_of_micros(snap.last_ts),
            "watermark": None if snap.watermark is None else iso_of_micros(snap.watermark),
            "retention": (policy.text() if (policy := policy_of(snap)) is not None else None),
            "retained_from": snap.retained_from,
            "location": location_of(dataset_dir(name, home)),
            "decayed": ({k: v for k, v in decay.items() if k != "file"}
                        if (decay := (snap.extra or {}).get(DECAY_KEY)) else None),
            "types": types, "store_bytes": store.size_bytes(snap), "attrs": dict(snap.attrs),
            "partition_key": ((snap.extra or {}).get(LAYOUT_KEY) or {}).get("key"),
            "attr_index": attr_index_section(snap),
            "index": (index := index_section(dataset_dir(name, home), snap)),
            "footprint": footprint_section(snap, index)}


def index_section(dataset_root: Path, snap: Snapshot) -> dict[str, Any] | None:
    """The ``index`` section of ``seqsketch info`` for a store snapshot: ``leaf_size, fanout, m, k, levels,
    nodes, bytes, bytes_per_event, expected_fpq, index_digest`` (docs/contract.md §4) and more — with a partition
    key, ``partition`` describes the partition tree the same way, with its key, groups and the events it
    covers (those after are the tail, until ``compact``); None without index."""
    ref = _index_ref(snap)
    if ref is None:
        return None
    dataset = Dataset(dataset_root, EventStore.open(store_dir(dataset_root)), dataset_root.name)
    info = _info_of(dataset._load(ref, snap), ref)
    pref = (snap.extra or {}).get(PARTITION_KEY)
    if pref:
        ptree = LOADED.load(dataset_root / pref["file"])
        part = ptree.info()
        part.update(key=pref["key"], groups=pref["groups"], events=pref["events"],
                    tail_events=snap.events - pref["events"], bytes=pref["bytes"],
                    layout_bytes=snap.extra[LAYOUT_KEY]["bytes"])
        info["partition"] = part
    return info




class _PartitionCache:
    """Partition indexes by their tree and layout (both immutable once published), the last few."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._found: OrderedDict[tuple[int, int], PartitionIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, tree: BloomTree, layout: Layout) -> PartitionIndex:
        key = (id(tree), id(layout))
        with self._lock:
            found = self._found.get(key)
            if found is not None and found.tree is tree and found.layout is layout:
                self._found.move_to_end(key)
                return found
            found = self._found[key] = PartitionIndex(tree, layout)
            while len(self._found) > self.capacity:
                self._found.popitem(last=False)
            return found


_PARTITIONS = _PartitionCache()


def _info_of(tree: BloomTree, ref: IndexRef | None) -> dict[str, Any]:
    info = tree.info()
    if ref is not None:
        info["version"] = ref.version
        info["file"] = ref.file
        if ref.covered == ref.events:  # (the file's size; a tree extended since is told by its stored form)
            info.update(bytes=ref.bytes, bytes_per_event=ref.bytes / tree.n_events if tree.n_events else 0.0)
    return info


def _held_key(ref: IndexRef) -> str:
    """How a dataset object keeps the tree of index version ``ref``: its checkpoint and events."""
    return f"{ref.file}@{ref.events}"


def _empty_config(options: BuildOptions) -> TreeConfig:
    """A configuration for a dataset indexed before it has events: sized for ``expected_events``."""
    from sketch.build import config_from
    from sketch.sizing import size_index

    sizing = size_index(fpq=options.fpq, leaf_size=options.leaf_size,
                        events=max(options.expected_events or options.leaf_size, 1),
                        memory_bytes=options.memory_bytes, query_length=options.query_length,
                        fanout=options.fanout, fold=options.fold)
    return config_from(sizing, options)


def require_index(snapshot: DatasetSnapshot, name: str) -> BloomTree:
    """The snapshot's tree, or a clear error for a dataset that has no index."""
    if snapshot.tree is None:
        raise NotFound(f"dataset {name!r} has no index; rebuild it with `seqsketch build` "
                       "(or Dataset.reindex)", where=name)
    return snapshot.tree
