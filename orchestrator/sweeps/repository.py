"""Every query on sweeps and cells."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, selectinload

from orchestrator.models import DEVICE_KINDS, PENDING_STATUSES, Cell, Job, Result, Sweep

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


def list_sweeps(session: Session, limit: int, offset: int) -> Sequence[Sweep]:
    """A page of sweeps, newest first, with no cells loaded."""
    return session.scalars(select(Sweep).order_by(Sweep.id.desc()).limit(limit).offset(offset)).all()


def count_sweeps(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Sweep)) or 0


def tally(session: Session, sweep_ids: Sequence[int]) -> dict[int, SweepTally]:
    """Per sweep: cells per state, and cells and device jobs pending, counted in the database off the
    cells' kept states (``jobs.cell_state.refresh_cell``): no job read but the pending device ones."""
    tallies = {sweep_id: SweepTally() for sweep_id in sweep_ids}
    if not sweep_ids:
        return tallies
    rows = session.execute(
        select(Cell.sweep_id, Cell.state, Cell.pending, func.count())
        .where(Cell.sweep_id.in_(sweep_ids))
        .group_by(Cell.sweep_id, Cell.state, Cell.pending)
    ).all()
    for sweep_id, cell_state, is_pending, count in rows:
        entry = tallies[sweep_id]
        entry.counts[cell_state.value] = entry.counts.get(cell_state.value, 0) + count
        if is_pending:
            entry.pending += count
    for sweep_id, count in device_pending(session, sweep_ids).items():
        tallies[sweep_id].pending += count
    return tallies


def cells_of_policies(session: Session, sweep_id: int, policies: Sequence[str]) -> Sequence[Cell]:
    """The sweep's cells of ``policies`` in cell order, each with its jobs and their results."""
    query = select(Cell).where(Cell.sweep_id == sweep_id, Cell.policy.in_(policies)).order_by(Cell.id)
    return session.scalars(query.options(_CELL_TREE)).all()


def cells_by_id(session: Session, sweep_id: int, cell_ids: Sequence[int]) -> Sequence[Cell]:
    """Those of ``cell_ids`` that are the sweep's cells, in cell order, with their jobs and results."""
    query = select(Cell).where(Cell.sweep_id == sweep_id, Cell.id.in_(cell_ids)).order_by(Cell.id)
    return session.scalars(query.options(_CELL_TREE)).all()


def get_cell(session: Session, cell_id: int) -> Cell | None:
    return session.scalars(select(Cell).where(Cell.id == cell_id).options(_CELL_TREE)).one_or_none()


def get_sweep_row(session: Session, sweep_id: int) -> Sweep | None:
    """The sweep alone, none of its cells loaded."""
    return session.get(Sweep, sweep_id)


def cell_tally(session: Session, sweep_id: int) -> list[tuple[Any, ...]]:
    """The sweep's cells counted per (backend, state, pending), over each cell's latest result (no
    document read), from the index of the cells' kept states and the results' rows: backend, state,
    pending, cells, measured (a result is stored), exported, and the sums of ops and heavy MACs on the
    backend and in all over the measured cells."""
    rows = session.execute(
        select(
            Cell.backend,
            Cell.state,
            Cell.pending,
            func.count(),
            func.count(Result.id),
            func.coalesce(func.sum(case((Result.export_status == "ok", 1), else_=0)), 0),
            func.sum(Result.ops_on_backend),
            func.sum(Result.ops_total),
            func.sum(Result.macs_on_backend),
            func.sum(Result.macs_total),
        )
        .select_from(Cell)
        .outerjoin(Result, Result.id == Cell.result_id)
        .where(Cell.sweep_id == sweep_id)
        .group_by(Cell.backend, Cell.state, Cell.pending)
    ).all()
    return [tuple(row) for row in rows]


def device_pending(session: Session, sweep_ids: Sequence[int]) -> dict[int, int]:
    """Per sweep, its device jobs queued or running (the index of job statuses finds them)."""
    rows = session.execute(
        select(Cell.sweep_id, func.count())
        .join(Job, Job.cell_id == Cell.id)
        .where(
            Cell.sweep_id.in_(sweep_ids),
            Job.kind.in_(DEVICE_KINDS),
            Job.status.in_([s.value for s in PENDING_STATUSES]),
        )
        .group_by(Cell.sweep_id)
    ).all()
    return {sweep_id: count for sweep_id, count in rows}


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
    where = [
        Cell.sweep_id == sweep_id,
        *([Cell.policy == policy] if policy is not None else []),
        *([Cell.backend == backend] if backend is not None else []),
        *([Cell.state == state] if state is not None else []),
    ]
    # One pass over the matching cells picks the page and counts them all (a window count); only the
    # page's cells then meet their results.
    page = (
        select(Cell.id, Cell.policy, Cell.backend, Cell.stack, Cell.state, Cell.pending, Cell.result_id)
        .add_columns(func.count().over().label("total"))
        .where(*where)
        .order_by(Cell.id)
        .offset(offset)
        .limit(limit)
        .subquery()
    )
    columns = [getattr(Result, name) for name in RESULT_BRIEF_COLUMNS]
    rows = session.execute(
        select(
            page.c.id,
            page.c.policy,
            page.c.backend,
            page.c.stack,
            page.c.state,
            page.c.pending,
            page.c.total,
            *columns,
        )
        .outerjoin(Result, Result.id == page.c.result_id)
        .order_by(page.c.id)
    ).all()
    if rows:
        total = rows[0].total
    else:  # past the end (or nothing matches): count them on their own
        total = session.scalar(select(func.count()).select_from(Cell).where(*where)) or 0
    return total, [(*row[:6], *row[7:]) for row in rows]
