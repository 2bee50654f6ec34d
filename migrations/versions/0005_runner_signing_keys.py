"""Runner signing keys: the Ed25519 public key that verifies a runner's signed offline results.

Offline results were signed with an HMAC keyed by the stored credential hash, so whoever could read the
database could sign; a public key verifies without being able to sign. Existing runners get none and
sign nothing until they enrol again.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ALTER TABLE, not a batch copy: on SQLite a batch copy drops and recreates ``runners``, and
    # with foreign keys on that reaches the rows that refer to it.
    op.add_column("runners", sa.Column("signing_key", sa.String(64), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE runners DROP COLUMN signing_key")
    else:
        op.drop_column("runners", "signing_key")
