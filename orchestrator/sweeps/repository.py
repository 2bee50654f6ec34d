"""Every query on sweeps and cells."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session, selectinload

from orchestrator.models import DEVICE_STAGE_PREFIXES, PENDING_STATUSES, Cell, Job, JobStatus, Sweep
from orchestrator.sweeps.state import cell_state_sql

_CELL_TREE = selectinload(Cell.jobs).selectinload(Job.result)


def get_sweep(session: Session, sweep_id: int, *, lock: bool = False) -> Sweep | None:
    query = select(Sweep).where(Sweep.id == sweep_id).options(selectinload(Sweep.cells).options(_CELL_TREE))
    if lock:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


@dataclass
class SweepTally:
    """A sweep's cells counted per state, without loading a cell, a job or a result document."""

    counts: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    policies: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)


def list_sweeps(session: Session, limit: int, offset: int) -> Sequence[Sweep]:
    """A page of sweeps, newest first, with no cells loaded."""
    return session.scalars(select(Sweep).order_by(Sweep.id.desc()).limit(limit).offset(offset)).all()


def count_sweeps(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Sweep)) or 0


def tally(session: Session, sweep_ids: Sequence[int]) -> dict[int, SweepTally]:
    """Per sweep: cells per state and the policies and backends in cell order, counted in the database
    with ``sweeps.state.cell_state_sql``, the state rule the loaded cells' views use."""
    tallies = {sweep_id: SweepTally() for sweep_id in sweep_ids}
    if not sweep_ids:
        return tallies
    device_stage = or_(*(Job.stage.startswith(prefix) for prefix in DEVICE_STAGE_PREFIXES))
    per_cell = (
        select(
            Cell.id.label("cell_id"),
            Cell.sweep_id,
            func.max(Job.id).label("latest"),
            func.max(case((Job.status == JobStatus.SLOW, 1), else_=0)).label("any_slow"),
        )
        # Device jobs have their own columns; they keep the sweep running (below).
        .outerjoin(Job, (Job.cell_id == Cell.id) & ~device_stage)
        .where(Cell.sweep_id.in_(sweep_ids))
        .group_by(Cell.id, Cell.sweep_id)
        .subquery()
    )
    latest = Job.__table__.alias("latest_job")
    state, pending = cell_state_sql(latest.c.status, per_cell.c.any_slow)
    states = (
        select(per_cell.c.sweep_id, state.label("state"), pending.label("pending"))
        .select_from(per_cell.outerjoin(latest, latest.c.id == per_cell.c.latest))
        .subquery()
    )
    rows = session.execute(
        select(states.c.sweep_id, states.c.state, states.c.pending, func.count()).group_by(
            states.c.sweep_id, states.c.state, states.c.pending
        )
    ).all()
    for sweep_id, cell_state, is_pending, count in rows:
        entry = tallies[sweep_id]
        entry.counts[cell_state] = entry.counts.get(cell_state, 0) + count
        if is_pending:
            entry.pending += count
    device_pending = session.execute(
        select(Cell.sweep_id, func.count())
        .join(Job, Job.cell_id == Cell.id)
        .where(
            Cell.sweep_id.in_(sweep_ids),
            device_stage,
            Job.status.in_([s.value for s in PENDING_STATUSES]),
        )
        .group_by(Cell.sweep_id)
    ).all()
    for sweep_id, count in device_pending:
        tallies[sweep_id].pending += count
    for column, target in ((Cell.policy, "policies"), (Cell.backend, "backends")):
        names = session.execute(
            select(Cell.sweep_id, column)
            .where(Cell.sweep_id.in_(sweep_ids))
            .group_by(Cell.sweep_id, column)
            .order_by(Cell.sweep_id, func.min(Cell.id))
        ).all()
        for sweep_id, name in names:
            getattr(tallies[sweep_id], target).append(name)
    return tallies


def get_cell(session: Session, cell_id: int) -> Cell | None:
    return session.scalars(select(Cell).where(Cell.id == cell_id).options(_CELL_TREE)).one_or_none()
