"""Upkeep of live datasets, run by the job runner a step at a time: small parts merged, the partition layout
folded when its tail has grown (:meth:`sketch.dataset.Dataset.maintain`).

Every dataset of a home is looked at in turn; a file lock per dataset (``<home>/maintenance/<name>.lock``,
taken without waiting) makes one runner do it however many share the home.  A step publishes what it did
in one logged commit of the store, so appends, queries and standing queries go on meanwhile; one that loses
a race (a rebuild, a delete) changes nothing and is simply not done.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from exact.errors import SeqsketchError
from exact.store import dataset_names, datasets_dir
from exact.store.fetch import trim
from sketch.dataset import Dataset

log = logging.getLogger(__name__)

#: How long the job runner pauses between two rounds over every dataset (seconds).
MAINTAIN_EVERY_S = 0.2
#: How often it trims the home's replicas to the cache's bound (seconds).
TRIM_EVERY_S = 10.0
_TRIMMED: dict[str, float] = {}


def maintain_dataset(home: Path, name: str) -> dict[str, Any] | None:
    """One round of upkeep for dataset ``name``, unless another process is doing it (None)."""
    folder = home / "maintenance"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return Dataset.open(home, name).maintain()
    finally:
        os.close(fd)


def maintain_datasets(home: Path) -> dict[str, dict[str, Any]]:
    """One round of upkeep for every dataset of ``home``; what was done, by dataset (those with nothing)."""
    done: dict[str, dict[str, Any]] = {}
    if time.monotonic() - _TRIMMED.get(str(home), -math.inf) >= TRIM_EVERY_S:
        _TRIMMED[str(home)] = time.monotonic()
        trim(datasets_dir(home))  # (the replicas of datasets on object storage within the cache's bound)
    for name in dataset_names(home):
        try:
            step = maintain_dataset(home, name)
        except (SeqsketchError, OSError) as err:  # (deleted or rebuilt under it: nothing is changed)
            log.info("upkeep of dataset %s skipped: %s", name, err)
            continue
        if step and any(step.values()):
            done[name] = step
    return done
