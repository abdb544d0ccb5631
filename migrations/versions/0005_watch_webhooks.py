"""Webhook delivery of a watch's matches: the address, the secret its deliveries are signed with, and the
cursor after the last match delivered.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27 17:00:00

Written as ``alembic revision --autogenerate`` would make it.  All three are null for a watch read through
its event stream only; ``delivered`` is null until the first delivery (then the delivery goes on from it, not
from ``cursor``, across restarts).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("watches") as batch:
        batch.add_column(sa.Column("webhook", sa.String(length=2048), nullable=True))
        batch.add_column(sa.Column("secret", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("delivered", sa.String(length=48), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("watches") as batch:
        batch.drop_column("delivered")
        batch.drop_column("secret")
        batch.drop_column("webhook")
