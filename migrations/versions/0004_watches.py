"""Standing queries (watches): a query kept on a dataset, streamed from a cursor.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27 08:00:00

Written as ``alembic revision --autogenerate`` would make it, with plain ``sa.DateTime`` as 0001.  A watch
keeps its query (text, or its JSON form as text), its mode and the cursor its stream starts from; the
delivered matches are not stored: a client resumes from the id of the last event it saw.
``watches.dataset`` is a name, not a foreign key, as ``build_jobs.dataset``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watches",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("dataset", sa.String(length=64), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("cursor", sa.String(length=48), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_watches_dataset", "watches", ["dataset"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_watches_dataset", table_name="watches")
    op.drop_table("watches")
