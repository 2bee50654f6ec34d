"""A big sweep read off its rows: each cell keeps its state, whether it is pending, and its latest
result, and each sweep its policies, backends and the options its cells record, so that a sweep's
summary and pages of cells read them off the cells and the sweep instead of deriving them from every
job, result and cell of the sweep.

``cells.state`` and ``cells.pending`` are what ``orchestrator.jobs.cell_state.cell_state`` says of the cell's
CPU jobs, ``cells.result_id`` is its newest result; the job service keeps them as jobs change. An index
of (sweep, backend, state, pending, result) replaces that of the sweep alone, so that a sweep's cells
are counted from the index. ``sweeps.policies`` and ``sweeps.backends`` list them in cell order;
``sweeps.weights`` and ``sweeps.force_fp16`` are what its cells' options say. This revision fills them
in for what was stored before it, with the rule as it stood when it was written.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
FK = "fk_cells_result_id_results"
INDEX = "ix_cells_sweep_states"
DEVICE_STAGE_PREFIXES = ("run:", "baseline:")  # orchestrator.models when this revision was written
PENDING = ("queued", "running")

cells = sa.table(
    "cells",
    sa.column("id", sa.Integer()),
    sa.column("sweep_id", sa.Integer()),
    sa.column("policy", sa.String()),
    sa.column("backend", sa.String()),
    sa.column("options", JSON),
    sa.column("state", sa.String()),
    sa.column("pending", sa.Boolean()),
    sa.column("result_id", sa.Integer()),
)
sweeps = sa.table(
    "sweeps",
    sa.column("id", sa.Integer()),
    sa.column("policies", JSON),
    sa.column("backends", JSON),
    sa.column("weights", sa.String()),
    sa.column("force_fp16", sa.Boolean()),
)
jobs = sa.table("jobs", sa.column("id"), sa.column("cell_id"), sa.column("stage"), sa.column("status"))
results = sa.table("results", sa.column("id"), sa.column("cell_id"))


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.add_column("cells", sa.Column("state", sa.String(16), nullable=False, server_default="queued"))
    op.add_column("cells", sa.Column("pending", sa.Boolean(), nullable=False, server_default=sa.true()))
    if sqlite:
        # SQLite adds a reference only by copying the table: a batch copy, which migrations/env.py runs
        # with foreign keys off, so that dropping the old table cascades to nothing.
        with op.batch_alter_table("cells") as batch:
            batch.add_column(sa.Column("result_id", sa.Integer(), nullable=True))
            batch.create_foreign_key(FK, "results", ["result_id"], ["id"], ondelete="SET NULL")
    else:
        op.add_column("cells", sa.Column("result_id", sa.Integer(), nullable=True))
        op.create_foreign_key(FK, "cells", "results", ["result_id"], ["id"], ondelete="SET NULL")
    # Counted from the index alone; it leads with sweep_id, so it replaces the index of sweep_id alone.
    op.drop_index("ix_cells_sweep_id", table_name="cells")
    op.create_index(INDEX, "cells", ["sweep_id", "backend", "state", "pending", "result_id"])
    op.add_column("sweeps", sa.Column("policies", JSON, nullable=False, server_default=sa.text("'[]'")))
    op.add_column("sweeps", sa.Column("backends", JSON, nullable=False, server_default=sa.text("'[]'")))
    op.add_column("sweeps", sa.Column("weights", sa.String(8), nullable=False, server_default="auto"))
    op.add_column("sweeps", sa.Column("force_fp16", sa.Boolean(), nullable=False, server_default=sa.false()))
    _fill_cells()
    _fill_sweeps()


def _cell_state(statuses: list[str]) -> tuple[str, bool]:
    """jobs.cell_state.cell_state over a cell's CPU job statuses in job order, as of this revision."""
    status = statuses[-1] if statuses else "queued"
    pending = status in PENDING
    return ("slow" if pending and "slow" in statuses else status), pending


def _fill_cells() -> None:
    conn = op.get_bind()
    statuses: dict[int, list[str]] = {}
    for cell_id, stage, status in conn.execute(
        sa.select(jobs.c.cell_id, jobs.c.stage, jobs.c.status).order_by(jobs.c.id)
    ):
        if not stage.startswith(DEVICE_STAGE_PREFIXES):
            statuses.setdefault(cell_id, []).append(status)
    latest = dict(
        conn.execute(
            sa.select(results.c.cell_id, sa.func.max(results.c.id)).group_by(results.c.cell_id)
        ).all()
    )
    rows: list[dict[str, Any]] = []
    for (cell_id,) in conn.execute(sa.select(cells.c.id)):
        state, pending = _cell_state(statuses.get(cell_id, []))
        rows.append(
            {"cell": cell_id, "to_state": state, "to_pending": pending, "to_result": latest.get(cell_id)}
        )
    if rows:
        conn.execute(
            cells.update()
            .where(cells.c.id == sa.bindparam("cell"))
            .values(
                state=sa.bindparam("to_state"),
                pending=sa.bindparam("to_pending"),
                result_id=sa.bindparam("to_result"),
            ),
            rows,
        )


def _fill_sweeps() -> None:
    conn = op.get_bind()
    found: dict[int, dict[str, Any]] = {}
    query = sa.select(cells.c.sweep_id, cells.c.policy, cells.c.backend, cells.c.options).order_by(cells.c.id)
    for sweep_id, policy, backend, options in conn.execute(query):
        sweep = found.setdefault(
            sweep_id, {"policies": {}, "backends": {}, "weights": None, "force_fp16": False}
        )
        sweep["policies"][policy] = None
        sweep["backends"][backend] = None
        if sweep["weights"] is None:  # every cell of a sweep records the same
            sweep["weights"] = (options or {}).get("weights", "auto")
        sweep["force_fp16"] = sweep["force_fp16"] or bool((options or {}).get("force_fp16"))
    rows = [
        {
            "sweep": sweep_id,
            "to_policies": list(sweep["policies"]),
            "to_backends": list(sweep["backends"]),
            "to_weights": sweep["weights"],
            "to_force_fp16": sweep["force_fp16"],
        }
        for sweep_id, sweep in found.items()
    ]
    if rows:
        conn.execute(
            sweeps.update()
            .where(sweeps.c.id == sa.bindparam("sweep"))
            .values(
                policies=sa.bindparam("to_policies", type_=JSON),
                backends=sa.bindparam("to_backends", type_=JSON),
                weights=sa.bindparam("to_weights"),
                force_fp16=sa.bindparam("to_force_fp16"),
            ),
            rows,
        )


def _drop_column(table: str, column: str) -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)


def downgrade() -> None:
    for column in ("force_fp16", "weights", "backends", "policies"):
        _drop_column("sweeps", column)
    op.drop_index(INDEX, table_name="cells")
    op.create_index("ix_cells_sweep_id", "cells", ["sweep_id"])
    if op.get_bind().dialect.name == "sqlite":
        # SQLite cannot drop a column that a reference names: a batch copy, which migrations/env.py runs
        # with foreign keys off, so that dropping the old table cascades to nothing.
        with op.batch_alter_table("cells") as batch:
            batch.drop_column("result_id")
            batch.drop_column("pending")
            batch.drop_column("state")
        return
    op.drop_constraint(FK, "cells", type_="foreignkey")
    for column in ("result_id", "pending", "state"):
        op.drop_column("cells", column)
