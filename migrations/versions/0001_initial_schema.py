"""Initial schema: sweeps, cells, jobs, job attempts, results, workers and the event log.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copies of the model types: a migration must not change when the models do.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)
JOB_STATUS = sa.Enum(
    "queued",
    "running",
    "ok",
    "slow",
    "failed",
    "cancelled",
    name="job_status",
    native_enum=False,
    create_constraint=True,
    length=16,
)


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("constant_prop", sa.Boolean(), nullable=False),
        sa.Column("lowering", sa.String(16), nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("cancelled_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    op.create_table(
        "cells",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("options", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep_id"], ["sweeps.id"], name=op.f("fk_cells_sweep_id_sweeps"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cells")),
        sa.UniqueConstraint("sweep_id", "policy", "backend", name=op.f("uq_cells_sweep_id_policy_backend")),
    )
    op.create_index(op.f("ix_cells_sweep_id"), "cells", ["sweep_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(32), nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("status", JOB_STATUS, nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("sent_at", TS, nullable=True),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["cell_id"], ["cells.id"], name=op.f("fk_jobs_cell_id_cells"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("cell_id", "stage", name=op.f("uq_jobs_cell_id_stage")),
    )
    op.create_index(op.f("ix_jobs_cell_id"), "jobs", ["cell_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_table(
        "job_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_attempts_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_attempts")),
        sa.UniqueConstraint("job_id", "attempt", name=op.f("uq_job_attempts_job_id_attempt")),
    )
    op.create_index(op.f("ix_job_attempts_job_id"), "job_attempts", ["job_id"])
    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("export_status", sa.String(16), nullable=False),
        sa.Column("ops_total", sa.Integer(), nullable=True),
        sa.Column("ops_on_backend", sa.Integer(), nullable=True),
        sa.Column("macs_total", sa.BigInteger(), nullable=True),
        sa.Column("macs_on_backend", sa.BigInteger(), nullable=True),
        sa.Column("programs", sa.Integer(), nullable=True),
        sa.Column("document", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["cell_id"], ["cells.id"], name=op.f("fk_results_cell_id_cells"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_results_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        # The key of the idempotent result upsert: one result per job, whatever the attempt.
        sa.UniqueConstraint("job_id", name=op.f("uq_results_job_id")),
    )
    op.create_index(op.f("ix_results_cell_id"), "results", ["cell_id"])
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("queues", JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("last_heartbeat", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
        sa.UniqueConstraint("name", name=op.f("uq_workers_name")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=True),
        sa.Column("cell_id", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("payload", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_sweep_id"), "events", ["sweep_id"])


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("workers")
    op.drop_table("results")
    op.drop_table("job_attempts")
    op.drop_table("jobs")
    op.drop_table("cells")
    op.drop_table("sweeps")
