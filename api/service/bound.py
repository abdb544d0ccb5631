"""The service bound to one server's state: its data root, catalog, dataset locks and input roots, given once.

The HTTP routes (:mod:`api.routes`) call its methods with what a request names — a dataset, a watch, a body —
and never pass the server's state again; each method is the module function of the same concern
(:mod:`api.service.served`, :mod:`api.service.watches`, :mod:`api.service.queries`, …) with that state
filled in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.service.builds import Job, job_status, request_build
from api.service.datasets import AppendResult, DatasetInfo, Density, event_density
from api.service.follower import standing_query
from api.service.inputs import allowed_inputs
from api.service.locks import DatasetLocks
from api.service.queries import NO_LIMITS, QueryAnswer, QueryLimits, QueryRequest, logged_query
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
from api.service.watches import Watch, create_watch, delete_watch, get_watch, list_watches
from exact.query.ast import Query
from sketch.answer.standing import Cursor

if TYPE_CHECKING:
    from api.auth import Principal
    from api.catalog import Catalog


@dataclass(frozen=True)
class Service:
    """The service as one server runs it (docs/contract.md §5): every dataset, watch, build and query call
    with the server's ``home``, ``catalog``, ``locks`` and ``input_roots`` filled in."""

    home: Path
    catalog: Catalog
    locks: DatasetLocks
    input_roots: Sequence[Path]

    # --- datasets

    def replicate(self, name: str) -> None:
        """Dataset ``name``'s folder made a replica of where the catalog says it lives (object storage)."""
        replicate(self.catalog, self.home, name)

    def datasets(self) -> list[DatasetView]:
        return served_datasets(self.catalog, self.home)

    def dataset(self, name: str) -> DatasetView:
        return served_dataset(self.catalog, self.home, name)

    def density(self, name: str) -> Density:
        return event_density(self.home, name)

    def delete(self, name: str) -> None:
        delete_served_dataset(self.catalog, self.home, self.locks, name)

    def append(self, name: str, records: Sequence[Mapping[str, Any]], *, watermark: Any = None) -> AppendResult:
        return append_to_served_dataset(self.catalog, self.home, self.locks, name, records, watermark=watermark)

    def retain(self, name: str, keep: str | None) -> DatasetInfo:
        return retain_served_dataset(self.catalog, self.home, self.locks, name, keep)

    # --- builds

    def request_build(self, name: str, inputs: Sequence[str], options: Mapping[str, Any]) -> Job:
        return request_build(self.catalog, self.home, name, inputs, options, self.input_roots)

    def job(self, job_id: str) -> Job:
        return job_status(self.catalog, job_id)

    def inputs(self) -> list[str]:
        return allowed_inputs(self.input_roots)

    # --- queries and watches

    def query(self, name: str, query: str | Mapping[str, Any], asked: QueryRequest,
              limits: QueryLimits = NO_LIMITS) -> QueryAnswer:
        return logged_query(self.catalog, self.home, name, query, asked, limits)

    def create_watch(self, name: str, query: str | Mapping[str, Any], *, mode: str, start: str | None,
                     token: str | None, webhook: str | None) -> Watch:
        return create_watch(self.catalog, self.home, name, query, mode=mode, start=start, token=token,
                            webhook=webhook)

    def watches(self, name: str, principal: Principal | None) -> list[Watch]:
        return list_watches(self.catalog, self.home, name, principal)

    def watch(self, name: str, watch_id: str, principal: Principal | None) -> Watch:
        return get_watch(self.catalog, self.home, name, watch_id, principal)

    def delete_watch(self, name: str, watch_id: str, principal: Principal | None) -> dict[str, Any]:
        return delete_watch(self.catalog, self.home, name, watch_id, principal)

    def standing_query(self, name: str, query: str | Mapping[str, Any] | Query) -> Query:
        """``query`` checked as a standing query on dataset ``name``."""
        return standing_query(self.home, name, query)

    def sse_events(self, name: str, watch: Mapping[str, Any], cursor: Cursor) -> Iterator[str]:
        return sse_events(self.home, name, watch, cursor)
