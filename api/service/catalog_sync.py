"""The catalog's record of what is on disk: a finished build or append is published to the catalog (events,
the live index version), and builds whose job runner stopped are settled: recorded when they had published,
failed otherwise."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from exact.errors import SeqsketchError
from exact.store import dataset_dir, store_published
from sketch.dataset import dataset_info

if TYPE_CHECKING:
    from api.catalog import Catalog

#: A value JSON can hold.
JSONValue: TypeAlias = dict[str, "JSONValue"] | list["JSONValue"] | str | int | float | bool | None


def publish_build(catalog: Catalog, dataset: str, info: Mapping[str, Any]) -> None:
    """Record a finished build (or append) in the catalog: events, and the index version it published."""
    from api.catalog import DatasetState  # not at import: a query alone loads no catalog (api.service)

    events = int(info.get("events") or 0)
    index = info.get("index") or {}
    number = info.get("index_version") or index.get("version")
    catalog.upsert_dataset(dataset, state=DatasetState.READY, events=events,
                           retention=info.get("retention") if "retention" in info else ...,
                           location=info.get("location") if "location" in info else ...)
    if number is None:
        known = catalog.index_versions(dataset)
        number = (known[-1]["number"] + 1) if known else 1
        if known and known[-1]["digest"] == index.get("index_digest") and known[-1]["events"] == events:
            number = known[-1]["number"]  # nothing new was published
    files = list(index.get("files") or ([index["file"]] if index.get("file") else []))
    catalog.record_index_version(
        dataset, number=int(number), events=events, files=files, digest=index.get("index_digest"),
        config={k: v for k, v in index.items() if k not in ("files", "file", "index_digest", "version")})


def recover_abandoned_jobs(catalog: Catalog, home: Path, jobs: Sequence[Mapping[str, Any]],
                           reason: str) -> tuple[list[str], list[str]]:
    """Settle running jobs whose runner is gone: ``(recorded, failed)`` job ids.

    A build publishes by one atomic replace of its store's manifest, and the job is recorded a moment later;
    a runner stopped in between leaves a complete dataset under a running job.  A job whose dataset's
    manifest was written after the job started is that case (builds of one dataset do not overlap): it is
    recorded as succeeded from the dataset as it is on disk.  Every other job is marked failed with code
    ``interrupted`` and ``reason``, and so is the dataset whose first build it was.
    """
    from api.catalog import JobState, utcnow

    recorded, unfinished = [], []
    for job in jobs:
        if _published_after_start(home, job):
            info = dataset_info(home, job["dataset"])
            publish_build(catalog, job["dataset"], info)
            catalog.update_job(job["id"], state=JobState.SUCCEEDED, progress=1.0, result=jsonable(info),
                               message="done (recorded after its job runner stopped)", finished=utcnow())
            recorded.append(job["id"])
        else:
            unfinished.append(job["id"])
    return recorded, catalog.fail_jobs(unfinished, reason)


def _published_after_start(home: Path, job: Mapping[str, Any]) -> bool:
    if not job.get("started"):
        return False  # it never began
    try:
        written = store_published(dataset_dir(job["dataset"], home))
    except SeqsketchError:
        return False
    if written is None:
        return False  # nothing published
    return written >= dt.datetime.fromisoformat(job["started"]).timestamp()


def jsonable(value: Any) -> JSONValue:
    """``value`` with anything JSON cannot hold turned into text (results go into a JSON column)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
