"""Stacks and memory classes: a sweep names the stacks it measures, a cell is of one stack, a CPU worker
says its stack, versions and usable memory, and a lower job may carry the memory it needs.

``cells``' key becomes (sweep, policy, backend, stack). Rows stored before this revision are of the
default stack (``coverfarm.stacks.DEFAULT_STACK``); workers' versions and memory read as unknown and jobs
as needing no particular memory. The downgrade refuses while a sweep holds cells of more than one stack:
the old key cannot hold them, and dropping rows is not a downgrade's business.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
DEFAULT_STACK = "et-1.5.1"  # coverfarm.stacks.DEFAULT_STACK when this revision was written
OLD_KEY = "uq_cells_sweep_id_policy_backend"
NEW_KEY = "uq_cells_sweep_id_policy_backend_stack"


def _drop_column(table: str, column: str) -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)


def upgrade() -> None:
    op.add_column(
        "sweeps", sa.Column("stacks", JSON, nullable=False, server_default=sa.text(f"'[\"{DEFAULT_STACK}\"]'"))
    )
    op.add_column("cells", sa.Column("stack", sa.String(64), nullable=False, server_default=DEFAULT_STACK))
    # The key changes: on SQLite a batch copy of ``cells``, which migrations/env.py runs with foreign keys
    # off so that dropping the old table cascades to no job or result.
    with op.batch_alter_table("cells") as batch:
        batch.drop_constraint(OLD_KEY, type_="unique")
        batch.create_unique_constraint(NEW_KEY, ["sweep_id", "policy", "backend", "stack"])
    op.add_column("workers", sa.Column("stack", sa.String(64), nullable=False, server_default=DEFAULT_STACK))
    op.add_column("workers", sa.Column("versions", JSON, nullable=True))
    op.add_column("workers", sa.Column("memory_gb", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("memory_gb", sa.Float(), nullable=True))


def downgrade() -> None:
    mixed = op.get_bind().execute(
        sa.text("SELECT sweep_id FROM cells GROUP BY sweep_id HAVING count(DISTINCT stack) > 1 ORDER BY sweep_id")
    )
    sweeps = [str(row[0]) for row in mixed]
    if sweeps:
        raise RuntimeError(
            f"cannot downgrade below 0007: sweeps {', '.join(sweeps)} hold cells of more than one stack, "
            "which the old cell key cannot hold; delete those sweeps first"
        )
    _drop_column("jobs", "memory_gb")
    _drop_column("workers", "memory_gb")
    _drop_column("workers", "versions")
    _drop_column("workers", "stack")
    with op.batch_alter_table("cells") as batch:
        batch.drop_constraint(NEW_KEY, type_="unique")
        batch.create_unique_constraint(OLD_KEY, ["sweep_id", "policy", "backend"])
    _drop_column("cells", "stack")
    _drop_column("sweeps", "stacks")
