"""Device baselines: eager PyTorch timed on a device class's host CPU, one row per (cell, device class).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copies of the model types: a migration must not change when the models do.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "device_baselines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("device_class", sa.String(64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("runner_id", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("document", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["cell_id"], ["cells.id"], name=op.f("fk_device_baselines_cell_id_cells"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_device_baselines_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["runner_id"],
            ["runners.id"],
            name=op.f("fk_device_baselines_runner_id_runners"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device_baselines")),
        sa.UniqueConstraint(
            "cell_id", "device_class", name=op.f("uq_device_baselines_cell_id_device_class")
        ),
    )
    op.create_index(op.f("ix_device_baselines_cell_id"), "device_baselines", ["cell_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_device_baselines_cell_id"), table_name="device_baselines")
    op.drop_table("device_baselines")
