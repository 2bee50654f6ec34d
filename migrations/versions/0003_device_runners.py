"""Device runners: runners, enrolment tokens, artifacts, device runs; sweeps' device classes.

Jobs' stage and queue grow to 64 characters for "run:<device class>" and "device.<device class>".

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copies of the model types: a migration must not change when the models do.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.add_column(sa.Column("device_classes", JSON, nullable=False, server_default="[]"))
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("stage", type_=sa.String(64), existing_type=sa.String(32), existing_nullable=False)
        batch.alter_column("queue", type_=sa.String(64), existing_type=sa.String(32), existing_nullable=False)
    op.create_table(
        "runners",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("device_classes", JSON, nullable=False),
        sa.Column("probe", JSON, nullable=False),
        sa.Column("credential_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("state_changed_at", TS, nullable=True),
        sa.Column("enrolled_at", TS, nullable=False),
        sa.Column("last_heartbeat", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runners")),
        sa.UniqueConstraint("credential_hash", name=op.f("uq_runners_credential_hash")),
    )
    op.create_table(
        "enrolment_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("used_at", TS, nullable=True),
        sa.Column("runner_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["runner_id"],
            ["runners.id"],
            name=op.f("fk_enrolment_tokens_runner_id_runners"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_enrolment_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_enrolment_tokens_token_hash")),
    )
    op.create_table(
        "artifacts",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifacts")),
    )
    op.create_table(
        "device_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("device_class", sa.String(64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("runner_id", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("bundle_sha256", sa.String(64), nullable=False),
        sa.Column("document", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["cell_id"], ["cells.id"], name=op.f("fk_device_runs_cell_id_cells"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_device_runs_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["runner_id"], ["runners.id"], name=op.f("fk_device_runs_runner_id_runners"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device_runs")),
        sa.UniqueConstraint("cell_id", "device_class", name=op.f("uq_device_runs_cell_id_device_class")),
    )
    op.create_index(op.f("ix_device_runs_cell_id"), "device_runs", ["cell_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_device_runs_cell_id"), table_name="device_runs")
    op.drop_table("device_runs")
    op.drop_table("artifacts")
    op.drop_table("enrolment_tokens")
    op.drop_table("runners")
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("queue", type_=sa.String(32), existing_type=sa.String(64), existing_nullable=False)
        batch.alter_column("stage", type_=sa.String(32), existing_type=sa.String(64), existing_nullable=False)
    _drop_column("sweeps", "device_classes")


def _drop_column(table: str, column: str) -> None:
    """In place on both databases: on SQLite (3.35+) a batch copy would drop the table, and with foreign
    keys on that cascades to the rows that refer to it."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)
