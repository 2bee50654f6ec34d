"""What happens to workers: they register, beat, stop, and go offline when they fall silent.

A worker beats from its main process every ``heartbeat_interval_s`` whether or not it runs a job
(``orchestrator.jobs.heartbeats.worker_heartbeat``); the jobs it runs beat too. The reconciler marks an
online worker silent for ``heartbeat_timeout_s`` offline; the next beat it sends brings it back online.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from orchestrator.models import Worker, WorkerState, utcnow
from orchestrator.workers import repository
from orchestrator.workers.schemas import WorkerPublic
from orchestrator.workers.transitions import lock_worker, transition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Live:
    """What the online workers take: the queues (``coverfarm.routes``) and the stacks they serve."""

    queues: frozenset[str] = frozenset()
    stacks: frozenset[str] = frozenset()


def register(
    session: Session,
    name: str,
    queues: list[str],
    stack: str = DEFAULT_STACK,
    versions: dict[str, str] | None = None,
    memory_gb: float | None = None,
) -> None:
    """A worker process came up (or back): online, with the queues it consumes, its stack, the package
    versions of its environment and the memory each of its jobs can count on."""
    facts = {"queues": queues, "stack": stack, "versions": versions, "memory_gb": memory_gb}
    if repository.insert_if_absent(session, name, facts, "registered"):
        return
    worker = lock_worker(session, name)
    if worker is None:  # deleted between the two statements; nothing to bring back
        return
    now = utcnow()
    worker.queues, worker.started_at, worker.last_heartbeat = queues, now, now
    worker.stack, worker.versions, worker.memory_gb = stack, versions, memory_gb
    if worker.state == WorkerState.OFFLINE:
        transition(session, worker, WorkerState.ONLINE, "started again")
    session.flush()


def seen(session: Session, name: str) -> None:
    """A beat from ``name`` (its main process, or a job it runs)."""
    worker = lock_worker(session, name)
    if worker is None:
        return
    worker.last_heartbeat = utcnow()
    if worker.state == WorkerState.OFFLINE:
        transition(session, worker, WorkerState.ONLINE, "heartbeats resumed")
    session.flush()


def stopped(session: Session, name: str) -> None:
    worker = lock_worker(session, name)
    if worker is not None and worker.state == WorkerState.ONLINE:
        transition(session, worker, WorkerState.OFFLINE, "shut down")


def mark_silent_offline(session: Session, settings: Settings) -> list[str]:
    """Offline every online worker whose last beat is older than ``heartbeat_timeout_s``."""
    now = utcnow()
    marked = []
    for worker in repository.silent_online(session, now - timedelta(seconds=settings.heartbeat_timeout_s)):
        silent_s = (now - worker.last_heartbeat).total_seconds()
        transition(
            session,
            worker,
            WorkerState.OFFLINE,
            f"missed heartbeats: silent for {silent_s:.0f} s (timeout {settings.heartbeat_timeout_s:g} s)",
        )
        marked.append(worker.name)
    return marked


def live(session: Session) -> Live:
    """The queues and stacks of the workers online now (one query), for the cells that wait."""
    routes = repository.online_routes(session)
    return Live(
        queues=frozenset(queue for _, queues in routes for queue in queues),
        stacks=frozenset(stack for stack, _ in routes),
    )


def view(worker: Worker) -> WorkerPublic:
    return WorkerPublic.model_validate(worker)


def list_(session: Session, limit: int, offset: int) -> list[WorkerPublic]:
    return [view(worker) for worker in repository.list_workers(session, limit, offset)]


def count(session: Session) -> int:
    return repository.count_workers(session)
