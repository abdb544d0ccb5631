"""Initial catalog: datasets, their index versions, and API tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 06:06:38

Generated with ``alembic revision --autogenerate`` and edited: column types are spelled with plain
``sa.DateTime`` rather than the models' ``UTCDateTime`` decorator (a migration must not change meaning when
the models module does; the decorator stores naive UTC, which is what ``DateTime`` holds), and indexes are
created with ``op.create_index`` directly (no table copy needed on SQLite for that).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("live_version", sa.Integer(), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_datasets_name", "datasets", ["name"], unique=True)

    op.create_table(
        "index_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dataset_id", "number", name="uq_index_versions_dataset_number"),
    )
    op.create_index("ix_index_versions_dataset_id", "index_versions", ["dataset_id"], unique=False)

    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("revoked", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("secret_sha256"),
    )


def downgrade() -> None:
    op.drop_table("tokens")
    op.drop_index("ix_index_versions_dataset_id", table_name="index_versions")
    op.drop_table("index_versions")
    op.drop_index("ix_datasets_name", table_name="datasets")
    op.drop_table("datasets")
