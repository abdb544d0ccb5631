"""Catalog database plumbing: where it is, engines, sessions, and the migration-head check.

The catalog lives at ``$SEQSKETCH_DATABASE_URL`` or, by default, in SQLite at ``$SEQSKETCH_HOME/catalog.db``.
Its schema belongs to the Alembic migrations in ``migrations/``.  Two rules keep a deployment honest:

* a database **behind** the migration head is refused (:class:`CatalogOutOfDate`), by the app and by every CLI
  command, with the command that fixes it — nothing migrates an existing database silently;
* an **empty** SQLite database (the embedded default, no tables at all) is brought to head automatically, so
  that a first ``seqsketch serve`` or ``seqsketch token create`` just works.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from exact.errors import SeqsketchError
from exact.store import seqsketch_home as store_home


def _migrations_dir() -> Path:
    """The Alembic script directory: the top-level ``migrations`` package, in a checkout and in an installed
    wheel alike.  It is located, not imported — its ``env.py`` is run by Alembic and uses this module."""
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the seqsketch migrations package is not installed")  # a packaging bug
    return Path(next(iter(spec.submodule_search_locations))).resolve()


MIGRATIONS_DIR = _migrations_dir()


class CatalogOutOfDate(SeqsketchError):
    """The catalog database is not at the migration head the code expects (behind, ahead or uninitialised)."""

    code = "catalog_out_of_date"
    http_status = 503


def seqsketch_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The data root: ``home`` if given, else the store's (``$SEQSKETCH_HOME``, else ``./.seqsketch``;
    docs/contract.md §4)."""
    return Path(home) if home is not None else store_home()


def database_url(home: str | os.PathLike[str] | None = None) -> str:
    """``$SEQSKETCH_DATABASE_URL`` if set, else SQLite at ``<home>/catalog.db``."""
    url = os.environ.get("SEQSKETCH_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{(seqsketch_home(home).resolve() / 'catalog.db').as_posix()}"


def redact(url: str) -> str:
    """The URL with any password hidden, for error messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # Foreign keys are off by default in SQLite; WAL lets the CLI read while the server writes, and with WAL
    # synchronous=NORMAL stays consistent after a crash while sparing an fsync per logged query.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get their directory created, a busy timeout and pragmas."""
    if is_sqlite(url):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: rows read in a session stay usable (e.g. serialised) after it commits.
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commits when the block ends normally, rolls back when it raises."""
    with factory.begin() as session:
        yield session


# --- migrations ---------------------------------------------------------------------------------------------


def alembic_config(engine: Engine) -> Config:
    """An Alembic config bound to ``engine`` (passed through ``attributes``; URLs may hold ``%``)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


@functools.cache
def head_revision() -> str:
    """The newest migration (read once per process: the scripts ship with the code)."""
    heads = ScriptDirectory(str(MIGRATIONS_DIR)).get_heads()
    if len(heads) != 1:  # a merge is missing: a packaging bug, not a user mistake
        raise RuntimeError(f"migrations have {len(heads)} heads ({', '.join(heads)}); expected one")
    return heads[0]


@functools.cache
def known_revisions() -> frozenset[str]:
    return frozenset({rev.revision for rev in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()})


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it has never been migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def is_empty(engine: Engine) -> bool:
    """True when the database has no tables at all (a fresh file, or a fresh PostgreSQL schema)."""
    return not inspect(engine).get_table_names()


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    command.upgrade(alembic_config(engine), revision)
    return current_revision(engine)


def downgrade(engine: Engine, revision: str) -> str | None:
    command.downgrade(alembic_config(engine), revision)
    return current_revision(engine)


def check_at_head(engine: Engine) -> str:
    """Raise :class:`CatalogOutOfDate` unless the database is exactly at the migration head."""
    head = head_revision()
    current = current_revision(engine)
    where = engine.url.render_as_string(hide_password=True)
    if current == head:
        return head
    if current is None:
        raise CatalogOutOfDate(
            f"catalog database {where} has no seqsketch schema; run `seqsketch db upgrade`"
        )
    if current not in known_revisions():
        raise CatalogOutOfDate(
            f"catalog database {where} is at revision {current}, which this version of seqsketch does not "
            f"know (newer code migrated it?); expected {head}"
        )
    raise CatalogOutOfDate(
        f"catalog database {where} is at revision {current}, behind the head {head}; "
        "back it up and run `seqsketch db upgrade`"
    )


def open_catalog_engine(url: str, *, init_empty_sqlite: bool = True) -> Engine:
    """An engine on a catalog at head.

    An empty SQLite database (the embedded default) is migrated to head first when ``init_empty_sqlite``;
    anything else not at head is refused, never migrated silently.
    """
    engine = make_engine(url)
    if init_empty_sqlite and is_sqlite(url) and is_empty(engine):
        upgrade(engine)
    try:
        check_at_head(engine)
    except CatalogOutOfDate:
        engine.dispose()
        raise
    return engine
