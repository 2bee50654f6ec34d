"""Writing and reading the event log. An event is written in the same transaction as the change.

On Postgres the database notifies ``CHANNEL`` itself (a trigger on ``events``, migration 0010): Postgres
delivers the notification when, and only if, the writing transaction commits, so a listener in another
process wakes exactly when the event becomes readable, whoever wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.models import Event

CHANNEL = "coverfarm_events"  # notified by the trigger of migration 0010


def emit(
    session: Session,
    kind: str,
    *,
    sweep_id: int | None,
    cell_id: int | None = None,
    job_id: int | None = None,
    payload: dict[str, Any] | None = None,
) -> Event:
    event = Event(kind=kind, sweep_id=sweep_id, cell_id=cell_id, job_id=job_id, payload=payload or {})
    session.add(event)
    return event


def last_id(session: Session) -> int:
    return session.scalar(select(func.coalesce(func.max(Event.id), 0))) or 0


def after(session: Session, event_id: int, sweep_id: int | None = None, limit: int = 500) -> Sequence[Event]:
    query = select(Event).where(Event.id > event_id).order_by(Event.id).limit(limit)
    if sweep_id is not None:
        query = query.where(Event.sweep_id == sweep_id)
    return session.scalars(query).all()
