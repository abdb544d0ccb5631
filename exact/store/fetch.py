"""The files of a replica (a dataset folder whose dataset lives on object storage), fetched on first use and
kept within a bound.

A replica's folder holds ``remote.json`` naming the dataset's location (:mod:`exact.store.replica`) and, under
the same relative paths as in the bucket, the files this server has read so far.  Every such file is
immutable and uniquely named, so a copy stays true: :func:`fetched` brings one the first time a reader
misses it (written under a temporary name then renamed, so a partly fetched file is never read; a large one
in ranges by several threads), :func:`refetch` replaces a copy a reader found damaged, and :func:`trim` keeps
a home's replicas within ``SEQSKETCH_CACHE_BYTES``.  This module knows nothing of the store's commits: the
readers of parts, seek files, trees and layouts call it where a file is missing, below the store.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exact.errors import InputError, NotFound
from exact.store.block_cache import DEFAULT_CACHE_BYTES, BlockCache
from exact.store.objects import ObjectStore, count_fetched

#: in a dataset folder: the object-store location the dataset lives at (the folder is then its replica)
REMOTE = "remote.json"
#: the environment's bound on the bytes a server's replicas hold (default :data:`DEFAULT_CACHE_BYTES`)
CACHE_ENV = "SEQSKETCH_CACHE_BYTES"
#: the bytes of one ranged request when a replica fetches a large file
FETCH_PIECE = 4 << 20
#: ranged requests of one file in flight at once
FETCH_THREADS = 8
#: a replica's file younger than this is never trimmed (a commit under way may not have uploaded it yet;
#: the store's own grace for what a commit removed, ``exact.store.manifest.REMOVED_GRACE_S``, is as long)
YOUNG_S = 120.0

_LOCK = threading.Lock()
_FILES: dict[str, ObjectStore] = {}  # location → its objects
_RANGED: dict[tuple[str, str], ObjectStore] = {}  # (location, home) → its objects, read through the home's cache
_CACHES: dict[str, BlockCache] = {}  # home → its block cache
_FETCHING: dict[str, threading.Lock] = {}
_SINCE_TRIM: dict[str, int] = {}


def location_of(dataset_root: Path) -> str | None:
    """The location a replica's folder names (None: a dataset on local disk)."""
    try:
        data = json.loads((Path(dataset_root) / REMOTE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise NotFound(f"unreadable {REMOTE}: {err}", where=str(dataset_root)) from None
    return str(data["uri"])


def objects_at(uri: str) -> ObjectStore:
    """The objects of a dataset location, one :class:`ObjectStore` per location in a process."""
    with _LOCK:
        found = _FILES.get(uri)
        if found is None:
            found = _FILES[uri] = ObjectStore(uri)
        return found


def replica_root(path: Path) -> Path | None:
    """The replica folder ``path`` lies in (None: not a replica's file)."""
    for folder in list(path.parents)[:4]:
        if (folder / REMOTE).is_file():
            return folder
    return None


class Ranged:
    """A replica's file read by byte ranges through its home's :class:`~exact.store.objects.BlockCache`
    (blocks fetched once, kept within ``SEQSKETCH_CACHE_BYTES``, each checked when read)."""

    def __init__(self, files: ObjectStore, key: str) -> None:
        self.files, self.key = files, key

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end); :class:`~exact.errors.NotFound` when the
        bucket has no such object."""
        return self.files.read_range(self.key, offset, length)


def ranged(path: str | os.PathLike[str]) -> Ranged | None:
    """``path`` — a replica's file — to be read by ranges (None: not a replica's file)."""
    path = Path(path)
    root = replica_root(path)
    uri = None if root is None else location_of(root)
    if root is None or uri is None:
        return None
    home = root.parent.parent
    with _LOCK:
        files = _RANGED.get((uri, str(home)))
        if files is None:
            cache = _CACHES.get(str(home))
            if cache is None:
                cache = _CACHES[str(home)] = BlockCache.from_env(home)
            files = _RANGED[(uri, str(home))] = ObjectStore(uri, cache)
    return Ranged(files, path.relative_to(root).as_posix())


def fetched(path: str | os.PathLike[str]) -> bool:
    """Fetch ``path`` from the bucket if it is a replica's file not held yet: True once it is there, False
    if ``path`` is not a replica's or the bucket has no such file.  Written under a temporary name and
    renamed: a fetch that dies leaves no partial file under the real name."""
    path = Path(path)
    root = replica_root(path)
    uri = None if root is None else location_of(root)
    if root is None or uri is None:
        return False
    files = objects_at(uri)
    with _LOCK:
        lock = _FETCHING.setdefault(str(path), threading.Lock())
    with lock:
        if path.exists():
            return True
        key = path.relative_to(root).as_posix()
        try:
            size = files.size(key)
        except NotFound:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.fetch-{uuid.uuid4().hex[:8]}")
        try:
            pieces = _fetch_into(files, key, size, tmp)
            if pieces:  # (fetched by other threads: counted as this one's)
                count_fetched(size, pieces)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        _note_fetched(root.parent, size)
    return True


def refetch(path: str | os.PathLike[str]) -> bool:
    """Drop a replica's local copy of ``path`` found damaged and fetch it again; False for a file that is not
    a replica's (its damage stands)."""
    path = Path(path)
    if replica_root(path) is None:
        return False
    path.unlink(missing_ok=True)
    return fetched(path)


