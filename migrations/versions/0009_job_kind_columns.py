"""A job's kind is a column: ``jobs.kind`` (``lower``, ``device_run`` or ``baseline``) and, for a device
job, ``jobs.device_class``, instead of being read out of the job's stage ("run:<class>",
"baseline:<class>", any other stage a CPU lower job's).

The stage stays what it was (the job's name in its cell, which the API and the pages show, and its key
with the cell). This revision fills both columns in for what was stored before it from the stages, with
the rule as it stood when it was written; a CHECK says that a device job, and only a device job, names
its class. The downgrade drops them: the stage still says everything they did.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copies of the model's type and rule: a migration must not change when the models do.
JOB_KIND = sa.Enum(
    "lower", "device_run", "baseline", name="job_kind", native_enum=False, create_constraint=True, length=16
)
# orchestrator.models / jobs.service when this revision was written: a device job's stage is its kind's
# prefix and its device class; every other stage is a lower job's.
STAGE_PREFIXES = {"device_run": "run:", "baseline": "baseline:"}
KIND_VALUES = "job_kind"  # the kind's CHECK, ck_jobs_job_kind by the naming convention
KIND_CHECK = "kind_device_class"  # ck_jobs_kind_device_class
KIND_RULE = "(kind = 'lower' AND device_class IS NULL) OR (kind <> 'lower' AND device_class IS NOT NULL)"

jobs = sa.table(
    "jobs", sa.column("stage", sa.String()), sa.column("kind", sa.String()), sa.column("device_class", sa.String())
)


def upgrade() -> None:
    # Added with a default that every row stored before this revision takes (lower), then the device jobs
    # told apart by their stages; the default goes once they are, as the job service names every job's
    # kind. On SQLite the last step is a batch copy of ``jobs``, which migrations/env.py runs with foreign
    # keys off, so that dropping the old table cascades to no attempt or result.
    sqlite = op.get_bind().dialect.name == "sqlite"
    # SQLite adds no CHECK to a table in place: there the kind's values are checked from the batch below.
    kind_type = sa.String(16) if sqlite else JOB_KIND
    op.add_column("jobs", sa.Column("kind", kind_type, nullable=False, server_default="lower"))
    op.add_column("jobs", sa.Column("device_class", sa.String(64), nullable=True))
    for kind, prefix in STAGE_PREFIXES.items():
        op.execute(
            jobs.update()
            .where(jobs.c.stage.startswith(prefix, autoescape=True))
            .values(kind=kind, device_class=sa.func.substr(jobs.c.stage, len(prefix) + 1))
        )
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("kind", server_default=None, existing_type=kind_type, existing_nullable=False)
        if sqlite:
            batch.create_check_constraint(KIND_VALUES, sa.column("kind").in_(JOB_KIND.enums))
        batch.create_check_constraint(KIND_CHECK, sa.text(KIND_RULE))


def downgrade() -> None:
    # SQLite drops no column that a table's CHECK names: a batch copy, with foreign keys off as above.
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f(f"ck_jobs_{KIND_CHECK}"), type_="check")
        if op.get_bind().dialect.name == "sqlite":  # Postgres drops it with the column
            batch.drop_constraint(op.f(f"ck_jobs_{KIND_VALUES}"), type_="check")
        batch.drop_column("device_class")
        batch.drop_column("kind")
