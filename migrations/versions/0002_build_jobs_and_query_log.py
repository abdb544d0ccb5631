"""Background build jobs and the query log.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 06:10:12

Generated with ``alembic revision --autogenerate`` and edited as 0001 (plain ``sa.DateTime``, direct
``op.create_index``).  ``build_jobs.dataset`` is a name, not a foreign key: a job is recorded before its
dataset exists and is kept after the dataset is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "build_jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("dataset", sa.String(length=64), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("started", sa.DateTime(), nullable=True),
        sa.Column("finished", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_build_jobs_dataset", "build_jobs", ["dataset"], unique=False)
    op.create_index("ix_build_jobs_state", "build_jobs", ["state"], unique=False)

    op.create_table(
        "query_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("ms", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=True),
        sa.Column("candidate_intervals", sa.Integer(), nullable=True),
        sa.Column("events_scanned", sa.Integer(), nullable=True),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("error_code", sa.String(length=32), nullable=True),
        sa.Column("token", sa.String(length=64), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_query_log_created", "query_log", ["created"], unique=False)
    op.create_index("ix_query_log_dataset", "query_log", ["dataset"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_query_log_dataset", table_name="query_log")
    op.drop_index("ix_query_log_created", table_name="query_log")
    op.drop_table("query_log")
    op.drop_index("ix_build_jobs_state", table_name="build_jobs")
    op.drop_index("ix_build_jobs_dataset", table_name="build_jobs")
    op.drop_table("build_jobs")
