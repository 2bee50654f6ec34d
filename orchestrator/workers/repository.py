"""Every query on workers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from orchestrator.models import Worker, WorkerState, utcnow


def insert_if_absent(session: Session, name: str, facts: dict[str, Any], reason: str) -> bool:
    """Create the worker online (its initial state) with ``facts`` (its queues, stack, versions and
    memory); False when a worker of that name exists."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    now = utcnow()
    inserted = session.scalar(
        insert(Worker)
        .values(
            name=name,
            **facts,
            state=WorkerState.ONLINE.value,
            state_reason=reason,
            state_changed_at=now,
            started_at=now,
            last_heartbeat=now,
        )
        .on_conflict_do_nothing(index_elements=[Worker.name])
        .returning(Worker.id)
    )
    return inserted is not None


def silent_online(session: Session, before: datetime) -> Sequence[Worker]:
    return session.scalars(
        select(Worker)
        .where(Worker.state == WorkerState.ONLINE.value, Worker.last_heartbeat < before)
        .order_by(Worker.id)
        .with_for_update(skip_locked=True)
    ).all()


def list_workers(session: Session, limit: int, offset: int) -> Sequence[Worker]:
    return session.scalars(select(Worker).order_by(Worker.name).limit(limit).offset(offset)).all()


def count_workers(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Worker)) or 0


def online_routes(session: Session) -> Sequence[tuple[str, list[str]]]:
    """(stack, queues) of every online worker."""
    rows = session.execute(
        select(Worker.stack, Worker.queues).where(Worker.state == WorkerState.ONLINE.value)
    ).all()
    return [(stack, list(queues or [])) for stack, queues in rows]
