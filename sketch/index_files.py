"""A dataset's index versions as files: the manifest's entry naming the live one (:class:`IndexRef`,
``extra["index"]``), where version ``v`` is kept, and writing one (not yet published).  :mod:`sketch.dataset`
publishes, loads and prunes them."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exact.errors import IndexCorrupt
from exact.store import Snapshot
from sketch import persist
from sketch.evaluate import TreeIndex
from sketch.tree import BloomTree

INDEX_DIR = "index"
INDEX_KEY = "index"
_INDEX_FILE = re.compile(r"tree-(\d{6,})\.sqt")


@dataclass(frozen=True)
class IndexRef:
    """What the store manifest records about the live index version."""

    version: int
    file: str  # relative to the dataset directory
    events: int
    index_digest: str
    bytes: int
    config: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "file": self.file, "events": self.events,
                "index_digest": self.index_digest, "bytes": self.bytes, "config": dict(self.config)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> IndexRef:
        return cls(int(d["version"]), str(d["file"]), int(d["events"]), str(d["index_digest"]),
                   int(d["bytes"]), dict(d.get("config", {})))


def index_file_name(version: int) -> str:
    return f"{INDEX_DIR}/tree-{version:06d}.sqt"


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
    """Index files already mapped and verified in this process, by (path, inode, size, mtime).

    Index version files are immutable once published, so a file that still has the same identity holds the
    same tree: a server answering many queries maps and checks each version once instead of per request.
    Bounded (the most recently used few), and the trees it hands out are never modified (appends load a
    private copy).
    """

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._trees: OrderedDict[tuple[str, int, int, int], BloomTree] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, path: Path) -> BloomTree:
        try:
            st = path.stat()
        except FileNotFoundError:
            return persist.load(path)  # reports the missing file as IndexCorrupt
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            tree = self._trees.get(key)
            if tree is not None:
                self._trees.move_to_end(key)
                return tree
        tree = persist.load(path)
        TreeIndex.prepare(tree)  # once per version, not on its first query
        self._keep(key, tree)
        return tree

    def put(self, path: Path, tree: BloomTree) -> None:
        """Remember ``tree`` as the one in the file ``path`` just written (it is not loaded again); the
        caller no longer changes it."""
        st = path.stat()
        self._keep((str(path), st.st_ino, st.st_size, st.st_mtime_ns), tree)

    def _keep(self, key: tuple[str, int, int, int], tree: BloomTree) -> None:
        with self._lock:
            self._trees[key] = tree
            while len(self._trees) > self.capacity:
                self._trees.popitem(last=False)

    def latest(self, path: Path) -> BloomTree | None:
        """The tree of ``path`` if this process holds it (by the file's identity), else None."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        with self._lock:
            return self._trees.get((str(path), st.st_ino, st.st_size, st.st_mtime_ns))


#: the trees of this process, shared by every dataset object
LOADED = LoadedIndexes()
