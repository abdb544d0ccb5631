"""The catalog's tables: SQLAlchemy 2.0 typed declarative models (``Mapped[...]`` / ``mapped_column``) of
datasets, index versions, build jobs, tokens, the query log and watches, with their states (:mod:`api.catalog`
works on them).  The schema is owned by the Alembic migrations in ``migrations/``; never ``create_all``
outside tests of the migrations themselves.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

#: Longest dataset name (docs/contract.md §1: ``[a-z0-9][a-z0-9_-]{0,63}``).
NAME_LENGTH = 64


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite has no time zones, PostgreSQL's ``timestamptz`` has; storing naive UTC everywhere and attaching
    UTC on the way out gives the same aware values from both.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the catalog; use UTC-aware datetimes")
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=dt.UTC)


class DatasetState(enum.StrEnum):
    """Life cycle of a dataset as the service sees it."""

    BUILDING = "building"  # a build job is writing it for the first time
    READY = "ready"  # events and index published
    FAILED = "failed"  # its first build failed; nothing is on disk
    DELETED = "deleted"  # removed; the row keeps its history (jobs, queries) readable


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


class Scope(enum.StrEnum):
    """Token scopes: ``read`` lists, describes and queries; ``write`` also appends, builds and deletes."""

    READ = "read"
    WRITE = "write"

    def grants(self, needed: Scope) -> bool:
        return self is Scope.WRITE or needed is Scope.READ


class Base(DeclarativeBase):
    type_annotation_map = {dt.datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class Dataset(Base):
    """One named dataset; ``live_version`` is the number of the index version queries use."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True, index=True)
    state: Mapped[str] = mapped_column(String(16), default=DatasetState.BUILDING.value)
    events: Mapped[int] = mapped_column(Integer, default=0)
    live_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    #: how much history it keeps (``90 days``, ``1000000 events``; None: everything)
    retention: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: where it lives on object storage (``s3://…``; None: on the disk of the server that built it)
    location: Mapped[str | None] = mapped_column(String(1024), nullable=True)

    versions: Mapped[list[IndexVersion]] = relationship(
        back_populates="dataset", cascade="all, delete-orphan", order_by="IndexVersion.number"
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "events": self.events,
            "index_version": self.live_version,
            "retention": self.retention,
            "location": self.location,
            "created": self.created.isoformat(),
            "updated": self.updated.isoformat(),
        }


class IndexVersion(Base):
    """One published index version of a dataset: its files, ``index_digest`` and sizing configuration."""

    __tablename__ = "index_versions"
    __table_args__ = (UniqueConstraint("dataset_id", "number", name="uq_index_versions_dataset_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    events: Mapped[int] = mapped_column(Integer, default=0)
    files: Mapped[list[Any]] = mapped_column(default=list)
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created: Mapped[dt.datetime] = mapped_column(default=utcnow)

    dataset: Mapped[Dataset] = relationship(back_populates="versions")

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "events": self.events,
            "files": list(self.files or []),
            "digest": self.digest,
            "config": dict(self.config or {}),
            "created": self.created.isoformat(),
        }


#: The job states in which a build is still to finish: one per dataset at a time.
ACTIVE_JOB_STATES = ("queued", "running")


class BuildJob(Base):
    """An offline build requested through the API and run by a job runner; progress is a fraction 0..1.

    ``dataset`` is a name, not a foreign key: the job exists before its dataset does, and outlives it.
    ``runner`` names the job runner that claimed it (:mod:`api.jobs`), so that a runner starting later can
    tell a job whose runner died from one still being worked on.  The partial unique index lets one build
    per dataset be queued or running at a time, whichever process asks.
    """

    __tablename__ = "build_jobs"
    __table_args__ = (
        Index("uq_build_jobs_active_dataset", "dataset", unique=True,
              sqlite_where=text("state IN ('queued', 'running')"),
              postgresql_where=text("state IN ('queued', 'running')")),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    inputs: Mapped[list[Any]] = mapped_column(default=list)
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED.value, index=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)
    created: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    finished: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    runner: Mapped[str | None] = mapped_column(String(128), nullable=True)

    def to_dict(self) -> dict[str, Any]:
        def iso(t: dt.datetime | None) -> str | None:
            return None if t is None else t.isoformat()

        return {
            "id": self.id,
            "dataset": self.dataset,
            "state": self.state,
            "progress": self.progress,
            "message": self.message,
            "error": self.error,
            "inputs": list(self.inputs or []),
            "options": dict(self.options or {}),
            "result": self.result,
            "created": iso(self.created),
            "started": iso(self.started),
            "finished": iso(self.finished),
            "runner": self.runner,
        }


class Token(Base):
    """An API token.  Only the SHA-256 of the secret is stored; the plaintext is shown once, at creation."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    created: Mapped[dt.datetime] = mapped_column(default=utcnow)
    revoked: Mapped[dt.datetime | None] = mapped_column(nullable=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scope": self.scope,
            "created": self.created.isoformat(),
            "revoked": None if self.revoked is None else self.revoked.isoformat(),
        }


class QueryLogEntry(Base):
    """One answered (or refused) query: what was asked, how, how long it took and what came back."""

    __tablename__ = "query_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    mode: Mapped[str] = mapped_column(String(16))
    query: Mapped[str] = mapped_column(Text)
    ms: Mapped[float] = mapped_column(Float)
    count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    candidate_intervals: Mapped[int | None] = mapped_column(Integer, nullable=True)
    events_scanned: Mapped[int | None] = mapped_column(Integer, nullable=True)
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    error_code: Mapped[str | None] = mapped_column(String(32), nullable=True)
    token: Mapped[str | None] = mapped_column(String(NAME_LENGTH), nullable=True)
    created: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)


class Watch(Base):
    """A standing query on a dataset: its query, mode, and the cursor its stream starts from; with a webhook,
    the address its matches are posted to, the secret they are signed with, and the cursor after the last
    match delivered there."""

    __tablename__ = "watches"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=lambda: uuid.uuid4().hex)
    dataset: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    query: Mapped[str] = mapped_column(Text)
    mode: Mapped[str] = mapped_column(String(16))
    cursor: Mapped[str] = mapped_column(String(128))
    token: Mapped[str | None] = mapped_column(String(NAME_LENGTH), nullable=True)
    created: Mapped[dt.datetime] = mapped_column(default=utcnow)
    webhook: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    delivered: Mapped[str | None] = mapped_column(String(128), nullable=True)
    #: the lineage of the event store the watch was made on (:attr:`exact.store.Snapshot.lineage`)
    lineage: Mapped[str | None] = mapped_column(String(32), nullable=True)

    def to_dict(self) -> dict[str, Any]:
        """The watch as the service holds it (never its secret; the API leaves out its lineage too)."""
        out: dict[str, Any] = {"id": self.id, "dataset": self.dataset, "query": self.query, "mode": self.mode,
                               "cursor": self.cursor, "created": self.created.isoformat(), "token": self.token}
        if self.webhook is not None:
            out.update(webhook=self.webhook, delivered=self.delivered)
        if self.lineage is not None:
            out["lineage"] = self.lineage
        return out
