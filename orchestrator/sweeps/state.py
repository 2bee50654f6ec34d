"""Derived state, defined once: a cell's state from its CPU jobs, and a sweep's from its cells.

A cell's state is a function of two facts about its CPU jobs (device jobs have their own columns): the
latest one's status (none yet: queued) and whether one of them ended slow. ``cell_state`` is that rule.
``refresh_cell`` keeps its answer on the cell row (``cells.state``, ``cells.pending``) whenever one of
the cell's CPU jobs is created or changes status, so that a sweep of ten thousand cells is counted and
paged off its cells, without reading a job.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.models import DEVICE_STAGE_PREFIXES, PENDING_STATUSES, Cell, Job, JobStatus

SweepState = Literal["running", "done", "cancelled"]


def cell_state(latest: JobStatus | None, any_slow: bool) -> tuple[JobStatus, bool]:
    """(state, pending): the latest CPU job's status, except that a pending longer re-run of a slow
    result keeps "slow" (its numbers stand while it runs); no CPU job yet is queued."""
    status = latest if latest is not None else JobStatus.QUEUED
    pending = status in PENDING_STATUSES
    return (JobStatus.SLOW if pending and any_slow else status), pending


def refresh_cell(session: Session, cell_id: int) -> None:
    """Write ``cell_state`` of the cell's CPU jobs, as they stand in this transaction, onto the cell.

    Called by the job service after it creates a CPU job or changes one's status (and flushes), with
    that job locked. The cell row is locked too, so whoever changes another of its jobs at the same time
    writes after this transaction ends, from what it committed.
    """
    # The lock an UPDATE takes (FOR NO KEY UPDATE): rows that refer to the cell may still be written.
    locked = select(Cell).where(Cell.id == cell_id).with_for_update(key_share=True)
    cell = session.scalars(locked.execution_options(populate_existing=True)).one()
    statuses = [
        status
        for stage, status in session.execute(
            select(Job.stage, Job.status).where(Job.cell_id == cell_id).order_by(Job.id)
        )
        if not stage.startswith(DEVICE_STAGE_PREFIXES)
    ]
    state, pending = cell_state(statuses[-1] if statuses else None, JobStatus.SLOW in statuses)
    if (cell.state, cell.pending) != (state, pending):
        cell.state, cell.pending = state, pending
        session.flush()


def sweep_state(cancelled: bool, anything_pending: bool) -> SweepState:
    """A sweep runs while one of its cells or device jobs is queued or running, unless it was cancelled."""
    if cancelled:
        return "cancelled"
    return "running" if anything_pending else "done"
