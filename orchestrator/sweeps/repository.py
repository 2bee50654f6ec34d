"""Every query on sweeps and cells."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Subquery, and_, case, func, or_, select
from sqlalchemy.orm import Session, selectinload

from orchestrator.models import DEVICE_STAGE_PREFIXES, PENDING_STATUSES, Cell, Job, JobStatus, Result, Sweep
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


_DEVICE_STAGE = or_(*(Job.stage.startswith(prefix) for prefix in DEVICE_STAGE_PREFIXES))


def cell_states(where: ColumnElement[bool]) -> Subquery:
    """Per cell matching ``where``: id, sweep_id, policy, backend, stack, state and pending, derived in
    the database by ``sweeps.state.cell_state_sql`` from its CPU jobs (device jobs have their own
    columns)."""
    per_cell = (
        select(
            Cell.id.label("cell_id"),
            Cell.sweep_id,
            Cell.policy,
            Cell.backend,
            Cell.stack,
            func.max(Job.id).label("latest"),
            func.max(case((Job.status == JobStatus.SLOW, 1), else_=0)).label("any_slow"),
        )
        .outerjoin(Job, (Job.cell_id == Cell.id) & ~_DEVICE_STAGE)
        .where(where)
        .group_by(Cell.id, Cell.sweep_id, Cell.policy, Cell.backend, Cell.stack)
        .subquery()
    )
    latest = Job.__table__.alias("latest_job")
    state, pending = cell_state_sql(latest.c.status, per_cell.c.any_slow)
    return (
        select(
            per_cell.c.cell_id,
            per_cell.c.sweep_id,
            per_cell.c.policy,
            per_cell.c.backend,
            per_cell.c.stack,
            state.label("state"),
            pending.label("pending"),
        )
        .select_from(per_cell.outerjoin(latest, latest.c.id == per_cell.c.latest))
        .subquery()
    )


def tally(session: Session, sweep_ids: Sequence[int]) -> dict[int, SweepTally]:
    """Per sweep: cells per state and the policies and backends in cell order, counted in the database
    with ``sweeps.state.cell_state_sql``, the state rule the loaded cells' views use."""
    tallies = {sweep_id: SweepTally() for sweep_id in sweep_ids}
    if not sweep_ids:
        return tallies
    states = cell_states(Cell.sweep_id.in_(sweep_ids))
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
            _DEVICE_STAGE,
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


def get_sweep_row(session: Session, sweep_id: int) -> Sweep | None:
    """The sweep alone, none of its cells loaded."""
    return session.get(Sweep, sweep_id)


def _latest_results(where: ColumnElement[bool]) -> Subquery:
    """Per cell matching ``where`` that has a result: the id of its latest one."""
    return (
        select(Result.cell_id, func.max(Result.id).label("result_id"))
        .join(Cell, Cell.id == Result.cell_id)
        .where(where)
        .group_by(Result.cell_id)
        .subquery()
    )


def column_aggregates(session: Session, sweep_id: int) -> list[tuple[Any, ...]]:
    """Per backend of the sweep, in cell order, over each cell's latest result (no document read):
    backend, cells, measured (a result is stored), exported, and the sums of ops and heavy MACs on the
    backend and in all over the measured cells."""
    latest = _latest_results(Cell.sweep_id == sweep_id)
    result = Result.__table__.alias("latest_result")
    rows = session.execute(
        select(
            Cell.backend,
            func.count(Cell.id),
            func.count(result.c.id),
            func.coalesce(func.sum(case((result.c.export_status == "ok", 1), else_=0)), 0),
            func.sum(result.c.ops_on_backend),
            func.sum(result.c.ops_total),
            func.sum(result.c.macs_on_backend),
            func.sum(result.c.macs_total),
        )
        .select_from(Cell)
        .outerjoin(latest, latest.c.cell_id == Cell.id)
        .outerjoin(result, result.c.id == latest.c.result_id)
        .where(Cell.sweep_id == sweep_id)
        .group_by(Cell.backend)
        .order_by(func.min(Cell.id))
    ).all()
    return [tuple(row) for row in rows]


# A result's columns a page of cells carries (sweeps.schemas.ResultBrief), in this order.
RESULT_BRIEF_COLUMNS = (
    "job_id",
    "attempt",
    "status",
    "export_status",
    "ops_total",
    "ops_on_backend",
    "macs_total",
    "macs_on_backend",
    "programs",
)


def cell_page(
    session: Session,
    sweep_id: int,
    offset: int,
    limit: int,
    policy: str | None = None,
    backend: str | None = None,
    state: str | None = None,
) -> tuple[int, list[tuple[Any, ...]]]:
    """(cells matching in all, one page of them in cell order): each row the cell's id, policy,
    backend, stack, state and pending, and its latest result's columns (all None without one), no
    document."""
    where = and_(
        Cell.sweep_id == sweep_id,
        *([Cell.policy == policy] if policy is not None else []),
        *([Cell.backend == backend] if backend is not None else []),
    )
    states = cell_states(where)
    matching = [states.c.state == state] if state is not None else []
    # One pass over the sweep's cells for the page and the count of all that match.
    page = session.execute(
        select(
            states.c.cell_id,
            states.c.policy,
            states.c.backend,
            states.c.stack,
            states.c.state,
            states.c.pending,
            func.count().over().label("total"),
        )
        .where(*matching)
        .order_by(states.c.cell_id)
        .offset(offset)
        .limit(limit)
    ).all()
    if page:
        total = page[0].total
    else:  # past the end (or nothing matches): count them on their own
        total = session.scalar(select(func.count()).select_from(states).where(*matching)) or 0
    # The latest result of the page's cells only.
    latest = _latest_results(Cell.id.in_([row.cell_id for row in page]))
    columns = [getattr(Result, name) for name in RESULT_BRIEF_COLUMNS]
    results = {
        row[0]: tuple(row[1:])
        for row in session.execute(
            select(Result.cell_id, *columns).join(latest, latest.c.result_id == Result.id)
        ).all()
    }
    empty = (None,) * len(columns)
    return total, [(*tuple(row)[:6], *results.get(row.cell_id, empty)) for row in page]
