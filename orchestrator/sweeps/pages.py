"""Pages of a sweep's cells: a filtered page with each cell's latest result columns but not its document
(``cells_page``, the API's), and the stored cells a page of the grid shows, with their jobs and results
(``cells_of_rows``, ``cells_by_id``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from orchestrator.errors import NotFound
from orchestrator.models import Cell, JobStatus
from orchestrator.sweeps import repository
from orchestrator.sweeps.schemas import CellBrief, CellPage, ResultBrief, SweepSummary

RESULT_COLUMNS = repository.RESULT_BRIEF_COLUMNS  # ResultBrief's fields (the page test holds them equal)


def cells_page(
    session: Session,
    sweep_id: int,
    offset: int,
    limit: int,
    policy: str | None = None,
    backend: str | None = None,
    state: JobStatus | None = None,
) -> CellPage:
    """One page of the sweep's cells in cell order, filtered, each with its latest result's columns
    but not its document (``url`` has it)."""
    if repository.get_sweep_row(session, sweep_id) is None:
        raise NotFound("sweep", sweep_id)
    total, rows = repository.cell_page(
        session, sweep_id, offset, limit, policy, backend, state.value if state is not None else None
    )
    cells = []
    for row in rows:
        cell_id, cell_policy, cell_backend, cell_stack, cell_state, pending, *result = row
        brief = (
            ResultBrief(**dict(zip(RESULT_COLUMNS, result, strict=True))) if result[0] is not None else None
        )
        cells.append(
            CellBrief(
                id=cell_id,
                policy=cell_policy,
                backend=cell_backend,
                stack=cell_stack,
                state=JobStatus(cell_state),
                pending=bool(pending),
                result=brief,
                url=f"/api/cells/{cell_id}",
            )
        )
    return CellPage(total=total, offset=offset, limit=limit, cells=cells)


def cells_of_rows(session: Session, sweep: SweepSummary, offset: int, limit: int) -> list[Cell]:
    """The stored cells of the sweep's policies ``offset`` to ``offset + limit`` (its rows, in cell
    order), each with its jobs and results: what a page of the grid shows."""
    policies = sweep.policies[offset : offset + limit]
    return list(repository.cells_of_policies(session, sweep.id, policies)) if policies else []


def cells_by_id(session: Session, sweep_id: int, cell_ids: Sequence[int]) -> list[Cell]:
    """Those of ``cell_ids`` that are cells of the sweep, with their jobs and results."""
    return list(repository.cells_by_id(session, sweep_id, cell_ids)) if cell_ids else []
