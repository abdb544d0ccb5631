"""Writing a store's files so that a crash at any point loses nothing: the commit log's files published once
each (:func:`write_change`), the checkpoint replaced atomically (:func:`write_manifest`), and the fsyncs of
files and folders they stand on (:func:`fsync_all`, on a small pool of threads)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from exact.errors import Conflict
from exact.store.manifest import LOG, MANIFEST, REMOVED_GRACE_S, Change, Snapshot, log_name


def write_change(root: Path, change: Change, *, sync_dirs: Sequence[Path] = ()) -> None:
    """Publish ``change`` as the log's next file: written aside, then linked into place only if no commit of
    its version exists (:class:`~exact.errors.Conflict` otherwise), so each version is published once.
    ``sync_dirs`` (the folder of parts the change adds) are flushed with the file, before it is linked."""

    folder = root / LOG
    folder.mkdir(exist_ok=True)
    final = root / log_name(change.version)
    tmp = folder / f".{change.version:012d}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        _write_json(tmp, change.to_json())
        fsync_all([tmp], sync_dirs)
        try:
            os.link(tmp, final)
        except FileExistsError:
            raise Conflict(f"version {change.version} was committed meanwhile; retry", where=str(root)) from None
        fsync_dir(folder)
    finally:
        tmp.unlink(missing_ok=True)


def drop_log(root: Path, upto: int) -> None:
    """Delete the log files of versions up to ``upto`` (a checkpoint holds them now), and temp leftovers."""
    folder = root / LOG
    if not folder.is_dir():
        return
    for f in folder.iterdir():
        name = f.name
        if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) <= upto:
            f.unlink(missing_ok=True)
        elif name.startswith(".") and name.endswith(".tmp"):
            try:
                if time.time() - f.stat().st_mtime > REMOVED_GRACE_S:
                    f.unlink(missing_ok=True)
            except FileNotFoundError:
                pass


def write_manifest(root: Path, snap: Snapshot, *, sync_dirs: Sequence[Path] = ()) -> None:
    """Replace ``root``'s manifest by ``snap`` atomically: a temporary file, fsynced (with ``sync_dirs``),
    renamed over it."""
    path = root / MANIFEST
    tmp = root / f".{MANIFEST}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        _write_json(tmp, snap.to_json())
        fsync_all([tmp], sync_dirs)
        os.replace(tmp, path)
        fsync_dir(root)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(path: Path, value: Any) -> None:
    """Write ``value`` as compact JSON to ``path`` (not yet flushed to disk: :func:`fsync_all`)."""
    data = json.dumps(value, separators=(",", ":")).encode("utf-8")  # (one write: json.dump writes per token)
    with open(path, "wb") as fh:
        fh.write(data)


def _write_json_synced(path: Path, value: Any) -> None:
    """Write ``value`` as compact JSON to ``path`` and fsync it (the caller then publishes it by name)."""
    _write_json(path, value)
    fsync_file(path)


def fsync_all(files: Sequence[Path] = (), dirs: Sequence[Path] = ()) -> None:
    """Flush written files and folders' entries to disk at once: each waits for the disk on its own thread
    (a commit's part, seek file, log entry and parts folder cost one wait or two instead of five)."""
    jobs = [(fsync_file, p) for p in files] + [(fsync_dir, d) for d in dirs]
    if len(jobs) <= 1:
        for sync, path in jobs:
            sync(path)
        return
    pool = _sync_pool()
    waiting = [pool.submit(sync, path) for sync, path in jobs[1:]]
    first, path = jobs[0]
    try:
        first(path)
    finally:
        for future in waiting:
            future.result()


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    """This process's flushing threads (a forked server process makes its own: threads do not survive a
    fork)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=4, thread_name_prefix="seqsketch-fsync"))
        return _POOL[1]


def fsync_file(path: Path) -> None:
    """Flush a written file to disk (before it is renamed into place)."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (after a rename in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
