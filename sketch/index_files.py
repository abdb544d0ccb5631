"""A dataset's index versions as files: the manifest's entry naming the live one (:class:`IndexRef`,
``extra["index"]``), where version ``v`` is kept, and writing one (not yet published).  :mod:`sketch.dataset`
publishes, loads and prunes them."""

from __future__ import annotations

import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from exact.errors import IndexCorrupt
from exact.store import Snapshot
from exact.store.fetch import fetched, refetch
from sketch import persist
from sketch.evaluate import TreeIndex
from sketch.tree import BloomTree

INDEX_DIR = "index"
INDEX_KEY = "index"
#: an index file's name: its version, and (since files got unique names) a token no other writer picks
_INDEX_FILE = re.compile(r"tree-(\d{6,})(?:-[0-9a-f]{8})?\.sqt")


@dataclass(frozen=True)
class IndexRef:
    """What the store manifest records about the live index version.

    The version covers ``events`` events; its file (a checkpoint) holds the tree of the first
    ``file_events`` of them, and ``index_digest`` and ``bytes`` describe that file.  The events after the
    checkpoint are added to the tree from the store when it is loaded (:meth:`LoadedIndexes.at`): an append
    publishes a new version without writing the whole tree again (:func:`checkpoint_due`).
    """

    version: int
    file: str  # relative to the dataset directory
    events: int
    index_digest: str
    bytes: int
    config: Mapping[str, Any]
    file_events: int | None = None  # None: the file covers all ``events``

    @property
    def covered(self) -> int:
        """The events the file's tree holds."""
        return self.events if self.file_events is None else self.file_events

    @property
    def file_version(self) -> int:
        """The version that wrote the file."""
        return int(_INDEX_FILE.search(self.file).group(1))  # type: ignore[union-attr]

    def extended(self, version: int, events: int) -> IndexRef:
        """This checkpoint named by version ``version``, covering ``events`` events."""
        return replace(self, version=version, events=events, file_events=self.covered)

    def to_json(self) -> dict[str, Any]:
        out = {"version": self.version, "file": self.file, "events": self.events,
               "index_digest": self.index_digest, "bytes": self.bytes, "config": dict(self.config)}
        if self.covered != self.events:
            out["file_events"] = self.covered
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> IndexRef:
        file_events = d.get("file_events")
        return cls(int(d["version"]), str(d["file"]), int(d["events"]), str(d["index_digest"]),
                   int(d["bytes"]), dict(d.get("config", {})), None if file_events is None else int(file_events))


#: An append writes the tree whole (a checkpoint) once this many events, or this many versions, were added
#: since the last one; in between it publishes the checkpoint with the number of events it covers, and a
#: reader adds the rest from the store (a few small parts at most).  Writing the tree whole costs in its size:
#: done per append it made a small append's cost grow with the dataset.
CHECKPOINT_EVENTS = 65_536
CHECKPOINT_VERSIONS = 64


def checkpoint_due(ref: IndexRef | None, events: int) -> bool:
    """Whether the next version, covering ``events`` events, writes its tree whole."""
    return (ref is None or events - ref.covered >= CHECKPOINT_EVENTS
            or ref.version + 1 - ref.file_version >= CHECKPOINT_VERSIONS)


def index_file_name(version: int) -> str:
    """A new name for index version ``version``'s file: the version, then a token of its own.  Every file a
    dataset writes beside its parts is named so (partition trees, layouts, decayed summaries too): two
    writers that take one version number at once — a fold beside a retirement, two servers over one bucket
    — never write, upload or discard each other's file."""
    return f"{INDEX_DIR}/tree-{version:06d}-{file_token()}.sqt"


def file_token() -> str:
    """Eight random hex digits that make a written file's name its own."""
    return uuid.uuid4().hex[:8]


def write_index(dataset_root: Path, tree: BloomTree, version: int) -> IndexRef:
    """Write ``tree`` as index version ``version`` under ``dataset_root`` (atomic, not yet published)."""
    name = index_file_name(version)
    path = dataset_root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    size = persist.save(tree, path)
    return IndexRef(version, name, tree.n_events, tree.digest(), size, tree.config.to_dict())


