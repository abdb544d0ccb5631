"""The service catalog: what the server knows about datasets, index versions, build jobs, tokens and queries.

The event store and the index files under ``$SEQSKETCH_HOME/datasets/<name>/`` remain the truth about events
(their manifest is the atomic snapshot pointer); the catalog records what the service did with them — when a
dataset was created, which index version is live, which build jobs ran, who may call the API, and which
queries were answered — in a relational database (SQLite by default, PostgreSQL in production).

The tables are in :mod:`api.catalog_tables` (re-exported here); the schema is owned by the Alembic migrations
in ``migrations/``; never ``create_all`` outside tests of the migrations themselves.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.catalog_tables import (
    ACTIVE_JOB_STATES,
    NAME_LENGTH,
    Base,
    BuildJob,
    Dataset,
    DatasetState,
    IndexVersion,
    JobState,
    QueryLogEntry,
    Scope,
    Token,
    UTCDateTime,
    Watch,
    utcnow,
)
from api.db import database_url, open_catalog_engine, session_factory, session_scope
from exact.errors import Conflict, NotFound

#: the tables (api.catalog_tables) are re-exported: callers import them from here
__all__ = ["ACTIVE_JOB_STATES", "NAME_LENGTH", "Base", "BuildJob", "Catalog", "Dataset", "DatasetState", "IndexVersion",
           "JobState", "QueryLogEntry", "Scope", "Token", "UTCDateTime", "Watch", "open_catalog", "utcnow"]

# --- the catalog as the service uses it ---------------------------------------------------------------------


class Catalog:
    """Typed operations on the catalog database; every method is one short transaction.

    Build one per process with :func:`open_catalog`; it is safe to share between threads (each call opens its
    own session from a thread-safe factory).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = session_factory(engine)

    def session(self) -> AbstractContextManager[Session]:
        """A transaction as a context manager (commit on success, rollback on error)."""
        return session_scope(self._sessions)

    def dispose(self) -> None:
        self.engine.dispose()

    # datasets ---------------------------------------------------------------------------------------------

    def get_dataset(self, name: str) -> dict[str, Any] | None:
        with self.session() as s:
            row = s.scalar(select(Dataset).where(Dataset.name == name))
            return None if row is None else row.to_dict()

    def list_datasets(self, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        with self.session() as s:
            stmt = select(Dataset).order_by(Dataset.name)
            if not include_deleted:
                stmt = stmt.where(Dataset.state != DatasetState.DELETED.value)
            return [row.to_dict() for row in s.scalars(stmt)]

    def upsert_dataset(self, name: str, *, state: DatasetState, events: int | None = None,
                       live_version: int | None = None, retention: str | None | object = ...,
                       location: str | None | object = ...) -> dict[str, Any]:
        """Create or update the dataset's row; ``None`` leaves a field as it is (``retention``: ``...`` does,
        None records keeping everything; ``location``: ``...`` does, None records the server's disk)."""
        with self.session() as s:
            row = _upsert_dataset(s, name, state=state, events=events, live_version=live_version)
            if retention is not ...:
                row.retention = retention  # type: ignore[assignment]
            if location is not ...:
                row.location = location  # type: ignore[assignment]
            return row.to_dict()

    def record_index_version(self, name: str, *, number: int, events: int, files: list[Any],
                             digest: str | None, config: dict[str, Any]) -> dict[str, Any]:
        """Record a published index version and make it the live one (the dataset row must exist).

        Two callers may record the same version at once (an append publishing it while a listing catches
        the catalog up with the disk, or two processes): the loser of the insert finds the winner's row on
        its next try and updates it, so recording is idempotent rather than an error.
        """
        for attempt in range(3):
            try:
                return self._record_index_version(name, number=number, events=events, files=files,
                                                  digest=digest, config=config)
            except IntegrityError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _record_index_version(self, name: str, *, number: int, events: int, files: list[Any],
                              digest: str | None, config: dict[str, Any]) -> dict[str, Any]:
        with self.session() as s:
            row = s.scalar(select(Dataset).where(Dataset.name == name))
            if row is None:
                raise NotFound(f"dataset {name!r} is not in the catalog", where=name)
            version = s.scalar(
                select(IndexVersion).where(IndexVersion.dataset_id == row.id, IndexVersion.number == number)
            )
            if version is None:
                version = IndexVersion(dataset=row, number=number)
                s.add(version)
            version.events, version.files, version.digest, version.config = events, files, digest, config
            row.live_version = number
            row.events = events
            row.state = DatasetState.READY.value
            s.flush()
            return version.to_dict()

    def index_versions(self, name: str) -> list[dict[str, Any]]:
        with self.session() as s:
            row = s.scalar(select(Dataset).where(Dataset.name == name))
            return [] if row is None else [v.to_dict() for v in row.versions]

    def mark_deleted(self, name: str) -> None:
        with self.session() as s:
            row = s.scalar(select(Dataset).where(Dataset.name == name))
            if row is not None:
                row.state = DatasetState.DELETED.value
                row.live_version = None
                row.events = 0
                row.versions.clear()

    # build jobs -------------------------------------------------------------------------------------------

    def create_job(self, dataset: str, inputs: list[str], options: dict[str, Any], *,
                   message: str | None = None, building: bool = False) -> dict[str, Any]:
        """Queue a build of ``dataset`` (with ``building``, in the same transaction, mark the dataset
        ``building``: its first build); :class:`~exact.errors.Conflict` while one is queued or running (the
        database's partial unique index decides, so two processes asking at once cannot both queue one)."""
        try:
            with self.session() as s:
                job = BuildJob(id=uuid.uuid4().hex, dataset=dataset, inputs=inputs, options=options,
                               state=JobState.QUEUED.value, progress=0.0, message=message)
                s.add(job)
                s.flush()
                if building:
                    _upsert_dataset(s, dataset, state=DatasetState.BUILDING)
                return job.to_dict()
        except IntegrityError:
            active = self.active_job(dataset)
            which = f" (job {active['id']})" if active else ""
            raise Conflict(f"dataset {dataset!r} has a build in progress{which}", where=dataset) from None

    def claim_job(self, runner: str) -> dict[str, Any] | None:
        """Take the oldest queued job for ``runner``: one ``UPDATE … WHERE state = 'queued'``, so of runners
        claiming at once exactly one gets each job (on SQLite and PostgreSQL alike).  ``None`` when none is
        queued."""
        while True:
            with self.session() as s:
                job_id = s.scalar(select(BuildJob.id).where(BuildJob.state == JobState.QUEUED.value)
                                  .order_by(BuildJob.created, BuildJob.id).limit(1))
                if job_id is None:
                    return None
                claimed = s.execute(
                    update(BuildJob)
                    .where(BuildJob.id == job_id, BuildJob.state == JobState.QUEUED.value)
                    .values(state=JobState.RUNNING.value, runner=runner, started=utcnow(),
                            message="starting")
                    .execution_options(synchronize_session=False))
                # (an UPDATE's result is a CursorResult; SQLAlchemy types execute() as returning a Result)
                if claimed.rowcount == 1:  # type: ignore[attr-defined]
                    job = s.get(BuildJob, job_id)
                    assert job is not None
                    s.refresh(job)
                    return job.to_dict()
            # another runner took it between the look and the update: look again

    def running_jobs(self) -> list[dict[str, Any]]:
        """Every running job (with ``runner``), oldest first."""
        with self.session() as s:
            return [job.to_dict() for job in s.scalars(
                select(BuildJob).where(BuildJob.state == JobState.RUNNING.value).order_by(BuildJob.created))]

    def fail_jobs(self, job_ids: list[str], reason: str) -> list[str]:
        """Mark the given jobs, if still running, failed with code ``interrupted`` (their runner is gone), and
        the datasets whose first build they were; returns the jobs marked."""
        marked = []
        with self.session() as s:
            for job_id in job_ids:
                job = s.get(BuildJob, job_id)
                if job is None or job.state != JobState.RUNNING.value:
                    continue
                job.state = JobState.FAILED.value
                job.error = {"code": "interrupted", "message": reason}
                job.message = "failed"
                job.finished = utcnow()
                marked.append(job.id)
                row = s.scalar(select(Dataset).where(Dataset.name == job.dataset))
                if row is not None and row.state == DatasetState.BUILDING.value:
                    row.state = DatasetState.FAILED.value
        return marked

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        with self.session() as s:
            job = s.get(BuildJob, job_id)
            return None if job is None else job.to_dict()

    def update_job(self, job_id: str, **fields: Any) -> dict[str, Any]:
        """Set the given columns (``state`` may be a :class:`JobState`) and return the job."""
        with self.session() as s:
            job = s.get(BuildJob, job_id)
            if job is None:
                raise NotFound(f"build job {job_id!r} does not exist", where=job_id)
            for key, value in fields.items():
                setattr(job, key, value.value if isinstance(value, enum.Enum) else value)
            s.flush()
            return job.to_dict()

    def active_job(self, dataset: str) -> dict[str, Any] | None:
        """The queued or running build of ``dataset``, if any.  Asked before every append: whether there is
        one is a single indexed read on a plain connection (a session costs four times as much)."""
        with self.engine.connect() as conn:
            found = conn.execute(select(BuildJob.id).where(BuildJob.dataset == dataset,
                                                           BuildJob.state.in_(ACTIVE_JOB_STATES)).limit(1)).scalar()
        if found is None:
            return None
        with self.session() as s:
            job = s.scalar(
                select(BuildJob)
                .where(BuildJob.dataset == dataset,
                       BuildJob.state.in_(ACTIVE_JOB_STATES))
                .order_by(BuildJob.created)
                .limit(1)
            )
            return None if job is None else job.to_dict()

    # watches ----------------------------------------------------------------------------------------------

    def create_watch(self, dataset: str, query: str, mode: str, cursor: str,
                     token: str | None = None, webhook: str | None = None,
                     secret: str | None = None, lineage: str | None = None) -> dict[str, Any]:
        with self.session() as s:
            watch = Watch(dataset=dataset, query=query, mode=mode, cursor=cursor, token=token, webhook=webhook,
                          secret=secret, lineage=lineage)
            s.add(watch)
            s.flush()
            return watch.to_dict()

    def webhook_watches(self) -> list[dict[str, Any]]:
        """Every watch with a webhook whose owner may still use it (made on an open server, or by a token not
        revoked), with its secret (for the deliverer only)."""
        with self.session() as s:
            revoked = select(Token.name).where(Token.revoked.is_not(None))
            stmt = (select(Watch).where(Watch.webhook.is_not(None))
                    .where(Watch.token.is_(None) | Watch.token.not_in(revoked))
                    .order_by(Watch.created, Watch.id))
            return [{**w.to_dict(), "secret": w.secret} for w in s.scalars(stmt)]

    def revoked_tokens(self, names: Iterable[str]) -> set[str]:
        """Which of ``names`` are no longer tokens a request may use (revoked, or never made)."""
        wanted = set(names)
        if not wanted:
            return set()
        with self.session() as s:
            active = set(s.scalars(select(Token.name).where(Token.name.in_(wanted)).where(Token.revoked.is_(None))))
        return wanted - active

    def existing_watches(self, ids: Iterable[str]) -> set[str]:
        """Which of the watch ``ids`` exist."""
        wanted = set(ids)
        if not wanted:
            return set()
        with self.session() as s:
            return set(s.scalars(select(Watch.id).where(Watch.id.in_(wanted))))

    def delete_watches_of(self, dataset: str) -> int:
        """Forget every watch of ``dataset`` (deleted); returns how many there were."""
        with self.session() as s:
            watches = list(s.scalars(select(Watch).where(Watch.dataset == dataset)))
            for watch in watches:
                s.delete(watch)
            return len(watches)

    def set_delivered(self, watch_id: str, cursor: str) -> bool:
        """Record that watch ``watch_id``'s matches up to ``cursor`` were delivered; False if it is gone."""
        with self.session() as s:
            watch = s.get(Watch, watch_id)
            if watch is None:
                return False
            watch.delivered = cursor
            return True

    def get_watch(self, dataset: str, watch_id: str) -> dict[str, Any] | None:
        with self.session() as s:
            watch = s.get(Watch, watch_id)
            return None if watch is None or watch.dataset != dataset else watch.to_dict()

    def list_watches(self, dataset: str) -> list[dict[str, Any]]:
        with self.session() as s:
            stmt = select(Watch).where(Watch.dataset == dataset).order_by(Watch.created, Watch.id)
            return [w.to_dict() for w in s.scalars(stmt)]

    def delete_watch(self, dataset: str, watch_id: str) -> bool:
        with self.session() as s:
            watch = s.get(Watch, watch_id)
            if watch is None or watch.dataset != dataset:
                return False
            s.delete(watch)
            return True

    # query log --------------------------------------------------------------------------------------------

    def log_query(self, *, dataset: str, mode: str, query: str, ms: float, count: int | None = None,
                  candidate_intervals: int | None = None, events_scanned: int | None = None,
                  truncated: bool = False, error_code: str | None = None, token: str | None = None) -> None:
        with self.session() as s:
            s.add(QueryLogEntry(dataset=dataset, mode=mode, query=query, ms=ms, count=count,
                                candidate_intervals=candidate_intervals, events_scanned=events_scanned,
                                truncated=truncated, error_code=error_code, token=token))

    def recent_queries(self, dataset: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        with self.session() as s:
            stmt = select(QueryLogEntry).order_by(QueryLogEntry.id.desc()).limit(limit)
            if dataset is not None:
                stmt = stmt.where(QueryLogEntry.dataset == dataset)
            return [
                {"dataset": q.dataset, "mode": q.mode, "query": q.query, "ms": q.ms, "count": q.count,
                 "candidate_intervals": q.candidate_intervals, "events_scanned": q.events_scanned,
                 "truncated": q.truncated, "error_code": q.error_code, "token": q.token,
                 "created": q.created.isoformat()}
                for q in s.scalars(stmt)
            ]


def _upsert_dataset(s: Session, name: str, *, state: DatasetState, events: int | None = None,
                    live_version: int | None = None) -> Dataset:
    row = s.scalar(select(Dataset).where(Dataset.name == name))
    if row is None:
        row = Dataset(name=name, state=state.value, events=events or 0, live_version=live_version)
        s.add(row)
    else:
        if row.state == DatasetState.DELETED.value and state is not DatasetState.DELETED:
            # A dataset built again under a deleted name starts a new life (and a new history).
            row.created = utcnow()
            row.versions.clear()
        row.state = state.value
        if events is not None:
            row.events = events
        if live_version is not None:
            row.live_version = live_version
    s.flush()
    return row


def open_catalog(url: str | None = None, *, home: str | None = None,
                 init_empty_sqlite: bool = True) -> Catalog:
    """The catalog at ``url`` (default: :func:`api.db.database_url`), refused unless at the migration head."""
    return Catalog(open_catalog_engine(url or database_url(home), init_empty_sqlite=init_empty_sqlite))
