"""A cell's state, defined once, from its CPU jobs (a sweep's, from its cells: ``sweeps.state``).

A cell's state is a function of two facts about its CPU jobs (device jobs have their own columns): the
latest one's status (none yet: queued) and whether one of them ended slow. ``cell_state`` is that rule.
``refresh_cell`` keeps its answer on the cell row (``cells.state``, ``cells.pending``, with the cell's
newest result) whenever one of the cell's CPU jobs is created or changes status, so that a sweep of ten
thousand cells is counted and paged off its cells, without reading a job. The job service and the job
machine's transitions call it; the sweeps domain reads the rule to count and page its cells.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from orchestrator.models import PENDING_STATUSES, Cell, Job, JobKind, JobStatus, Result


def cell_state(latest: JobStatus | None, any_slow: bool) -> tuple[JobStatus, bool]:
    """(state, pending): the latest CPU job's status, except that a pending longer re-run of a slow
    result keeps "slow" (its numbers stand while it runs); no CPU job yet is queued."""
    status = latest if latest is not None else JobStatus.QUEUED
    pending = status in PENDING_STATUSES
    return (JobStatus.SLOW if pending and any_slow else status), pending


def refresh_cell(session: Session, cell_id: int) -> None:
    """Write ``cell_state`` of the cell's CPU jobs, as they stand in this transaction, onto the cell,
    with its newest result (``cells.state``, ``cells.pending``, ``cells.result_id``).

    Called by the job service after it creates a CPU job or changes one's status (and flushes), with
    that job locked. No other transaction changes the cell's CPU jobs meanwhile: a cell has one CPU job
    that has not ended at most (a slow lower job's longer re-run is made in the transaction that ends
    it), and only a job that has not ended changes. Two statements: the jobs read, the cell written
    (``RETURNING`` its id, so that a copy of the cell this session holds takes the new columns: the
    grid, the report and the API read a cell's state off it).
    """
    statuses = list(
        session.scalars(
            select(Job.status).where(Job.cell_id == cell_id, Job.kind == JobKind.LOWER).order_by(Job.id)
        )
    )
    state, pending = cell_state(statuses[-1] if statuses else None, JobStatus.SLOW in statuses)
    newest = select(func.max(Result.id)).where(Result.cell_id == cell_id).scalar_subquery()
    session.execute(
        update(Cell)
        .where(Cell.id == cell_id)
        .values(state=state, pending=pending, result_id=newest)
        .execution_options(synchronize_session="fetch")
    )
