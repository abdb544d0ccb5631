"""Where a dataset lives: its object-storage location (``s3://bucket/prefix/<name>/<lineage>``), null for one on
a server's own disk.  A server that shares the catalog and not the disk serves such a dataset as a replica of
the bucket (:mod:`exact.store.replica`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 06:00:00

Written as ``alembic revision --autogenerate`` would make it.  Null for every dataset made before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("location", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("location")