def _fetch_into(files: ObjectStore, key: str, size: int, target: Path) -> int:
    """Object ``key`` (of ``size`` bytes) into the file ``target``: in :data:`FETCH_PIECE` ranges fetched by
    :data:`FETCH_THREADS` threads at once when it is larger than one (a single stream from an object store
    moves far fewer bytes a second than several).  Returns the requests other threads made (0: this one
    fetched)."""
    with open(target, "wb") as fh:
        if size <= FETCH_PIECE:
            fh.write(files.get(key))
            return 0
        fh.truncate(size)
        starts = list(range(0, size, FETCH_PIECE))
        lock = threading.Lock()

        def piece(start: int) -> None:
            data = files.fetch(key, start, min(FETCH_PIECE, size - start))
            with lock:
                fh.seek(start)
                fh.write(data)

        with ThreadPoolExecutor(max_workers=min(FETCH_THREADS, len(starts))) as pool:
            list(pool.map(piece, starts))
        return len(starts)


def _note_fetched(datasets: Path, size: int) -> None:
    """Count what a process fetched into a home's replicas; past an eighth of the bound, trim them (a server's
    upkeep trims too, every few seconds: this keeps a process without one within bounds)."""
    with _LOCK:
        held = _SINCE_TRIM.get(str(datasets), 0) + size
        due = held > cache_bytes() // 8
        _SINCE_TRIM[str(datasets)] = 0 if due else held
    if due:
        trim(datasets)


def cache_bytes() -> int:
    """The bound on the bytes a server's replicas hold: ``SEQSKETCH_CACHE_BYTES``, default 2 GiB."""
    raw = os.environ.get(CACHE_ENV)
    try:
        return DEFAULT_CACHE_BYTES if raw is None else int(raw)
    except ValueError:
        raise InputError(f"{CACHE_ENV} must be a number of bytes, not {raw!r}", where=CACHE_ENV) from None


def trim(datasets: Path, max_bytes: int | None = None) -> int:
    """Delete files of the replicas under ``datasets`` (a home's datasets folder), those used longest ago
    first (by the later of their access and modification times), until the replicas hold at most
    ``max_bytes`` (default :func:`cache_bytes`).  Every file a replica holds is in the bucket once a commit
    names it, and is fetched again when read; files younger than :data:`YOUNG_S` are kept (a commit under
    way may not have uploaded them yet).  Returns the bytes deleted."""
    bound = cache_bytes() if max_bytes is None else max_bytes
    held: list[tuple[float, int, Path]] = []
    now = time.time()
    for root in (p for p in datasets.iterdir() if (p / REMOTE).is_file()) if datasets.is_dir() else ():
        for folder in (root / "store" / "parts", root / "index", root / "partition"):
            for f in folder.iterdir() if folder.is_dir() else ():
                try:
                    st = f.stat()
                except FileNotFoundError:
                    continue
                if not f.name.startswith("."):
                    held.append((max(st.st_atime, st.st_mtime), st.st_size, f))
    total = sum(size for _, size, _ in held)
    freed = 0
    for used, size, f in sorted(held, key=lambda h: h[0]):
        if total - freed <= bound:
            break
        if now - used < YOUNG_S:
            continue
        f.unlink(missing_ok=True)
        freed += size
    return freed
