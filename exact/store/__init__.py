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

The package's modules: :mod:`~exact.store.manifest` (the snapshot and its format),
:mod:`~exact.store.reader` and :mod:`~exact.store.writer` (the two sides of :class:`EventStore`),
:mod:`~exact.store.dataset_paths` (dataset directories, built in a stage and swapped in whole).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from exact.errors import Conflict, NotFound
from exact.store.dataset_paths import (
    check_dataset_name,
    dataset_dir,
    dataset_names,
    datasets_dir,
    seqsketch_home,
    staged_dataset,
    store_dir,
    store_published,
    sweep_abandoned,
)
from exact.store.fetch import REMOTE
from exact.store.manifest import (
    DEFAULT_PART_ROWS,
    DEFAULT_ROW_GROUP_SIZE,
    FOOTPRINT_KEY,
    INDEX_ATTRS_KEY,
    MANIFEST,
    PARTS,
    TYPE_DICTIONARY,
    PartInfo,
    Snapshot,
    empty_snapshot,
)
from exact.store.reader import StoreReader, type_mask
from exact.store.replica import stage_location, store_remote
from exact.store.writer import StoreWriter

__all__ = ["DEFAULT_PART_ROWS", "DEFAULT_ROW_GROUP_SIZE", "INDEX_ATTRS_KEY", "MANIFEST", "PARTS", "TYPE_DICTIONARY",
           "EventStore", "PartInfo", "Snapshot", "check_dataset_name", "dataset_dir", "dataset_names",
           "datasets_dir", "seqsketch_home", "staged_dataset", "store_dir", "store_published", "sweep_abandoned",
           "type_mask", "REMOTE"]


# The writer comes first: its __init__ takes ``part_rows`` and hands the root on to the reader's.
class EventStore(StoreWriter, StoreReader):
    """A dataset's event store at ``root`` (see the module docstring); see :meth:`create`, :meth:`open`."""

    def __init__(self, root: str | Path, *, part_rows: int = DEFAULT_PART_ROWS) -> None:
        super().__init__(Path(root), part_rows=part_rows)
        self.remote = store_remote(self.root)  # a replica's store commits to its bucket's log

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
        store.bound_for = stage_location(root.parent)
        try:
            (root / PARTS).mkdir(parents=True, exist_ok=True)
            empty = empty_snapshot(row_group_size, lineage=uuid.uuid4().hex)
            with store.writing():
                chosen = (extra or {}).get(INDEX_ATTRS_KEY)
                # (the trees' share of the footprint is not taken from ``extra`` here: a Spark build's tasks write
                # their parts before any tree exists, and both must choose alike)
                parts = (store._write_parts(table, 0, row_group_size, chosen, (extra or {}).get(FOOTPRINT_KEY))
                         if table is not None else [])
                store._publish(store._next_snapshot(empty, parts, extra))
        except BaseException:
            if created:
                shutil.rmtree(root, ignore_errors=True)
            raise
        return store

    @classmethod
    def open(cls, root: str | Path, *, part_rows: int = DEFAULT_PART_ROWS) -> EventStore:
        root = Path(root)
        if not (root / MANIFEST).is_file() and not (root.parent / REMOTE).is_file():
            raise NotFound("no event store here", where=str(root))
        return cls(root, part_rows=part_rows)

