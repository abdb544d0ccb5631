"""The lineage of the event store a watch was made on: a dataset built anew has another, and its old watches'
cursors mean other events there, so their streams end instead of resuming.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 20:00:00

Written as ``alembic revision --autogenerate`` would make it.  Null for a watch made before it was kept (or on
a store written before stores kept one): such a watch is not checked.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("watches") as batch:
        batch.add_column(sa.Column("lineage", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("watches") as batch:
        batch.drop_column("lineage")
