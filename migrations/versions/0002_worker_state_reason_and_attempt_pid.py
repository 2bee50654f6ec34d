"""Workers: why and when their state last changed. Jobs: the process id running the current attempt.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("state_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("state_changed_at", TS, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("worker_pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    _drop_column("jobs", "worker_pid")
    _drop_column("workers", "state_changed_at")
    _drop_column("workers", "state_reason")


def _drop_column(table: str, column: str) -> None:
    """In place on both databases: on SQLite (3.35+) a batch copy would drop the table, and with foreign
    keys on that cascades to the rows that refer to it."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)
