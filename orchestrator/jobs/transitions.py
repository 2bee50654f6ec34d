"""The job state machine: the only code that assigns ``Job.status``.

    queued → running → ok | slow | failed | cancelled
    queued → cancelled
    running → queued        (its worker stopped heartbeating; the reconciler sends it again. Or its
                             attempt fell back to fake weights on a worker without the memory: it is
                             sent to a worker of the memory class its real weights need)

Every transition runs on a row locked with SELECT ... FOR UPDATE (SQLite has no row locks, but its
writers are serialised on the whole file), records why it happened and writes an event in the same
transaction; a CPU job's change is written onto its cell's state too (``jobs.cell_state.refresh_cell``).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from orchestrator.column_types import REASON, clip
from orchestrator.events.repository import emit
from orchestrator.jobs.cell_state import refresh_cell
from orchestrator.models import Cell, Job, JobKind, JobStatus, utcnow

ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED}),
    JobStatus.RUNNING: frozenset(
        {JobStatus.OK, JobStatus.SLOW, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.QUEUED}
    ),
}
TERMINAL = frozenset({JobStatus.OK, JobStatus.SLOW, JobStatus.FAILED, JobStatus.CANCELLED})


class TransitionError(RuntimeError):
    """A transition the state machine does not allow (a bug in the caller, not a user mistake)."""


def lock_job(session: Session, job_id: int) -> Job | None:
    """The job, its row locked, read with its cell and sweep (which its transition's event and most
    callers read; one statement rather than three). Only the job's row is locked."""
    return session.scalars(
        select(Job)
        .where(Job.id == job_id)
        .options(joinedload(Job.cell, innerjoin=True).joinedload(Cell.sweep, innerjoin=True))
        .with_for_update(of=Job)
        .execution_options(populate_existing=True)
    ).one_or_none()


def can(job: Job, to: JobStatus) -> bool:
    return to in ALLOWED.get(job.status, frozenset())


def transition(session: Session, job: Job, to: JobStatus, reason: str) -> None:
    """Move a job locked by ``lock_job`` to ``to``, stamping its times, and log the change as an event."""
    reason = clip(reason, REASON.limit)  # the event carries it too
    if not can(job, to):
        raise TransitionError(f"job {job.id}: {job.status} → {to} is not allowed ({reason})")
    now = utcnow()
    previous = job.status
    job.status = to
    job.status_reason = reason
    if to is JobStatus.RUNNING:
        job.started_at = now
        job.heartbeat_at = now
        job.finished_at = None
    elif to is JobStatus.QUEUED:
        job.worker = None
        job.worker_pid = None
        job.heartbeat_at = None
    else:
        job.finished_at = now
    session.flush()
    if job.kind is JobKind.LOWER:  # device jobs have their own columns
        refresh_cell(session, job.cell_id)
    emit(
        session,
        "job",
        sweep_id=job.cell.sweep_id,
        cell_id=job.cell_id,
        job_id=job.id,
        payload={
            "from": previous.value,
            "status": to.value,
            "reason": reason,
            "attempt": job.attempt,
            "stage": job.stage,
            "stack": job.cell.stack,
        },
    )
