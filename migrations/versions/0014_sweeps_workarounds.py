"""``sweeps.workarounds``: a sweep may ask for lowering workarounds (``coverfarm.workarounds``), graph
rewrites its cells of the backends each is for record in their options as changing what is measured.
Empty for every sweep stored before it (none could ask).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Plain ALTER TABLE, as 0011 and 0012 do: a batch copy of ``sweeps`` on SQLite would cascade to its cells.
    op.add_column("sweeps", sa.Column("workarounds", JSON, nullable=False, server_default=sa.text("'[]'")))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE sweeps DROP COLUMN workarounds")
    else:
        op.drop_column("sweeps", "workarounds")
