"""The catalog's record of what is on disk: a finished build or append is published to the catalog (events,
the live index version), and builds that published just before a server stopped are recorded on restart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from api.catalog import Catalog, DatasetState, JobState, utcnow
from exact.errors import SeqsketchError
from exact.store import MANIFEST, dataset_dir, store_dir
from sketch.dataset import dataset_info, index_file_name


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
    files = list(index.get("files") or [index_file_name(int(number))] if index else [])
    catalog.record_index_version(
        dataset, number=int(number), events=events, files=files, digest=index.get("index_digest"),
        config={k: v for k, v in index.items() if k not in ("files", "index_digest", "version")})


def recover_published_builds(catalog: Catalog, home: Path) -> list[str]:
    """Record as succeeded the unfinished build jobs whose build had published when their server stopped.

    A build publishes by one atomic replace of its store's manifest, and the job is recorded a moment later;
    a server stopped in between leaves a complete dataset under a running job.  A job whose dataset's
    manifest was written after the job started is that case (builds of one dataset do not overlap): it is
    recorded from the dataset as it is on disk.  Returns the jobs recorded.
    """
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
        catalog.update_job(job_id, state=JobState.SUCCEEDED, progress=1.0, result=jsonable(info),
                           message="done (recorded when the server restarted)", finished=utcnow())
        recorded.append(job_id)
    return recorded


def jsonable(value: Any) -> Any:
    """``value`` with anything JSON cannot hold turned into text (results go into a JSON column)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
