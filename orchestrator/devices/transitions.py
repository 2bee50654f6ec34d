"""The runner state machine: the only code that assigns ``Runner.state``.

    quarantined → healthy       (its health-check bundle ran and matched its references)
    healthy → quarantined       (an infrastructure error: health check again before more work)
    quarantined | healthy → offline   (missed heartbeats: the reconciler)
    offline → quarantined       (heard from again: health check first)
    any but revoked → revoked   (an admin revoked its credential)

Like job and worker transitions, each runs on a row locked with SELECT ... FOR UPDATE, stores why and
when, and writes an event in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.column_types import REASON, clip
from orchestrator.events.repository import emit
from orchestrator.models import Runner, RunnerState, utcnow

ALLOWED: dict[RunnerState, frozenset[RunnerState]] = {
    RunnerState.QUARANTINED: frozenset({RunnerState.HEALTHY, RunnerState.OFFLINE, RunnerState.REVOKED}),
    RunnerState.HEALTHY: frozenset({RunnerState.QUARANTINED, RunnerState.OFFLINE, RunnerState.REVOKED}),
    RunnerState.OFFLINE: frozenset({RunnerState.QUARANTINED, RunnerState.REVOKED}),
    RunnerState.REVOKED: frozenset(),
}


class RunnerTransitionError(RuntimeError):
    """A transition the state machine does not allow (a bug in the caller)."""


def lock_runner(session: Session, runner_id: int) -> Runner | None:
    return session.scalars(
        select(Runner)
        .where(Runner.id == runner_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def transition(session: Session, runner: Runner, to: RunnerState, reason: str) -> None:
    """Move a runner locked by ``lock_runner`` to ``to`` and log the change as an event."""
    reason = clip(reason, REASON.limit)  # the event carries it too
    previous = RunnerState(runner.state)
    if to not in ALLOWED[previous]:
        raise RunnerTransitionError(f"runner {runner.id}: {previous} → {to} is not allowed ({reason})")
    runner.state = to.value
    runner.state_reason = reason
    runner.state_changed_at = utcnow()
    session.flush()
    emit(
        session,
        "runner",
        sweep_id=None,
        payload={"runner": runner.id, "name": runner.name, "from": previous.value, "state": to.value,
                 "reason": reason},
    )  # fmt: skip
