"""Where datasets live, and how a whole dataset directory is built and swapped in (or swept after a crash).

Layout: ``$SEQSKETCH_HOME/datasets/<name>/`` (:func:`dataset_dir`), the event store in its ``store/``
(:func:`store_dir`).  A build happens in a staging directory beside the datasets that becomes the dataset
only when the build succeeds (:func:`staged_dataset`): a ``--replace`` swaps it in with one atomic
directory exchange where the system can (:func:`_exchange`), and a stage whose process died is found by
its free owner lock and swept by the next build (:func:`sweep_abandoned`).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from exact.errors import Conflict, InputError, SeqsketchError
from exact.store.durable import fsync_dir
from exact.store.fetch import REMOTE
from exact.store.manifest import MANIFEST

_log = logging.getLogger(__name__)
_DATASET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def seqsketch_home() -> Path:
    """The data root: ``$SEQSKETCH_HOME``, default ``./.seqsketch``."""
    return Path(os.environ.get("SEQSKETCH_HOME") or ".seqsketch").absolute()


def check_dataset_name(name: str) -> str:
    """``name`` if it is a valid dataset name (``[a-z0-9][a-z0-9_-]{0,63}``), else an :class:`InputError`."""
    if not isinstance(name, str) or not _DATASET_NAME.fullmatch(name):
        raise InputError(f"invalid dataset name {name!r}: use 1-64 characters of a-z, 0-9, '_' and '-', "
                         "starting with a letter or digit", where="dataset name")
    return name


def datasets_dir(home: Path | None = None) -> Path:
    return (home or seqsketch_home()) / "datasets"


def dataset_dir(name: str, home: Path | None = None) -> Path:
    return datasets_dir(home) / check_dataset_name(name)


def store_dir(dataset: Path) -> Path:
    """The event store's root inside a dataset directory."""
    return dataset / "store"


def store_published(dataset: Path) -> float | None:
    """When the dataset folder's store was published (the modification time of its manifest, or of its
    ``remote.json`` for a replica of one on object storage); None if it has none."""
    for path in (store_dir(dataset) / MANIFEST, dataset / REMOTE):
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            continue
    return None


def dataset_names(home: Path | None = None) -> list[str]:
    """Names of the datasets under ``home`` that have a committed store, sorted."""
    root = datasets_dir(home)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if _DATASET_NAME.fullmatch(p.name) and store_published(p) is not None)


@contextmanager
def staged_dataset(name: str, home: Path | None = None, *, replace: bool = False,
                   store: str | None = None) -> Iterator[Path]:
    """A fresh directory in which to build dataset ``name``; it becomes the dataset when the block succeeds.

    With a ``store`` location on object storage (default: ``SEQSKETCH_STORE``, see
    :func:`exact.store.replica.default_store`), the built stage is first published there
    (:func:`exact.store.replica.publish_stage`) and becomes the dataset's replica on this server.

    A failing block removes the directory, so a failed build leaves nothing behind.  An existing dataset is
    refused with :class:`Conflict` unless ``replace``; then it is swapped out only once the new one is
    complete.  The stage is owned through a lock file beside it that the system releases when its process
    dies, so that what a killed build left is found and swept by the next one (:func:`sweep_abandoned`).
    """
    from exact.store.replica import abandon_stage, bind_stage, check_store, default_store, publish_stage

    location = check_store(store) if store is not None else default_store()
    final = dataset_dir(name, home)
    if final.exists() and not replace:
        raise Conflict(f"dataset {name!r} exists already (use --replace to rebuild it)", where=str(final))
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_abandoned(final.parent)
    key = f"{name}-{uuid.uuid4().hex[:8]}"
    stage = final.parent / f"{_STAGING}{key}"
    with _owned(final.parent / f"{_STAGING}{key}{_OWNER}"):
        stage.mkdir()
        try:
            if location is not None:
                bind_stage(stage, location, name)  # (its parts are uploaded as they are written)
            yield stage
            if final.exists() and not replace:
                raise Conflict(f"dataset {name!r} was created meanwhile", where=str(final))
            if location is not None:
                publish_stage(stage, location, name)
            if final.exists():
                if _exchange(stage, final):  # one atomic step: the stage now holds the old dataset
                    shutil.rmtree(stage, ignore_errors=True)
                else:
                    # Two steps where the system cannot swap directories: a crash between them leaves the
                    # old dataset in .trash-KEY, which the next sweep renames back.
                    trash = final.parent / f"{_TRASH}{key}"
                    os.replace(final, trash)
                    os.replace(stage, final)
                    shutil.rmtree(trash, ignore_errors=True)
            else:
                os.replace(stage, final)
        finally:
            if stage.exists():
                if location is not None:
                    try:
                        abandon_stage(stage)  # (what its parts' early uploads put: no commit names it)
                    except (SeqsketchError, OSError) as err:
                        _log.warning("the uploads of a failed build in %s stay in the bucket: %s", stage, err)
                shutil.rmtree(stage, ignore_errors=True)


_STAGING, _TRASH, _OWNER = ".staging-", ".trash-", ".owner"
_STAGE_KEY = re.compile(rf"(?P<name>{_DATASET_NAME.pattern})-[0-9a-f]{{8}}")  # a stage's dataset and token


@contextmanager
def _owned(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the file ``path`` (made if missing) for the block, then delete the file.

    Yields False at once (holding nothing) when ``wait`` is off and another process holds it.  A lock taken on
    a file that was deleted meanwhile (by a sweeper that held it) is retaken on a new file.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            yield False
            return
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield True
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def sweep_abandoned(datasets: Path) -> list[str]:
    """Clean up after builds whose process died (the owner lock of their stage is free): their stage is
    deleted and, where a ``--replace`` died between its two renames, the old dataset moved back from its
    trash directory.  Stages of running builds are left alone.  Returns the stage keys swept."""
    if not datasets.is_dir():
        return []
    keys = set()
    for entry in datasets.iterdir():
        if entry.name.startswith(_STAGING):
            key = entry.name[len(_STAGING):].removesuffix(_OWNER)
        elif entry.name.startswith(_TRASH):
            key = entry.name[len(_TRASH):]
        else:
            continue
        if _STAGE_KEY.fullmatch(key):
            keys.add(key)
    swept = []
    for key in sorted(keys):
        with _owned(datasets / f"{_STAGING}{key}{_OWNER}", wait=False) as free:
            if not free:
                continue  # its build is running
            final = datasets / _STAGE_KEY.fullmatch(key)["name"]  # type: ignore[index]
            trash = datasets / f"{_TRASH}{key}"
            if trash.is_dir():
                if final.exists():
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    os.replace(trash, final)  # the replace died between its renames: keep the old dataset
            shutil.rmtree(datasets / f"{_STAGING}{key}", ignore_errors=True)
            swept.append(key)
    return swept


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Replacing a dataset directory by rename-away-then-rename-in would lose the dataset to a crash between the
    two renames; the exchange has no such gap.  False where the system or file system cannot do it.
    """
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        fsync_dir(b.parent)
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))

