"""The worker state machine: the only code that assigns ``Worker.state``.

    online → offline   (shut down cleanly, or missed heartbeats: the reconciler)
    offline → online   (started again, or heard from again)

Like job transitions, each runs on a row locked with SELECT ... FOR UPDATE, stores why it happened
and when, and writes an event in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.column_types import REASON, clip
from orchestrator.events.repository import emit
from orchestrator.models import Worker, WorkerState, utcnow

ALLOWED: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.ONLINE: frozenset({WorkerState.OFFLINE}),
    WorkerState.OFFLINE: frozenset({WorkerState.ONLINE}),
}


class WorkerTransitionError(RuntimeError):
    """A transition the state machine does not allow (a bug in the caller)."""


def lock_worker(session: Session, name: str) -> Worker | None:
    return session.scalars(
        select(Worker).where(Worker.name == name).with_for_update().execution_options(populate_existing=True)
    ).one_or_none()


def transition(session: Session, worker: Worker, to: WorkerState, reason: str) -> None:
    """Move a worker locked by ``lock_worker`` to ``to`` and log the change as an event."""
    reason = clip(reason, REASON.limit)  # the event carries it too
    previous = WorkerState(worker.state)
    if to not in ALLOWED[previous]:
        raise WorkerTransitionError(f"worker {worker.name}: {previous} → {to} is not allowed ({reason})")
    worker.state = to.value
    worker.state_reason = reason
    worker.state_changed_at = utcnow()
    session.flush()
    emit(
        session,
        "worker",
        sweep_id=None,
        payload={"worker": worker.name, "from": previous.value, "state": to.value, "reason": reason},
    )
