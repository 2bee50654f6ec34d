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
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("reuse_key", sa.String(64), nullable=True))
        batch.create_index("ix_results_reuse_key", ["reuse_key"])
    with op.batch_alter_table("sweeps") as batch:
        batch.add_column(sa.Column("fresh", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(
            sa.Column("reuse_unfinished", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.drop_column("reuse_unfinished")
        batch.drop_column("fresh")
    with op.batch_alter_table("results") as batch:
        batch.drop_index("ix_results_reuse_key")
        batch.drop_column("reuse_key")
