"""A dataset's index versions as files: the manifest's entry naming the live one (:class:`IndexRef`,
``extra["index"]``), where version ``v`` is kept, and writing one (not yet published).  :mod:`sketch.dataset`
publishes, loads and prunes them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exact.errors import IndexCorrupt
from exact.store import Snapshot
from sketch import persist
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
