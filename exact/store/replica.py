"""A dataset kept on object storage, served from a local replica.

A dataset built with a store location (``s3://bucket/prefix``) lives at ``<location>/<name>/<lineage>/`` in the
bucket: every file it writes (parts and their seek files under ``store/parts/``, index trees under ``index/``,
partition layouts under ``partition/``) is uploaded under its path in the dataset, and its commits are the
bucket's commit log (:mod:`exact.store.objectlog`: ``store/log/<v>.json``, each published by a conditional put,
with checkpoints).  The bucket is the dataset's truth; each server holds a *replica*: the dataset's local
folder with a ``remote.json`` naming the location, and no manifest of its own.

- **Reading.**  A replica's snapshot is the bucket log's, followed at most :data:`READ_AGE_S` after it was last
  read (a commit by another server is seen within that; a writer holding the lock always reads it afresh).
  Files are fetched on first use (:func:`fetched`): written under a temporary name, then renamed, so a
  partly fetched file is never read; a file found damaged is fetched again.  Every file is immutable and its
  name unique (parts by token, index files by version and token), so what a server fetched stays true.
- **Writing.**  A commit writes its files locally as on disk, uploads the new ones, then publishes its change
  as the log's next version.  Of servers racing to publish one version exactly one succeeds; the others get
  :class:`~exact.errors.Conflict` (a ``409``), and nothing of their commit is visible.
- **Building.**  A build happens in a local stage as always; :func:`publish_stage` uploads the stage's files
  and creates the log, then the stage becomes the replica (its files are the cache).  A rebuild of a name
  gets a new lineage folder, so readers of the old one are not disturbed.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exact.errors import InputError
from exact.store.fetch import REMOTE, location_of, objects_at
from exact.store.manifest import (
    CHECKPOINT_EVERY,
    LOG,
    MANIFEST,
    PARTS,
    REMOVED_GRACE_S,
    Snapshot,
    empty_snapshot,
)
from exact.store.objectlog import ObjectLog
from exact.store.objects import ObjectLocation, ObjectStore, is_object_uri

#: the environment's default store location for new datasets (unset: the home's local disk)
STORE_ENV = "SEQSKETCH_STORE"
#: how stale a reader's view of a replica's commit log may be, in seconds
READ_AGE_S = 0.25
#: parallel uploads of a commit's or a build's files
UPLOADS = 8
#: how long a bucket object may be found unnamed by any commit before it goes: a commit under way uploads its
#: files before it publishes them, and a reader of an older snapshot may still fetch one
UNNAMED_GRACE_S = REMOVED_GRACE_S
#: commits kept in the bucket's log behind its newest checkpoint (a reader that listed an older checkpoint
#: follows the log from there)
LOG_KEPT = 2 * CHECKPOINT_EVERY


def default_store() -> str | None:
    """The store location new datasets get unless one is named: ``SEQSKETCH_STORE`` (None: local disk)."""
    value = os.environ.get(STORE_ENV) or None
    if value is not None:
        check_store(value)
    return value


def check_store(store: str) -> str:
    """``store`` if it names object storage (``s3://bucket/prefix``); else an :class:`InputError` naming it."""
    if not is_object_uri(store):
        raise InputError(f"a store location must be s3://bucket/prefix, not {store!r}", where="store")
    ObjectLocation.parse(store)
    return store.rstrip("/")


@dataclass
class Remote:
    """The bucket side of one replica: the dataset's files, and its commit log."""

    uri: str
    files: ObjectStore
    log: ObjectLog
    checked: float = 0.0  # when the log was last followed (time.monotonic)
    #: bucket objects the last sweeps found named by no commit, with when first found so (time.monotonic)
    unnamed: dict[str, float] = field(default_factory=dict)

    lock: threading.Lock = field(default_factory=threading.Lock)  # (one dataset's log read or written at a time)

    def snapshot(self, *, fresh: bool) -> Snapshot:
        with self.lock:
            latest = self.log._latest
            if fresh or latest is None or time.monotonic() - self.checked > READ_AGE_S:
                snap = self.log.snapshot()
                self.checked = time.monotonic()
                return snap
            return latest

    def commit(self, before: Snapshot, after: Snapshot) -> Snapshot:
        with self.lock:
            try:
                snap = self.log.commit(before, after)
            except BaseException:
                self.checked = 0.0  # (a lost race, or a failure: the next read follows the log afresh)
                raise
            self.checked = time.monotonic()
            return snap


_LOCK = threading.RLock()
_REMOTES: dict[tuple[str, str], Remote] = {}  # (dataset folder, location) → its bucket side


def remote_for(dataset_root: Path) -> Remote | None:
    """The bucket side of the replica at ``dataset_root`` (None for a dataset on local disk)."""
    uri = location_of(dataset_root)
    if uri is None:
        return None
    key = (str(dataset_root), uri)
    with _LOCK:
        found = _REMOTES.get(key)
        if found is None:
            files = objects_at(uri)
            store = ObjectStore(ObjectLocation.parse(uri).child("store"), filesystem=files.fs)
            found = _REMOTES[key] = Remote(uri, files, ObjectLog(store))
        return found


def store_remote(store_root: Path) -> Remote | None:
    """The bucket side of an event store whose folder is a replica's ``store/`` (None otherwise)."""
    dataset_root = Path(store_root).parent
    if not (dataset_root / REMOTE).is_file():
        return None
    return remote_for(dataset_root)


def attach(dataset_root: Path, uri: str) -> None:
    """Make ``dataset_root`` a replica of the dataset at ``uri`` (a server that has not served it yet): the
    folder and its ``remote.json``; files come as they are read."""
    (Path(dataset_root) / "store").mkdir(parents=True, exist_ok=True)
    if location_of(dataset_root) != uri:
        _write_remote(Path(dataset_root), uri)


def _write_remote(dataset_root: Path, uri: str) -> None:
    tmp = dataset_root / f".{REMOTE}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(json.dumps({"uri": uri}))
    os.replace(tmp, dataset_root / REMOTE)


def sweep_bucket(remote: Remote, *, now: float | None = None) -> dict[str, int]:
    """Delete from the bucket what no commit needs: log entries more than :data:`LOG_KEPT` behind the newest
    checkpoint, checkpoints older than the one before it, and files the current commit does not name (a lost
    race's uploads, parts merged or retired away, trees replaced) — each once this process has found it so
    for :data:`UNNAMED_GRACE_S` (a reader of an older snapshot may still fetch a file meanwhile, and a reader
    lists the checkpoints again within :data:`~exact.store.objectlog.LIST_EVERY_S`).  Returns what was
    deleted."""
    now = time.monotonic() if now is None else now
    snap = remote.snapshot(fresh=True)
    keys = remote.files.list()
    checkpoints = sorted(_version_of(k) for k in keys if k.startswith("store/checkpoint/") and k.endswith(".json"))
    floor = checkpoints[-2] if len(checkpoints) >= 2 else 0  # (a reader may still follow from the one before)
    named = set(commit_files(_EMPTY, snap))
    done = {"log": 0, "checkpoints": 0, "files": 0}
    unnamed = remote.unnamed
    for key in keys:
        if key.startswith("store/log/"):
            kind, needed = "log", not key.endswith(".json") or _version_of(key) > snap.checkpoint - LOG_KEPT
        elif key.startswith("store/checkpoint/"):
            kind, needed = "checkpoints", not key.endswith(".json") or _version_of(key) >= floor
        else:
            kind, needed = "files", key in named
        if needed:
            unnamed.pop(key, None)
        elif now - unnamed.setdefault(key, now) >= UNNAMED_GRACE_S:  # (found so at least that long)
            remote.files.delete(key)
            unnamed.pop(key, None)
            done[kind] += 1
    return done


def _version_of(key: str) -> int:
    return int(key.rsplit("/", 1)[1].split(".")[0])


# ----------------------------------------------------------------------------------------------- writing
def upload(remote: Remote, dataset_root: Path, files: list[str]) -> None:
    """Upload ``files`` (paths relative to the dataset folder) to the bucket, in parallel.  Names are unique,
    so an object that exists already is this very file (uploaded by an earlier try)."""
    if len(files) > UPLOADS:  # (a build's parts may be in the bucket already: a Spark job's tasks put them)
        held = set(remote.files.list(f"store/{PARTS}"))
        files = [f for f in files if f not in held]
    if not files:
        return

    def one(rel: str) -> None:
        remote.files.put_if_absent(rel, (dataset_root / rel).read_bytes())

    if len(files) == 1:
        one(files[0])
        return
    with ThreadPoolExecutor(max_workers=min(UPLOADS, len(files))) as pool:
        list(pool.map(one, files))


def commit_files(before: Snapshot, after: Snapshot) -> list[str]:
    """The files (relative to the dataset folder) that ``after`` names and ``before`` does not."""
    had = {f for p in before.parts for f in p.files}
    out = [f"store/{PARTS}/{f}" for p in after.parts for f in p.files if f not in had]
    old = {e["file"] for e in (before.extra or {}).values() if isinstance(e, dict) and "file" in e}
    out += [e["file"] for e in (after.extra or {}).values()
            if isinstance(e, dict) and isinstance(e.get("file"), str) and e["file"] not in old]
    return out


#: in a build's stage bound for object storage: where it will be published (written as the stage is made)
BOUND = ".bound-for.json"


def bind_stage(stage: Path, location: str, name: str) -> str:
    """Mark a build's stage as bound for ``<location>/<name>/<token>`` (a new folder for every build, so a
    rebuild never writes over the files readers of the old one fetch); returns that location.  The parts the
    build writes are uploaded as they are written (:func:`upload_written`), the rest when it is published."""
    uri = f"{check_store(location)}/{name}/{uuid.uuid4().hex}"
    ObjectStore(uri, create_bucket=True)
    (stage / BOUND).write_text(json.dumps({"uri": uri}))
    return uri


def stage_location(stage: Path) -> str | None:
    """The location a stage is bound for (None: it becomes a dataset on disk)."""
    try:
        return str(json.loads((stage / BOUND).read_text())["uri"])
    except FileNotFoundError:
        return None


_EARLY: tuple[int, ThreadPoolExecutor] | None = None
_PENDING: dict[str, list[Any]] = {}  # stage → uploads under way


def _early_pool() -> ThreadPoolExecutor:
    """This process's uploading threads (a forked process makes its own: threads do not survive a fork)."""
    global _EARLY
    with _LOCK:
        if _EARLY is None or _EARLY[0] != os.getpid():
            _EARLY = (os.getpid(), ThreadPoolExecutor(max_workers=UPLOADS // 2,
                                                      thread_name_prefix="seqsketch-upload"))
        return _EARLY[1]


def upload_written(store_root: Path, uri: str, files: Sequence[str]) -> None:
    """A part just written into the store of a stage bound for ``uri``: start uploading its files now, while
    the build goes on; :func:`publish_stage` waits for them."""
    stage = Path(store_root).parent
    objects = objects_at(uri)

    def put(rel: str) -> str:
        objects.put_if_absent(rel, (stage / rel).read_bytes())
        return rel

    with _LOCK:
        pending = _PENDING.setdefault(str(stage), [])
        pending.extend(_early_pool().submit(put, f"store/{PARTS}/{f}") for f in files)


def _early_uploads(stage: Path) -> set[str]:
    """Wait for a stage's early uploads; what they put (an upload that failed raises here)."""
    with _LOCK:
        pending = _PENDING.pop(str(stage), [])
    return {future.result() for future in pending}


def abandon_stage(stage: Path) -> None:
    """A build that failed in a stage bound for a bucket: wait for its uploads and delete what they put (no
    commit ever named it)."""
    uri = stage_location(stage)
    with _LOCK:
        pending = _PENDING.pop(str(stage), [])
    for future in pending:
        try:
            future.result()
        except Exception:  # noqa: BLE001 - (what did not upload need not be deleted)
            continue
    if uri is not None:
        objects = objects_at(uri)
        for key in objects.list():
            objects.delete(key)


def publish_stage(stage: Path, location: str, name: str) -> str:
    """Upload a built dataset's stage to the location it is bound for (:func:`bind_stage`; else a new one
    under ``<location>/<name>/``) and create its commit log from the stage's manifest; the stage then becomes
    a replica.  Returns the dataset's location."""
    from exact.store.manifest import StoreBase

    snap = StoreBase(stage / "store").snapshot()
    uri = stage_location(stage) or bind_stage(stage, location, name)
    files = objects_at(uri)
    upload_remote = Remote(uri, files, ObjectLog(ObjectStore(ObjectLocation.parse(uri).child("store"),
                                                             filesystem=files.fs)))
    early = _early_uploads(stage)
    named = [f for f in commit_files(_EMPTY, snap) if f not in early]
    upload(upload_remote, stage, named)
    upload_remote.log.create(snap)
    (stage / BOUND).unlink(missing_ok=True)
    # the stage is now a replica: its files are the cache; its commits are the bucket's
    (stage / "store" / MANIFEST).unlink(missing_ok=True)
    for f in (stage / "store" / LOG).glob("*") if (stage / "store" / LOG).is_dir() else ():
        f.unlink(missing_ok=True)
    _write_remote(stage, uri)
    return uri


_EMPTY = empty_snapshot(1)
