"""Result reuse: each lower result keeps the key of everything that produced it, and a sweep says
whether its cells may reuse a stored result.

``results.reuse_key`` (indexed) is the sha256 the worker computes from the cell's trace key, backend,
options, the stack's versions and the engine's code digest; a later cell with the same key takes that
result instead of lowering again. Results stored before this revision have none and are never reused.
``sweeps.fresh`` forces every cell of a sweep to run; ``sweeps.reuse_unfinished`` lets slow and failed
results be reused too.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ALTER TABLE, not a batch copy: on SQLite a batch copy drops and recreates the table, and with
    # foreign keys on, dropping ``sweeps`` cascades to every cell and job (tests/orchestrator/test_migrations.py).
    op.add_column("results", sa.Column("reuse_key", sa.String(64), nullable=True))
    op.create_index("ix_results_reuse_key", "results", ["reuse_key"])
    op.add_column("sweeps", sa.Column("fresh", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column(
        "sweeps", sa.Column("reuse_unfinished", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def _drop_column(table: str, column: str) -> None:
    """In place on both databases: on SQLite (3.35+) a batch copy would drop the table, and with foreign
    keys on that cascades to the rows that refer to it."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)


def downgrade() -> None:
    _drop_column("sweeps", "reuse_unfinished")
    _drop_column("sweeps", "fresh")
    op.drop_index("ix_results_reuse_key", table_name="results")
    _drop_column("results", "reuse_key")
