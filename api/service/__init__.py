"""The service: the one place that orchestrates the event store, the index and the exact engine.

The doors — the CLI (:mod:`api.cli`), the HTTP routes (:mod:`api.routes`), the build-job runner
(:mod:`api.jobs`) and the demo (:mod:`api.demo`) — call these functions and only serialise what they return;
nothing here calls a door.

=====================  ==========================================================================
module                 holds
=====================  ==========================================================================
``datasets``           exist, info, list, build, append, delete
``export``             the stored events back out (parquet, jsonl, csv)
``queries``            the three query modes under the caller's limits
``limits``             wall-time limits for work a caller waits on
``inputs``             input roots (where a server may read build inputs) and the shared data
``catalog_sync``       publishing what is on disk to the catalog; settling jobs whose runner stopped
``builds``             build jobs queued in the catalog for a job runner, and waited for
=====================  ==========================================================================
"""

import importlib
from typing import Any

#: Each public name and the module of this package that holds it.  Names are imported when first used
#: (PEP 562), so a command that only queries does not load what builds and the catalog need.
_HOMES = {
    "allowed_inputs": "inputs",
    "append_inputs": "datasets",
    "append_records": "datasets",
    "bound_events": "queries",
    "build_dataset": "datasets",
    "build_from_inputs": "datasets",
    "call_with_timeout": "limits",
    "compact_dataset": "datasets",
    "dataset_exists": "datasets",
    "dataset_info": "datasets",
    "delete_dataset": "datasets",
    "event_density": "datasets",
    "export_dataset": "export",
    "full_scan": "queries",
    "EXPORT_FORMATS": "export",
    "indexed_query": "queries",
    "input_roots_from_env": "inputs",
    "InputNotAllowed": "inputs",
    "jsonable": "catalog_sync",
    "limited_query": "queries",
    "list_datasets": "datasets",
    "prepare_queries": "queries",
    "publish_build": "catalog_sync",
    "QUERY_MODES": "queries",
    "queue_build": "builds",
    "QUEUED_MESSAGE": "builds",
    "recover_abandoned_jobs": "catalog_sync",
    "resolve_inputs": "inputs",
    "run_query": "queries",
    "shared_data_dirs": "inputs",
    "store_events": "datasets",
    "wait_for_job": "builds",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'api.service' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"api.service.{module}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
