"""Alembic environment for the seqsketch catalog.

The engine comes from the caller (``api.db.alembic_config`` puts it in ``config.attributes``) or, when the
``alembic`` command is used directly, from ``$SEQSKETCH_DATABASE_URL`` / the default SQLite catalog.
"""

from __future__ import annotations

from alembic import context

from api.catalog import Base
from api.db import database_url, make_engine

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    """Emit SQL for a URL without connecting (``alembic upgrade head --sql``)."""
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = config.attributes.get("engine")
    owned = engine is None
    if owned:
        engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            # render_as_batch: SQLite can only ALTER tables by copying them; batch mode does that for us.
            context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
    finally:
        if owned:
            engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
