"""Datasets as a server serves them: what is on disk and the catalog's record of it, kept together.

The disk is the truth for a dataset's events and index; the catalog adds its life cycle (``building``,
``ready``, ``failed``, ``deleted``), its live index version and when it was created.  A dataset built or
appended to with the CLI moves the disk on without the catalog: describing or listing it brings the catalog
up to date.  A change — an append, a delete — takes the dataset's lock (:mod:`api.service.locks`), changes
the disk, then records the change in the catalog (a run of appends at most once a second); none is made while
a build of the dataset is queued or running.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from api.service.catalog_sync import publish_build
from api.service.datasets import (
    AppendResult,
    DatasetInfo,
    append_records,
    dataset_exists,
    dataset_info,
    delete_dataset,
    list_datasets,
    set_retention,
)
from api.service.locks import DatasetLocks
from exact.errors import Conflict, NotFound

if TYPE_CHECKING:
    from api.catalog import Catalog

#: A dataset as a server describes it: the ``info`` object (docs/contract.md §4) plus the catalog's ``state``,
#: ``index_version`` and ``created`` — or, for a dataset whose first build is queued, running or failed
#: (nothing on disk), only ``name``, ``events``, ``state``, ``index_version`` and ``created``.
DatasetView: TypeAlias = dict[str, Any]


def served_datasets(catalog: Catalog, home: Path) -> list[DatasetView]:
    """Every dataset on disk or on object storage (a replica made here for one this server has not served
    yet), and those whose first build is pending or failed, by name."""
    from api.service.replicas import replicate

    out: dict[str, DatasetView] = {}
    rows = catalog.list_datasets()
    for row in rows:
        if row.get("location") and row["state"] != "deleted":
            replicate(catalog, home, row["name"])
    for info in list_datasets(home):
        out[info["name"]] = _merge(info, _synced_row(catalog, info["name"], info))
    pending = _pending_states()
    for row in rows:
        if row["name"] not in out and row["state"] in pending:
            out[row["name"]] = _catalog_only(row)
    return [out[n] for n in sorted(out)]


def served_dataset(catalog: Catalog, home: Path, name: str) -> DatasetView:
    """Dataset ``name``, on disk or with its first build pending or failed (else
    :class:`~exact.errors.NotFound`)."""
    if dataset_exists(home, name):
        info = dataset_info(home, name)
        return _merge(info, _synced_row(catalog, name, info))
    row = catalog.get_dataset(name)
    if row is not None and row["state"] in _pending_states():
        return _catalog_only(row)
    raise NotFound(f"dataset {name!r} does not exist", where=name)


def _check_writable(catalog: Catalog, home: Path, name: str) -> None:
    """Dataset ``name`` exists and no build of it is queued or running (:class:`~exact.errors.Conflict`)."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist; build it first", where=name)
    active = catalog.active_job(name)
    if active is not None:
        raise Conflict(f"dataset {name!r} has a build in progress (job {active['id']})", where=name)


def append_to_served_dataset(catalog: Catalog, home: Path, locks: DatasetLocks, name: str,
                             records: Sequence[Mapping[str, Any]], *, watermark: Any = None) -> AppendResult:
    """Append API ``records`` to dataset ``name`` (all or nothing) under its lock, with ``watermark`` after
    them, and publish the index version covering them; :class:`~exact.errors.Conflict` while a build of it
    is queued or running."""
    _check_writable(catalog, home, name)
    with locks.hold(name):
        result = append_records(home, name, records, watermark=watermark)
        now = time.monotonic()
        if now - _PUBLISHED.get((str(home), name), -math.inf) >= PUBLISH_EVERY_S:
            _PUBLISHED[(str(home), name)] = now
            publish_build(catalog, name, dataset_info(home, name))
    return result


#: How often a run of appends records the dataset's new state in the catalog (seconds); describing or
#: listing the dataset records it at once.  A live feed appends many times a second: recording each would cost
#: each append two catalog transactions and the catalog a row per append.
PUBLISH_EVERY_S = 1.0
#: When each dataset's appends were last recorded in this process (under the dataset's lock).
_PUBLISHED: dict[tuple[str, str], float] = {}


def retain_served_dataset(catalog: Catalog, home: Path, locks: DatasetLocks, name: str,
                          keep: str | None) -> DatasetInfo:
    """Set dataset ``name``'s retention (:func:`~api.service.datasets.set_retention`) under its lock, retire
    what is past it, and record both in the catalog; :class:`~exact.errors.Conflict` while a build of it is
    queued or running."""
    _check_writable(catalog, home, name)
    with locks.hold(name):
        info = set_retention(home, name, keep)
        publish_build(catalog, name, info)
    return info


def delete_served_dataset(catalog: Catalog, home: Path, locks: DatasetLocks, name: str) -> None:
    """Remove dataset ``name`` from disk under its lock and mark it ``deleted`` in the catalog (its jobs and
    queries stay readable); :class:`~exact.errors.Conflict` while a build of it is queued or running."""
    from api.catalog import DatasetState  # not at import: a query alone loads no catalog (api.service)

    active = catalog.active_job(name)
    if active is not None:
        raise Conflict(f"dataset {name!r} has a build in progress (job {active['id']}); delete it afterwards",
                       where=name)
    with locks.hold(name):
        on_disk = dataset_exists(home, name)
        row = catalog.get_dataset(name)
        if not on_disk and (row is None or row["state"] == DatasetState.DELETED.value):
            raise NotFound(f"dataset {name!r} does not exist", where=name)
        if on_disk:
            delete_dataset(home, name)
        catalog.mark_deleted(name)
        catalog.delete_watches_of(name)  # (their streams end within a second: the watch is gone)


def _pending_states() -> tuple[str, str]:
    """The catalog states of a dataset with nothing on disk that is still listed: its first build is queued
    or running, or failed."""
    from api.catalog import DatasetState

    return DatasetState.BUILDING.value, DatasetState.FAILED.value


def _disk_version(info: Mapping[str, Any]) -> int | None:
    index = info.get("index") or {}
    version = info.get("index_version", index.get("version"))
    return None if version is None else int(version)


def _merge(info: DatasetInfo, row: Mapping[str, Any]) -> DatasetView:
    """The store's description of a dataset plus what the catalog adds (state, live version, creation)."""
    from api.catalog import DatasetState

    out = dict(info)
    out["state"] = row.get("state", DatasetState.READY.value)
    version = _disk_version(info)
    out["index_version"] = row.get("index_version") if version is None else version
    out["created"] = row.get("created")
    return out


def _catalog_only(row: Mapping[str, Any]) -> DatasetView:
    return {"name": row["name"], "events": row["events"], "state": row["state"],
            "index_version": row["index_version"], "created": row["created"]}


def _synced_row(catalog: Catalog, name: str, info: DatasetInfo) -> dict[str, Any]:
    """The catalog row of a dataset found on disk, brought up to date when the disk moved on without the
    service (built or appended with the CLI)."""
    from api.catalog import DatasetState

    row = catalog.get_dataset(name)
    stale = (row is None or row["state"] != DatasetState.READY.value or row["events"] != info.get("events")
             or (_disk_version(info) is not None and row["index_version"] != _disk_version(info)))
    if stale:
        publish_build(catalog, name, info)
        row = catalog.get_dataset(name)
    return row or {}
