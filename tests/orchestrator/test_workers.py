"""Workers: explicit online/offline transitions with their reason, and GET /api/workers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from coverfarm.settings import Settings
from orchestrator.models import Event, Worker, WorkerState, utcnow
from orchestrator.workers import service as workers
from orchestrator.workers.transitions import WorkerTransitionError, lock_worker, transition


def worker(session: Session, name: str) -> Worker:
    return session.scalars(
        select(Worker).where(Worker.name == name).execution_options(populate_existing=True)
    ).one()


def worker_events(session: Session, name: str) -> list[tuple[str, str]]:
    events = session.scalars(select(Event).where(Event.kind == "worker").order_by(Event.id)).all()
    return [(e.payload["state"], e.payload["reason"]) for e in events if e.payload["worker"] == name]


def test_silent_worker_goes_offline_with_its_reason_and_comes_back(
    session: Session, settings: Settings
) -> None:
    workers.register(session, "cpu@quiet", ["lower", "lower.long"])
    workers.register(session, "cpu@chatty", ["lower"])
    quiet = worker(session, "cpu@quiet")
    assert (quiet.state, quiet.state_reason) == ("online", "registered")
    quiet.last_heartbeat = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s + 5)
    session.flush()

    assert workers.mark_silent_offline(session, settings) == ["cpu@quiet"]
    quiet = worker(session, "cpu@quiet")
    assert quiet.state == WorkerState.OFFLINE
    assert quiet.state_reason is not None and quiet.state_reason.startswith("missed heartbeats: silent for 9")
    assert quiet.state_changed_at is not None
    assert worker(session, "cpu@chatty").state == WorkerState.ONLINE
    assert workers.mark_silent_offline(session, settings) == []  # offline already: nothing to do

    workers.seen(session, "cpu@quiet")
    assert (worker(session, "cpu@quiet").state, worker(session, "cpu@quiet").state_reason) == (
        "online",
        "heartbeats resumed",
    )
    workers.stopped(session, "cpu@quiet")
    workers.stopped(session, "cpu@quiet")  # a second shutdown signal changes nothing
    workers.register(session, "cpu@quiet", ["lower"])
    assert [state for state, _ in worker_events(session, "cpu@quiet")] == [
        "offline",
        "online",
        "offline",
        "online",
    ]
    assert worker_events(session, "cpu@quiet")[-2:] == [("offline", "shut down"), ("online", "started again")]


def test_only_the_state_machine_moves_a_worker(session: Session) -> None:
    workers.register(session, "cpu@strict", ["lower"])
    locked = lock_worker(session, "cpu@strict")
    assert locked is not None
    with pytest.raises(WorkerTransitionError, match="online → online"):
        transition(session, locked, WorkerState.ONLINE, "again")


def test_get_workers_lists_state_and_last_heartbeat(
    client: TestClient, session: Session, settings: Settings
) -> None:
    workers.register(session, "b@host", ["lower"])
    workers.register(session, "a@host", ["lower", "lower.long"])
    workers.stopped(session, "b@host")
    session.flush()
    response = client.get("/api/workers")
    assert response.status_code == 200
    assert response.headers["x-total-count"] == "2"
    listed = response.json()
    assert [(w["name"], w["state"], w["state_reason"]) for w in listed] == [
        ("a@host", "online", "registered"),
        ("b@host", "offline", "shut down"),
    ]
    assert listed[0]["queues"] == ["lower", "lower.long"]
    assert listed[0]["last_heartbeat"] is not None
    assert [w["name"] for w in client.get("/api/workers", params={"limit": 1, "offset": 1}).json()] == [
        "b@host"
    ]
