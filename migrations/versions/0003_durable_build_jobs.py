"""Durable build jobs: the runner that claimed a job, and one active build per dataset.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 11:20:00

Generated with ``alembic revision --autogenerate`` and edited: builds now run in a job runner process that
claims a queued job with one conditional UPDATE and marks it with its id (``runner``), so that a runner
starting later can tell a job whose runner died from one still being worked on.  The partial unique index
holds the rule "one build per dataset queued or running" in the database, where every request worker and
runner sees it (SQLite and PostgreSQL both have partial indexes).  Before the upgrade, jobs left running by
a stopped server are failed by any runner's first recovery (they name no runner).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE = sa.text("state IN ('queued', 'running')")


def upgrade() -> None:
    with op.batch_alter_table("build_jobs") as batch:
        batch.add_column(sa.Column("runner", sa.String(length=128), nullable=True))
    # Two active jobs of one dataset (possible before, between processes) would stop the index: keep the
    # newest of each and mark the older ones failed.
    op.execute(sa.text(
        "UPDATE build_jobs SET state = 'failed', message = 'failed' "
        "WHERE state IN ('queued', 'running') AND EXISTS ("
        "SELECT 1 FROM build_jobs AS newer WHERE newer.dataset = build_jobs.dataset "
        "AND newer.state IN ('queued', 'running') AND newer.created > build_jobs.created)"))
    op.create_index("uq_build_jobs_active_dataset", "build_jobs", ["dataset"], unique=True,
                    sqlite_where=ACTIVE, postgresql_where=ACTIVE)


def downgrade() -> None:
    op.drop_index("uq_build_jobs_active_dataset", table_name="build_jobs", sqlite_where=ACTIVE,
                  postgresql_where=ACTIVE)
    with op.batch_alter_table("build_jobs") as batch:
        batch.drop_column("runner")
