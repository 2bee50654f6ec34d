"""Writing and reading the event log. An event is written in the same transaction as the change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from orchestrator.models import Event

CHANNEL = "coverfarm_events"


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
    if session.get_bind().dialect.name == "postgresql":
        # Postgres delivers NOTIFY when (and only if) this transaction commits, so a listener in
        # another process wakes exactly when the event becomes readable.
        session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
    return event


def last_id(session: Session) -> int:
    return session.scalar(select(func.coalesce(func.max(Event.id), 0))) or 0


def after(session: Session, event_id: int, sweep_id: int | None = None, limit: int = 500) -> Sequence[Event]:
    query = select(Event).where(Event.id > event_id).order_by(Event.id).limit(limit)
    if sweep_id is not None:
        query = query.where(Event.sweep_id == sweep_id)
    return session.scalars(query).all()
