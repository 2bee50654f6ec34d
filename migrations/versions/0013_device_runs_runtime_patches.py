"""``device_runs.runtime_patches``: a device run of a runtime built with candidate upstream fixes (the pull
requests its host declared, comma-separated; empty for a release's runtime) is kept beside the run of
the stock runtime on the same cell and class, so that what a pending fix changes can be read side by
side. The key becomes (cell, class, runtime patches). Runs stored before this revision read as of the
stock runtime, as their key said. The downgrade refuses while a cell and class hold more than one run:
the old key cannot hold them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

OLD_KEY = "uq_device_runs_cell_id_device_class"
NEW_KEY = "uq_device_runs_cell_id_device_class_runtime_patches"


def upgrade() -> None:
    op.add_column(
        "device_runs", sa.Column("runtime_patches", sa.String(200), nullable=False, server_default="")
    )
    # On SQLite a batch copy of ``device_runs``, which no table refers to.
    with op.batch_alter_table("device_runs") as batch:
        batch.drop_constraint(OLD_KEY, type_="unique")
        batch.create_unique_constraint(NEW_KEY, ["cell_id", "device_class", "runtime_patches"])


def downgrade() -> None:
    doubled = op.get_bind().execute(
        sa.text(
            "SELECT cell_id FROM device_runs GROUP BY cell_id, device_class HAVING count(*) > 1 ORDER BY cell_id"
        )
    )
    cells = [str(row[0]) for row in doubled]
    if cells:
        raise RuntimeError(
            f"cannot downgrade below 0013: cells {', '.join(cells)} hold a candidate-fix device run beside "
            "another run of the same class, which the old key cannot hold; delete one of them first"
        )
    with op.batch_alter_table("device_runs") as batch:
        batch.drop_constraint(NEW_KEY, type_="unique")
        batch.create_unique_constraint(OLD_KEY, ["cell_id", "device_class"])
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE device_runs DROP COLUMN runtime_patches")
    else:
        op.drop_column("device_runs", "runtime_patches")
