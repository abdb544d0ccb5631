"""What happens to the catalog and the disk for a build job, once a job runner (:mod:`api.jobs`) has it.

A runner claims a queued job (:func:`claim_job`) and hands it to :func:`run_job`: the build runs under its
dataset's lock, writing its progress to the job (coalesced, so a fast build does not write the catalog
thousands of times), and the job is settled — succeeded, with the build published to the catalog, or failed,
with the error recorded and a first build's dataset marked ``failed``.  Jobs whose runner stopped are settled
by :func:`settle_abandoned_jobs` from what is on disk, which also removes what killed builds left there.  The
runner keeps only its own life: its processes and threads, and the lock that tells others it is alive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from api.service.builds import Job
from api.service.catalog_sync import jsonable, publish_build, recover_abandoned_jobs
from api.service.datasets import JobProgress, build_dataset
from api.service.locks import DatasetLocks
from exact.errors import SeqsketchError
from exact.store import datasets_dir, sweep_abandoned

if TYPE_CHECKING:
    from api.catalog import Catalog

log = logging.getLogger(__name__)

#: Progress reports closer together than this are coalesced (the last one always lands).
PROGRESS_INTERVAL_S = 0.25
#: What a client is told of a build that failed by a fault of the server (the log has the traceback).
INTERNAL_ERROR = {"code": "internal", "message": "internal error during the build; see the job runner's log"}


@dataclass(frozen=True)
class Settled:
    """What :func:`settle_abandoned_jobs` did: jobs ``recorded`` as succeeded (their build had published),
    jobs marked ``failed`` (``interrupted``), and the remnants of killed builds ``swept`` from disk."""

    recorded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    swept: list[str] = field(default_factory=list)


def claim_job(catalog: Catalog, runner: str) -> Job | None:
    """The oldest queued job, now ``running`` for ``runner`` (exactly one of several runners claiming at once
    gets it), or ``None`` when none is queued."""
    return cast("Job | None", catalog.claim_job(runner))


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


def job_progress(catalog: Catalog, job_id: str) -> JobProgress:
    """A build's progress reports, written to job ``job_id`` at most every :data:`PROGRESS_INTERVAL_S`
    (the report of completion always)."""
    throttle = _Throttle()

    def report(fraction: float, message: str | None = None) -> None:
        fraction = min(1.0, max(0.0, float(fraction)))
        if throttle.due(fraction):
            catalog.update_job(job_id, progress=fraction, message=message)

    return report


def run_job(catalog: Catalog, home: Path, locks: DatasetLocks, job: Mapping[str, Any]) -> Job:
    """Run claimed build job ``job`` under its dataset's lock and settle it: on success the build is
    published to the catalog and the job records its result; on failure the job records the error (a fault of
    the server only as ``internal``, its traceback logged) and a first build's dataset is marked ``failed``.
    Returns the job as finally recorded."""
    from api.catalog import JobState, utcnow  # not at import: a query alone loads no catalog (api.service)

    job_id, dataset = job["id"], job["dataset"]
    inputs = [p if p.startswith("s3://") else Path(p) for p in job["inputs"]]
    log.info("build job %s of dataset %s: started", job_id, dataset)
    try:
        with locks.hold(dataset):
            result = build_dataset(home, dataset, inputs, job["options"], progress=job_progress(catalog, job_id))
    except SeqsketchError as err:
        return fail_job(catalog, job_id, dataset, err.to_dict())
    except Exception:  # a bug: log it whole, tell the client only that it happened
        log.exception("build job %s of dataset %s failed", job_id, dataset)
        return fail_job(catalog, job_id, dataset, dict(INTERNAL_ERROR))
    publish_build(catalog, dataset, result)
    finished = catalog.update_job(job_id, state=JobState.SUCCEEDED, progress=1.0, message="done",
                                  result=jsonable(result), finished=utcnow())
    log.info("build job %s of dataset %s: succeeded, %s events", job_id, dataset, result.get("events"))
    return cast(Job, finished)


def fail_job(catalog: Catalog, job_id: str, dataset: str, error: Mapping[str, Any]) -> Job:
    """Record build job ``job_id`` failed with ``error``; the dataset whose first build it was is marked
    ``failed`` (nothing is left of it).  Returns the job as recorded."""
    from api.catalog import DatasetState, JobState, utcnow

    row = catalog.get_dataset(dataset)
    if row is not None and row["state"] == DatasetState.BUILDING.value:
        catalog.upsert_dataset(dataset, state=DatasetState.FAILED)
    failed = catalog.update_job(job_id, state=JobState.FAILED, error=dict(error), message="failed",
                                finished=utcnow())
    log.info("build job %s of dataset %s: failed, %s", job_id, dataset, error.get("message"))
    return cast(Job, failed)


def settle_abandoned_jobs(catalog: Catalog, home: Path, gone: Callable[[Job], bool], reason: str) -> Settled:
    """Settle the running jobs for which ``gone(job)`` holds (their runner stopped): recorded as succeeded
    when their build had published, else failed with code ``interrupted`` and ``reason``
    (:func:`~api.service.catalog_sync.recover_abandoned_jobs`); then remove what killed builds left on disk."""
    abandoned = [job for job in cast("list[Job]", catalog.running_jobs()) if gone(job)]
    recorded, failed = recover_abandoned_jobs(catalog, home, abandoned, reason)
    return Settled(recorded=recorded, failed=failed, swept=sweep_abandoned(datasets_dir(home)))
