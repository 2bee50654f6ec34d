"""On Postgres, the database itself notifies the ``coverfarm_events`` channel when events are written:
a statement-level trigger on ``events`` calls ``pg_notify`` once per INSERT statement, in the writing
transaction, so listeners wake at its commit as before. The writers no longer send their own
``SELECT pg_notify`` after each event: one round trip fewer per event, two per lower job.

SQLite (the embedded default) has no cross-process signal; nothing changes there. The downgrade drops
the trigger and its function: code of the revision before sends its own notifications.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

CHANNEL = "coverfarm_events"  # orchestrator.events.repository.CHANNEL when this revision was written
FUNCTION = "coverfarm_notify_events"
TRIGGER = "events_notify"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    op.execute(f"CREATE TRIGGER {TRIGGER} AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON events")
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
