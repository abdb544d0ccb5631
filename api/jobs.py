"""Background build jobs: offline builds requested over HTTP, run on a small thread pool in the server.

A job is a catalog row (:class:`api.catalog.BuildJob`) that moves ``queued → running → succeeded | failed``;
its progress (a fraction 0..1 and a short message) is written to the catalog as the build reports it, so any
process that reads the catalog — another server worker, ``GET /v1/jobs/{id}``, an operator with ``sqlite3`` —
sees it.  Inputs are server-side files confined to configured input roots (:func:`resolve_input`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from api.catalog import Catalog, DatasetState, JobState, utcnow
from exact.errors import Conflict, InputError, SeqsketchError

log = logging.getLogger(__name__)

#: Progress reports closer together than this are coalesced (the last one always lands).
PROGRESS_INTERVAL_S = 0.25


class InputNotAllowed(SeqsketchError):
    """A build input outside every configured input root (or escaping one with ``..`` or a symlink)."""

    code = "input_not_allowed"
    http_status = 403


class Progress(Protocol):
    def __call__(self, fraction: float, message: str | None = None) -> None: ...


#: Runs one build: (dataset name, resolved input paths, options, progress) → result summary (info dict).
BuildFunction = Callable[[str, list[Path], dict[str, Any], Progress], dict[str, Any]]


def default_input_roots(home: Path) -> list[Path]:
    """The shared data directory beside the repository (when present) and ``<home>/inputs``."""
    roots = []
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    if shared.is_dir():
        roots.append(shared)
    roots.append(home / "inputs")
    return roots


def input_roots_from_env(home: Path, value: str | None = None) -> list[Path]:
    """``$SEQSKETCH_INPUT_ROOTS`` (``os.pathsep``-separated) or :func:`default_input_roots`."""
    value = os.environ.get("SEQSKETCH_INPUT_ROOTS") if value is None else value
    if value:
        return [Path(p) for p in value.split(os.pathsep) if p]
    return default_input_roots(home)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def resolve_input(spec: str, roots: Sequence[Path]) -> Path:
    """The real path of build input ``spec``, which must lie inside one of ``roots``.

    A relative ``spec`` is looked up under each root in order; an absolute one must already point inside a
    root.  Paths are resolved (``..`` and symlinks followed) *before* the containment check, so neither can
    reach outside.  Raises :class:`InputNotAllowed` (403) for a path outside every root and
    :class:`~exact.errors.InputError` for one that does not exist.
    """
    real_roots = [r.resolve() for r in roots]
    if "\x00" in spec:
        raise InputNotAllowed("input path contains a NUL byte", where=f"inputs: {spec!r}")
    path = Path(spec)
    candidates = [path.resolve()] if path.is_absolute() else [(r / path).resolve() for r in real_roots]
    escaped = False
    for candidate in candidates:
        if not any(_inside(candidate, r) for r in real_roots):
            escaped = True  # '..' or a symlink leads out of the root
        elif candidate.is_file():
            return candidate
    if escaped:
        raise InputNotAllowed(
            "input is outside the server's input roots (SEQSKETCH_INPUT_ROOTS); give a path relative to "
            "a root, without '..' or links leading out of it", where=f"inputs: {spec!r}")
    raise InputError("no such input file under the server's input roots", where=f"inputs: {spec!r}")


@dataclass
class _Throttle:
    """Coalesces progress reports so a fast build does not write the catalog thousands of times."""

    last: float = 0.0

    def due(self, fraction: float) -> bool:
        now = time.monotonic()
        if fraction >= 1.0 or now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            return True
        return False


class JobRunner:
    """Runs build jobs on a thread pool and keeps their state in the catalog.

    ``build`` does the work (the service's build function); the runner owns the bookkeeping: job states,
    progress, errors, the dataset's catalog row and its live index version.
    """

    def __init__(self, catalog: Catalog, build: BuildFunction, *, workers: int = 1) -> None:
        self.catalog = catalog
        self._build = build
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="seqsketch-build")
        self._futures: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def submit(self, dataset: str, inputs: list[Path], options: Mapping[str, Any],
               *, exists: bool) -> dict[str, Any]:
        """Queue a build of ``dataset``; refuses a second one while one is queued or running."""
        with self._lock:
            active = self.catalog.active_job(dataset)
            if active is not None:
                raise Conflict(f"dataset {dataset!r} has a build in progress (job {active['id']})",
                               where=dataset)
            job = self.catalog.create_job(dataset, [str(p) for p in inputs], dict(options))
            if not exists:
                self.catalog.upsert_dataset(dataset, state=DatasetState.BUILDING)
            self._futures[job["id"]] = self._pool.submit(self._run, job["id"], dataset, list(inputs),
                                                         dict(options), exists)
        return job

    def wait(self, job_id: str, timeout: float | None = None) -> None:
        """Block until the job's worker is done (for tests and orderly shutdown)."""
        future = self._futures.get(job_id)
        if future is not None:
            future.result(timeout=timeout)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def _progress(self, job_id: str) -> Progress:
        throttle = _Throttle()

        def report(fraction: float, message: str | None = None) -> None:
            fraction = min(1.0, max(0.0, float(fraction)))
            if throttle.due(fraction):
                self.catalog.update_job(job_id, progress=fraction, message=message)

        return report

    def _run(self, job_id: str, dataset: str, inputs: list[Path], options: dict[str, Any],
             existed: bool) -> None:
        self.catalog.update_job(job_id, state=JobState.RUNNING, started=utcnow(), message="starting")
        try:
            result = self._build(dataset, inputs, options, self._progress(job_id))
        except SeqsketchError as err:
            self._failed(job_id, dataset, err.to_dict(), existed)
        except Exception:  # a bug: log it whole, tell the client only that it happened
            log.exception("build job %s of dataset %s failed", job_id, dataset)
            self._failed(job_id, dataset, {"code": "internal", "message": "internal error during the build; "
                                           "see the server log"}, existed)
        else:
            publish_build(self.catalog, dataset, result)
            self.catalog.update_job(job_id, state=JobState.SUCCEEDED, progress=1.0, message="done",
                                    result=_jsonable(result), finished=utcnow())
        finally:
            with self._lock:
                self._futures.pop(job_id, None)

    def _failed(self, job_id: str, dataset: str, error: dict[str, Any], existed: bool) -> None:
        if not existed:
            self.catalog.upsert_dataset(dataset, state=DatasetState.FAILED)
        self.catalog.update_job(job_id, state=JobState.FAILED, error=error, message="failed",
                                finished=utcnow())


def recover_published_builds(catalog: Catalog, home: Path) -> list[str]:
    """Record as succeeded the unfinished build jobs whose build had published when their server stopped.

    A build publishes by one atomic replace of its store's manifest, and the job is recorded a moment later;
    a server stopped in between leaves a complete dataset under a running job.  A job whose dataset's
    manifest was written after the job started is that case (builds of one dataset do not overlap): it is
    recorded from the dataset as it is on disk.  Returns the jobs recorded.
    """
    from api.service import dataset_info
    from exact.store import MANIFEST, dataset_dir, store_dir

    recorded = []
    for job_id, dataset, started in catalog.unfinished_jobs():
        if started is None:
            continue  # it never began
        try:
            written = (store_dir(dataset_dir(dataset, home)) / MANIFEST).stat().st_mtime
        except (OSError, SeqsketchError):
            continue  # nothing published
        if written < started.timestamp():
            continue  # the dataset it would have replaced
        info = dataset_info(home, dataset)
        publish_build(catalog, dataset, info)
        catalog.update_job(job_id, state=JobState.SUCCEEDED, progress=1.0, result=_jsonable(info),
                           message="done (recorded when the server restarted)", finished=utcnow())
        recorded.append(job_id)
    return recorded


def publish_build(catalog: Catalog, dataset: str, info: Mapping[str, Any]) -> None:
    """Record a finished build (or append) in the catalog: events, and the index version it published."""
    events = int(info.get("events") or 0)
    index = info.get("index") or {}
    number = info.get("index_version") or index.get("version")
    catalog.upsert_dataset(dataset, state=DatasetState.READY, events=events)
    if number is None:
        known = catalog.index_versions(dataset)
        number = (known[-1]["number"] + 1) if known else 1
        if known and known[-1]["digest"] == index.get("index_digest") and known[-1]["events"] == events:
            number = known[-1]["number"]  # nothing new was published
    files = list(index.get("files") or _index_files(int(number)) if index else [])
    catalog.record_index_version(
        dataset, number=int(number), events=events, files=files, digest=index.get("index_digest"),
        config={k: v for k, v in index.items() if k not in ("files", "index_digest", "version")})


def _index_files(version: int) -> list[str]:
    """The file of index version ``version``, relative to the dataset's directory."""
    try:
        from sketch.dataset import index_file_name
    except ImportError:  # a store-only installation has no index files
        return []
    return [index_file_name(version)]


def _jsonable(value: Any) -> Any:
    """``value`` with anything JSON cannot hold turned into text (results go into a JSON column)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def resolve_inputs(specs: Iterable[str], roots: Sequence[Path]) -> list[Path]:
    return [resolve_input(spec, roots) for spec in specs]