def _index_ref(snap: Snapshot) -> IndexRef | None:
    raw = snap.extra.get(INDEX_KEY) if snap.extra else None
    if raw is None:
        return None
    try:
        return IndexRef.from_json(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexCorrupt(f"the manifest's index entry is malformed: {exc}") from exc


@dataclass(frozen=True)
class DatasetSnapshot:
    """A consistent pair: the store snapshot and the tree that covers exactly its events (None: no index)."""

    store: Snapshot
    tree: BloomTree | None
    index: IndexRef | None

    @property
    def events(self) -> int:
        return self.store.events

    @property
    def index_version(self) -> int | None:
        return None if self.index is None else self.index.version


class LoadedIndexes:
    """Index trees already mapped and verified in this process: each checkpoint file by its identity (path,
    inode, size, mtime) and the number of events, and the same checkpoint extended by later events.

    Index files are immutable once published, so a file that still has the same identity holds the same
    tree: a server answering many queries maps and checks each version once instead of per request.  Bounded
    (the most recently used few), and the trees it hands out are never modified (an append and an extension
    work on a private copy).
    """

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        # by (path, inode, size, mtime, events): a checkpoint's own tree, and the same extended
        self._trees: OrderedDict[tuple[str, int, int, int, int], BloomTree] = OrderedDict()
        self._file_events: dict[tuple[str, int, int, int], int] = {}  # what each held file's own tree covers
        self._lock = threading.Lock()

    @staticmethod
    def _identity(path: Path) -> tuple[str, int, int, int] | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            if not fetched(path):  # (a replica's file is fetched on first use)
                return None
            st = path.stat()
        return str(path), st.st_ino, st.st_size, st.st_mtime_ns

    def load(self, path: Path, *, again: bool = True) -> BloomTree:
        """The tree the checkpoint file ``path`` holds (``again``: a replica's damaged copy is fetched once
        more)."""
        ident = self._identity(path)
        if ident is None:
            return persist.load(path)  # reports the missing file as IndexCorrupt
        with self._lock:
            held = self._trees.get(ident + (self._file_events.get(ident, -1),))
            if held is not None:
                self._trees.move_to_end(ident + (held.n_events,))
                return held
        try:
            tree = persist.load(path)
        except IndexCorrupt:
            if not again or not refetch(path):  # (a replica's damaged copy is fetched again)
                raise
            return self.load(path, again=False)
        TreeIndex.prepare(tree)  # once per version, not on its first query
        with self._lock:
            self._file_events[ident] = tree.n_events
        self._keep(ident, tree)
        return tree

    def at(self, path: Path, events: int, extend: Callable[[BloomTree], None]) -> BloomTree:
        """The tree of checkpoint ``path`` extended to ``events`` events: the closest one held (or the file's
        own) is copied and ``extend`` adds the events it lacks (from the store).  ``events`` fewer than the
        checkpoint holds is the caller's to refuse."""
        ident = self._identity(path)
        base = None
        if ident is not None:
            with self._lock:
                for key, tree in self._trees.items():
                    if key[:4] == ident and key[4] <= events and (base is None or key[4] > base.n_events):
                        base = tree
                if base is not None:
                    self._trees.move_to_end(ident + (base.n_events,))
        if base is None:
            base = self.load(path)
        if base.n_events >= events:
            return base
        tree = base.copy()
        extend(tree)
        TreeIndex.prepare(tree)
        if ident is not None:
            self._keep(ident, tree)
        return tree

    def put(self, path: Path, tree: BloomTree, *, written: bool = False) -> None:
        """Remember ``tree`` as the tree of checkpoint ``path`` at its number of events: the file's own
        (``written``: it was just written from it) or the file's extended by an append; the caller no longer
        changes it."""
        ident = self._identity(path)
        if ident is not None:
            if written:
                with self._lock:
                    self._file_events[ident] = tree.n_events
            self._keep(ident, tree)

    def _keep(self, ident: tuple[str, int, int, int], tree: BloomTree) -> None:
        with self._lock:
            self._trees[ident + (tree.n_events,)] = tree
            self._trees.move_to_end(ident + (tree.n_events,))
            while len(self._trees) > self.capacity:
                gone, _ = self._trees.popitem(last=False)
                if not any(key[:4] == gone[:4] for key in self._trees):
                    self._file_events.pop(gone[:4], None)


#: the trees of this process, shared by every dataset object
LOADED = LoadedIndexes()
