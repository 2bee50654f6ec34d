"""Every query on sweeps and cells."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from orchestrator.models import Cell, Job, Sweep

_CELL_TREE = selectinload(Cell.jobs).selectinload(Job.result)


def get_sweep(session: Session, sweep_id: int, *, lock: bool = False) -> Sweep | None:
    query = select(Sweep).where(Sweep.id == sweep_id).options(selectinload(Sweep.cells).options(_CELL_TREE))
    if lock:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


def list_sweeps(session: Session, limit: int, offset: int) -> Sequence[Sweep]:
    return session.scalars(
        select(Sweep)
        .order_by(Sweep.id.desc())
        .limit(limit)
        .offset(offset)
        .options(selectinload(Sweep.cells).options(_CELL_TREE))
    ).all()


def get_cell(session: Session, cell_id: int) -> Cell | None:
    return session.scalars(select(Cell).where(Cell.id == cell_id).options(_CELL_TREE)).one_or_none()
