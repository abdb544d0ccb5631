"""Datasets on object storage as a server sees them: the catalog says where each lives, and a server that has
not served one yet (or serves an older build of it) makes its folder a replica of that location
(:mod:`exact.store.replica`) before the request reads it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from exact.store import dataset_dir
from exact.store.fetch import location_of
from exact.store.replica import attach

if TYPE_CHECKING:
    from api.catalog import Catalog

#: how often a server asks the catalog where a dataset lives (a rebuild elsewhere moves it)
CHECK_EVERY_S = 1.0

_CHECKED: dict[tuple[str, str], float] = {}
_LOCK = threading.Lock()


def replicate(catalog: Catalog, home: Path, name: str) -> None:
    """Make dataset ``name``'s folder under ``home`` a replica of the location the catalog records for it,
    when it has none or names another (asked at most every :data:`CHECK_EVERY_S`); nothing for a dataset
    the catalog keeps on a server's disk."""
    key = (str(home), name)
    now = time.monotonic()
    with _LOCK:
        if now - _CHECKED.get(key, -CHECK_EVERY_S) < CHECK_EVERY_S:
            return
        _CHECKED[key] = now
    row = catalog.get_dataset(name)
    location = (row or {}).get("location")
    if not location or (row or {}).get("state") == "deleted":
        return
    root = dataset_dir(name, home)
    if location_of(root) != location:
        attach(root, location)
