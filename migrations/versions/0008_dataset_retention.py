"""A dataset's retention: how much history it keeps (``90 days``, ``1000000 events``; null: everything), as the
catalog records it beside the dataset's own store.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 12:00:00

Written as ``alembic revision --autogenerate`` would make it.  Null for every dataset made before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("retention", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("retention")
