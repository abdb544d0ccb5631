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

from api.service.builds import QUEUED_MESSAGE, queue_build, wait_for_job
from api.service.catalog_sync import jsonable, publish_build, recover_abandoned_jobs
from api.service.datasets import (
    append_inputs,
    append_records,
    build_dataset,
    build_from_inputs,
    compact_dataset,
    dataset_exists,
    dataset_info,
    delete_dataset,
    event_density,
    list_datasets,
    store_events,
)
from api.service.export import EXPORT_FORMATS, export_dataset
from api.service.inputs import (
    InputNotAllowed,
    allowed_inputs,
    input_roots_from_env,
    resolve_inputs,
    shared_data_dirs,
)
from api.service.limits import call_with_timeout
from api.service.queries import (
    QUERY_MODES,
    bound_events,
    indexed_query,
    limited_query,
    prepare_queries,
    run_query,
)

__all__ = [
    "allowed_inputs", "append_inputs", "append_records", "bound_events", "build_dataset",
    "build_from_inputs", "call_with_timeout", "compact_dataset", "dataset_exists", "dataset_info",
    "delete_dataset", "event_density", "export_dataset", "EXPORT_FORMATS", "indexed_query",
    "input_roots_from_env", "InputNotAllowed", "jsonable", "limited_query", "list_datasets",
    "prepare_queries", "publish_build", "QUERY_MODES", "queue_build", "QUEUED_MESSAGE",
    "recover_abandoned_jobs", "recover_published_builds", "resolve_inputs", "run_query", "shared_data_dirs",
    "store_events", "wait_for_job",
]
