"""The service: the one place that orchestrates the event store, the index, the exact engine and the catalog.

The doors — the CLI (:mod:`api.cli`), the HTTP routes (:mod:`api.routes`), the build-job runner
(:mod:`api.jobs`) and the demo (:mod:`api.demo`) — call these functions and only serialise what they return;
nothing here calls a door.

=====================  ==========================================================================
module                 holds
=====================  ==========================================================================
``datasets``           exist, info, list, build, append, delete, compact, events over time
``served``             datasets as a server serves them: the disk and the catalog kept together
``bound``              the service bound to one server's state, as the routes call it
``batches``            API event records as a stream table: a feed's batch by column, others by record
``export``             the stored events back out (parquet, jsonl, csv)
``queries``            the three query modes under the caller's limits; a server's, logged
``limits``             wall-time limits for work a caller waits on
``locks``              per-dataset locks: builds, appends and deletes of one dataset take turns
``inputs``             input roots (where a server may read build inputs) and the shared data
``catalog_sync``       publishing what is on disk to the catalog; settling jobs whose runner stopped
``builds``             build jobs asked for, queued in the catalog, looked up and waited for
``job_runs``           a claimed job run and settled; the jobs of stopped runners settled
``build_memory``       the memory an in-process build needs, refused beyond its limit
``watches``            watches kept in the catalog, each owned by the token that made it
``follower``           a standing query followed as the stream grows; one shared follower per query
``summaries``          funnels, the events after matches, durations, counts by a field (docs/contract.md §3.7)
``sse``                a watch's stream as Server-Sent Events (the wire format)
``webhook_policy``     where a webhook may post: one parser for the check and the send
``webhooks``           the job runner's deliverer: each webhook watch's matches posted in order, signed
``maintenance``        upkeep of live datasets: small parts merged, the partition layout folded
``replicas``           datasets on object storage: a server's folder made a replica of where they live
=====================  ==========================================================================

Every public name is imported here explicitly, so that editors and type checkers see each function's own
signature.  A command that only queries still loads nothing that builds and the catalog need beyond what the
query itself uses: the modules that work on the catalog import :mod:`api.catalog` (SQLAlchemy, Alembic)
inside the functions that use it, and only for type checking at module level.  (The alternative — the CLI
importing submodules directly — would not help: importing ``api.service.queries`` runs this file first.)
``tests/test_cli_cold.py`` holds a cold ``seqsketch query`` to that.
"""

from api.service.builds import QUEUED_MESSAGE, Job, job_status, queue_build, request_build, wait_for_job
from api.service.catalog_sync import jsonable, publish_build, recover_abandoned_jobs
from api.service.datasets import (
    AppendResult,
    BuildSummary,
    DatasetInfo,
    Density,
    JobProgress,
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
    set_retention,
    store_events,
)
from api.service.export import EXPORT_FORMATS, export_dataset
from api.service.follower import StreamEvent, follow, shared_follow, standing_query
from api.service.inputs import (
    InputNotAllowed,
    allowed_inputs,
    input_roots_from_env,
    resolve_inputs,
    shared_data_dirs,
)
from api.service.job_runs import Settled, claim_job, fail_job, job_progress, run_job, settle_abandoned_jobs
from api.service.limits import call_with_timeout
from api.service.locks import DatasetLocks
from api.service.maintenance import MAINTAIN_EVERY_S, maintain_dataset, maintain_datasets
from api.service.queries import (
    QUERY_MODES,
    QueryAnswer,
    QueryLimits,
    QueryRequest,
    bound_events,
    full_scan,
    indexed_query,
    limited_query,
    logged_query,
    prepare_queries,
    run_query,
)
from api.service.replicas import replicate
from api.service.served import (
    DatasetView,
    append_to_served_dataset,
    delete_served_dataset,
    retain_served_dataset,
    served_dataset,
    served_datasets,
)
from api.service.sse import sse_events
from api.service.watches import (
    WATCH_MODES,
    Watch,
    create_watch,
    delete_watch,
    get_watch,
    list_watches,
    may_use,
    start_cursor,
)
from api.service.webhooks import Deliverer
from sketch.build_request import BuildRequest

__all__ = [
    "AppendResult",
    "BuildRequest",
    "BuildSummary",
    "DatasetInfo",
    "DatasetLocks",
    "MAINTAIN_EVERY_S",
    "Deliverer",
    "DatasetView",
    "Density",
    "EXPORT_FORMATS",
    "InputNotAllowed",
    "Job",
    "JobProgress",
    "QUERY_MODES",
    "QUEUED_MESSAGE",
    "QueryAnswer",
    "QueryLimits",
    "QueryRequest",
    "Settled",
    "allowed_inputs",
    "append_inputs",
    "append_records",
    "append_to_served_dataset",
    "bound_events",
    "build_dataset",
    "build_from_inputs",
    "call_with_timeout",
    "claim_job",
    "compact_dataset",
    "dataset_exists",
    "dataset_info",
    "delete_dataset",
    "delete_served_dataset",
    "event_density",
    "export_dataset",
    "fail_job",
    "full_scan",
    "indexed_query",
    "input_roots_from_env",
    "job_progress",
    "job_status",
    "jsonable",
    "limited_query",
    "maintain_dataset",
    "maintain_datasets",
    "list_datasets",
    "logged_query",
    "prepare_queries",
    "publish_build",
    "queue_build",
    "recover_abandoned_jobs",
    "replicate",
    "request_build",
    "resolve_inputs",
    "run_job",
    "retain_served_dataset",
    "run_query",
    "served_dataset",
    "served_datasets",
    "settle_abandoned_jobs",
    "set_retention",
    "shared_data_dirs",
    "store_events",
    "wait_for_job",
    "WATCH_MODES",
    "StreamEvent",
    "Watch",
    "create_watch",
    "delete_watch",
    "follow",
    "get_watch",
    "list_watches",
    "may_use",
    "shared_follow",
    "sse_events",
    "standing_query",
    "start_cursor",
]
