"""Build jobs as the doors see them: asked for, queued in the catalog, looked up and waited for there.

A build asked for over HTTP is only recorded here — a ``queued`` row in the catalog — and run by a job
runner (:mod:`api.jobs`), a process of its own, which claims it and has :mod:`api.service.job_runs` run it and
write the job's progress back.  So a request worker never runs a build, and a restarted request worker
neither loses nor repeats one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from api.service.datasets import dataset_exists
from api.service.inputs import resolve_inputs
from exact.errors import Conflict, NotFound

if TYPE_CHECKING:
    from api.catalog import Catalog

#: What a job says until a runner claims it.
QUEUED_MESSAGE = "queued: waiting for a job runner"


class Job(TypedDict):
    """A build job as the catalog records it (:meth:`api.catalog.BuildJob.to_dict`); times are ISO-8601."""

    id: str
    dataset: str
    state: str  # an api.catalog.JobState value
    progress: float
    message: str | None
    error: dict[str, Any] | None
    inputs: list[str]
    options: dict[str, Any]
    result: dict[str, Any] | None
    created: str | None
    started: str | None
    finished: str | None
    runner: str | None


def request_build(catalog: Catalog, home: Path, name: str, inputs: Sequence[str], options: Mapping[str, Any],
                  input_roots: Sequence[Path]) -> Job:
    """Queue a build of dataset ``name`` from ``inputs`` named relative to (or inside) ``input_roots``, with
    API build ``options``.  A dataset that exists already is rebuilt only with ``"replace": true`` (else
    :class:`~exact.errors.Conflict`)."""
    resolved = resolve_inputs(inputs, input_roots)
    exists = dataset_exists(home, name)
    if exists and not options.get("replace"):
        raise Conflict(f"dataset {name!r} exists already; pass \"replace\": true to rebuild it", where=name)
    return queue_build(catalog, name, resolved, options, exists=exists)


def queue_build(catalog: Catalog, dataset: str, inputs: Sequence[Path | str], options: Mapping[str, Any], *,
                exists: bool) -> Job:
    """Queue a build of ``dataset`` from resolved ``inputs``; a dataset that does not exist yet is listed
    as ``building`` from now on.  One build per dataset is queued or running at a time (else
    :class:`~exact.errors.Conflict`)."""
    return cast(Job, catalog.create_job(dataset, [str(p) for p in inputs], dict(options),
                                        message=QUEUED_MESSAGE, building=not exists))


def job_status(catalog: Catalog, job_id: str) -> Job:
    """Build job ``job_id`` as the catalog has it now (:class:`~exact.errors.NotFound` when there is none)."""
    job = catalog.get_job(job_id)
    if job is None:
        raise NotFound(f"build job {job_id!r} does not exist", where=job_id)
    return cast(Job, job)


def wait_for_job(catalog: Catalog, job_id: str, timeout: float | None = None, poll: float = 0.05) -> Job:
    """The job once it has finished (succeeded or failed), read from the catalog; ``TimeoutError`` after
    ``timeout`` seconds."""
    from api.catalog import JobState  # not at import: a query alone loads no catalog (api.service)

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        job = job_status(catalog, job_id)
        if JobState(job["state"]).finished:
            return job
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"build job {job_id} did not finish within {timeout} s")
        time.sleep(poll)
