"""``sweeps.etrecord``: a sweep may have its bundles carry their programs' ETRecords (the cells' ``etrecord``
option), which reading a device profile needs. Off for every sweep stored before it (none asked).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ALTER TABLE, as 0011 does: a batch copy of ``sweeps`` on SQLite would cascade to its cells.
    op.add_column("sweeps", sa.Column("etrecord", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE sweeps DROP COLUMN etrecord")
    else:
        op.drop_column("sweeps", "etrecord")
