"""Watch cursors name moments: a match is delivered when it becomes certain (at its last event for most
patterns), no longer when its first event's window closes, so a cursor names the moment it was certain at
(``@SEQ:DELIVERED``, or ``@SEQ~TIME:DELIVERED`` between two events) instead of a first event.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06 09:00:00

A watch made before keeps its place: its cursor ``FIRST_SEQ:DELIVERED`` (every match whose first event is
before FIRST_SEQ, and the first DELIVERED of those at it, were delivered) becomes ``@FIRST_SEQ:0/FIRST_SEQ:
DELIVERED`` — the moment of FIRST_SEQ, which no undelivered match can precede, with the old cursor kept as a
floor that passes over what it covered (docs/semantics.md §5.5).  The same for ``delivered``.  Both columns
widen to hold the longer form.  Downgrade turns a cursor back into the first-event form only where it still
has its floor; any other is set to the floor its moment implies (``SEQ:0``), which may deliver again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = re.compile(r"([0-9]{1,19}):([0-9]{1,19})", re.ASCII)
_FLOOR = re.compile(r"@[0-9]+(?:~-?[0-9]+)?:[0-9]+/([0-9]+):([0-9]+)", re.ASCII)
_MOMENT = re.compile(r"@([0-9]+)(?:~-?[0-9]+)?:[0-9]+", re.ASCII)

_watches = sa.table("watches", sa.column("id", sa.String), sa.column("cursor", sa.String),
                    sa.column("delivered", sa.String))


def _up(text: str | None) -> str | None:
    found = _OLD.fullmatch(text or "")
    return text if not found else f"@{found.group(1)}:0/{found.group(1)}:{found.group(2)}"


def _down(text: str | None) -> str | None:
    if text is None:
        return None
    floor = _FLOOR.fullmatch(text)
    if floor:
        return f"{floor.group(1)}:{floor.group(2)}"
    moment = _MOMENT.fullmatch(text)
    return f"{moment.group(1)}:0" if moment else text


def _rewrite(change: object) -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.select(_watches.c.id, _watches.c.cursor, _watches.c.delivered)).all()
    for watch_id, cursor, delivered in rows:
        bind.execute(_watches.update().where(_watches.c.id == watch_id).values(
            cursor=change(cursor), delivered=change(delivered)))  # type: ignore[operator]


def upgrade() -> None:
    with op.batch_alter_table("watches") as batch:
        batch.alter_column("cursor", existing_type=sa.String(length=48), type_=sa.String(length=128),
                           existing_nullable=False)
        batch.alter_column("delivered", existing_type=sa.String(length=48), type_=sa.String(length=128),
                           existing_nullable=True)
    _rewrite(_up)


def downgrade() -> None:
    _rewrite(_down)
    with op.batch_alter_table("watches") as batch:
        batch.alter_column("delivered", existing_type=sa.String(length=128), type_=sa.String(length=48),
                           existing_nullable=True)
        batch.alter_column("cursor", existing_type=sa.String(length=128), type_=sa.String(length=48),
                           existing_nullable=False)
