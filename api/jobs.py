"""Background build jobs: offline builds requested over HTTP, run on a small thread pool in the server.

A job is a catalog row (:class:`api.catalog.BuildJob`) that moves ``queued → running → succeeded | failed``;
its progress (a fraction 0..1 and a short message) is written to the catalog as the build reports it, so any
process that reads the catalog — another server worker, ``GET /v1/jobs/{id}``, an operator with ``sqlite3`` —
sees it.  The build itself is the service's (:func:`api.service.build_dataset`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from api import service
from api.catalog import Catalog, DatasetState, JobState, utcnow
from api.state import DatasetLocks
from exact.errors import Conflict, SeqsketchError

log = logging.getLogger(__name__)

#: Progress reports closer together than this are coalesced (the last one always lands).
PROGRESS_INTERVAL_S = 0.25


class Progress(Protocol):
    def __call__(self, fraction: float, message: str | None = None) -> None: ...


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

    The service does the work; the runner owns the bookkeeping: job states, progress, errors, the dataset's
    catalog row and its live index version.
    """

    def __init__(self, catalog: Catalog, home: Path, locks: DatasetLocks, *, workers: int = 1) -> None:
        self.catalog = catalog
        self.home = home
        self.locks = locks
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
            with self.locks.hold(dataset):
                result = service.build_dataset(self.home, dataset, inputs, options,
                                               progress=self._progress(job_id))
        except SeqsketchError as err:
            self._failed(job_id, dataset, err.to_dict(), existed)
        except Exception:  # a bug: log it whole, tell the client only that it happened
            log.exception("build job %s of dataset %s failed", job_id, dataset)
            self._failed(job_id, dataset, {"code": "internal", "message": "internal error during the build; "
                                           "see the server log"}, existed)
        else:
            service.publish_build(self.catalog, dataset, result)
            self.catalog.update_job(job_id, state=JobState.SUCCEEDED, progress=1.0, message="done",
                                    result=service.jsonable(result), finished=utcnow())
        finally:
            with self._lock:
                self._futures.pop(job_id, None)

    def _failed(self, job_id: str, dataset: str, error: dict[str, Any], existed: bool) -> None:
        if not existed:
            self.catalog.upsert_dataset(dataset, state=DatasetState.FAILED)
        self.catalog.update_job(job_id, state=JobState.FAILED, error=error, message="failed",
                                finished=utcnow())
