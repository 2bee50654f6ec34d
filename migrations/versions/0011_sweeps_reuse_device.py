"""``sweeps.reuse_device``: a sweep may let its reused cells take the device runs and baselines stored
with their reuse key, instead of running their bundles again. Off for every sweep stored before it (a
device's number belongs to its run unless a sweep asks).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ALTER TABLE, as 0006 does: a batch copy of ``sweeps`` on SQLite would cascade to its cells.
    op.add_column("sweeps", sa.Column("reuse_device", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE sweeps DROP COLUMN reuse_device")
    else:
        op.drop_column("sweeps", "reuse_device")
