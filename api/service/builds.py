"""Build jobs as the doors see them: queued in the catalog, waited for there.

A build asked for over HTTP is only recorded here — a ``queued`` row in the catalog — and run by a job
runner (:mod:`api.jobs`), a process of its own, which claims it, runs :func:`build_dataset` and writes the
job's progress back.  So a request worker never runs a build, and a restarted request worker neither loses
nor repeats one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exact.errors import NotFound

if TYPE_CHECKING:
    from api.catalog import Catalog

#: What a job says until a runner claims it.
QUEUED_MESSAGE = "queued: waiting for a job runner"


def queue_build(catalog: Catalog, dataset: str, inputs: Sequence[Path], options: Mapping[str, Any], *,
                exists: bool) -> dict[str, Any]:
    """Queue a build of ``dataset`` from resolved ``inputs``; a dataset that does not exist yet is listed
    as ``building`` from now on.  One build per dataset is queued or running at a time (else
    :class:`~exact.errors.Conflict`)."""
    return catalog.create_job(dataset, [str(p) for p in inputs], dict(options), message=QUEUED_MESSAGE,
                              building=not exists)


def wait_for_job(catalog: Catalog, job_id: str, timeout: float | None = None,
                 poll: float = 0.05) -> dict[str, Any]:
    """The job once it has finished (succeeded or failed), read from the catalog; ``TimeoutError`` after
    ``timeout`` seconds."""
    from api.catalog import JobState  # not at import: a query alone loads no catalog (api.service)

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        job = catalog.get_job(job_id)
        if job is None:
            raise NotFound(f"build job {job_id!r} does not exist", where=job_id)
        if JobState(job["state"]).finished:
            return job
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"build job {job_id} did not finish within {timeout} s")
        time.sleep(poll)
