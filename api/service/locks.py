"""Per-dataset locks: what changes a dataset — a build, an append, a delete — takes its turn in a process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DatasetLocks:
    """One lock per dataset name: appends, builds and deletes of one dataset take turns in this process.

    The event store's optimistic commit protects the data across processes; these locks spare callers in one
    process a conflict error when they merely arrive together.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        """Hold dataset ``name``'s lock for the ``with`` block."""
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            yield
