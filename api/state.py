"""What the HTTP doors share within one process: the configuration, the catalog, the input roots, the job
runner on a thread (when the app has one) and per-dataset locks — kept on the Flask app by the factory and
found by the routes through :func:`service_state` (so that the routes never import the factory)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from flask import Flask

from api.catalog import Catalog
from api.db import seqsketch_home
from api.service.bound import Service
from api.service.locks import DatasetLocks
from api.streaming import StreamSlots
from exact.errors import SeqsketchError

EXTENSION = "seqsketch"


class LocalRunner(Protocol):
    """A job runner on a thread of the app (``JOB_RUNNER = "thread"``; :class:`api.jobs.JobRunner`)."""

    def wake(self) -> None: ...

    def wait(self, job_id: str, timeout: float | None = None) -> Mapping[str, Any]: ...

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None: ...


@dataclass
class ServiceState:
    """What the routes share: the data root, the catalog, input roots, limits, the in-app job runner (when
    there is one), the locks."""

    home: Path
    catalog: Catalog
    input_roots: list[Path]
    config: Mapping[str, Any]
    jobs: LocalRunner | None = None
    locks: DatasetLocks = field(default_factory=DatasetLocks)
    #: the open watch streams, counted against the server's and each token's limit
    stream_slots: StreamSlots = field(default_factory=lambda: StreamSlots(2000, 500))

    @functools.cached_property
    def service(self) -> Service:
        """The service bound to this state: what the routes call."""
        return Service(self.home, self.catalog, self.locks, tuple(self.input_roots))


def service_state(app: Flask) -> ServiceState:
    return app.extensions[EXTENSION]


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SeqsketchError(f"environment variable {name} must be an integer, got {value!r}",
                             where=name) from None


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise SeqsketchError(f"environment variable {name} must be a positive number of seconds, got {value!r}",
                             where=name)
    return number


def default_config() -> dict[str, Any]:
    """The configuration from the environment (the table in :mod:`api.app`)."""
    home = seqsketch_home()
    return {
        "SEQSKETCH_HOME": str(home),
        "DATABASE_URL": None,  # resolved against SEQSKETCH_HOME in create_app
        "INPUT_ROOTS": None,
        "MAX_APPEND_BYTES": _env_int("SEQSKETCH_MAX_APPEND_BYTES", 64 * 1024 * 1024),
        "MAX_CONTENT_LENGTH": _env_int("SEQSKETCH_MAX_REQUEST_BYTES", 1024 * 1024),
        "QUERY_TIMEOUT_MS": _env_int("SEQSKETCH_QUERY_TIMEOUT_MS", 30_000),
        "QUERY_MAX_MATCHES": _env_int("SEQSKETCH_QUERY_MAX_MATCHES", 10_000),
        # answers as columns make no object per match: they may carry many more
        "QUERY_MAX_ROWS": _env_int("SEQSKETCH_QUERY_MAX_ROWS", 1_000_000),
        "QUERY_MAX_EVENTS": _env_int("SEQSKETCH_QUERY_MAX_EVENTS", 0),
        "BUILD_WORKERS": _env_int("SEQSKETCH_BUILD_WORKERS", 1),
        # seqsketch serve's front: a request's head within this long, its body with no pause longer than this
        "REQUEST_HEAD_S": _env_float("SEQSKETCH_REQUEST_HEAD_S", 10.0),
        "REQUEST_BODY_IDLE_S": _env_float("SEQSKETCH_REQUEST_BODY_IDLE_S", 10.0),
        # watch streams open at once, per server and per token (beyond: 503 / 429 with Retry-After)
        "MAX_STREAMS": _env_int("SEQSKETCH_MAX_STREAMS", 2000),
        "MAX_STREAMS_PER_TOKEN": _env_int("SEQSKETCH_MAX_STREAMS_PER_TOKEN", 500),
        # the stream counts shared by a server's worker processes (seqsketch serve makes them); None: own ones
        "STREAM_SLOTS": None,
        # Where queued builds run: "external" — a job runner process (seqsketch jobs run, started by
        # seqsketch serve) — or "thread": a runner inside this app (tests, one-process setups).
        "JOB_RUNNER": os.environ.get("SEQSKETCH_JOB_RUNNER") or "external",
        # In-process by default: the local builder gives the same bits as Spark without a JVM in the server.
        "BUILD_ENGINE": os.environ.get("SEQSKETCH_BUILD_ENGINE") or "local",
        "ALLOWED_ORIGINS": os.environ.get("SEQSKETCH_ALLOWED_ORIGINS") or "",
        "INIT_EMPTY_SQLITE": True,
        "JSON_SORT_KEYS": False,
    }
