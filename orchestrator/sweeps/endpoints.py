"""HTTP for sweeps and cells; the behaviour is in service.py (submit, cancel), public_views.py,
summaries.py and pages.py. A sweep's tracker body (report.md) is the reports'
(``orchestrator.reports.endpoints.tracker_router``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from orchestrator.deps import AdminDep, SessionDep, SettingsDep, SnapshotDep
from orchestrator.errors import responses
from orchestrator.inputs import Id, Name, Offset, StrictJSONRoute
from orchestrator.models import JobStatus
from orchestrator.sweeps import pages, public_views, service, summaries
from orchestrator.sweeps.schemas import (
    CellPage,
    CellPublic,
    SweepCreate,
    SweepOverview,
    SweepPublic,
    SweepSummary,
)
from orchestrator.workers import service as workers

router = APIRouter(tags=["sweeps"], route_class=StrictJSONRoute)
ADMIN = responses(401, 413)


@router.post("/sweeps", status_code=status.HTTP_201_CREATED, dependencies=[AdminDep], responses=ADMIN)
def create_sweep(body: SweepCreate, session: SessionDep, settings: SettingsDep) -> SweepPublic:
    sweep = service.create(session, settings, body)
    return public_views.sweep_view(service.get(session, sweep.id), workers.live(session))


@router.get("/sweeps")
def list_sweeps(
    session: SnapshotDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> list[SweepSummary]:
    """Newest first, counts per cell state only (GET /api/sweeps/{id} has the cells and results);
    ``X-Total-Count`` is the number of sweeps in all, for paging."""
    response.headers["X-Total-Count"] = str(summaries.count(session))
    return summaries.list_(session, limit, offset)


@router.get("/sweeps/{sweep_id:int}", responses=responses(404))
def get_sweep(sweep_id: Id, session: SnapshotDep) -> SweepPublic:
    return public_views.sweep_view(service.get(session, sweep_id), workers.live(session))


@router.get("/sweeps/{sweep_id:int}/summary", responses=responses(404))
def sweep_summary(sweep_id: Id, session: SnapshotDep) -> SweepOverview:
    """Counts per cell state and per backend column (cells, measured, exported, ops and heavy math on
    the backend), no cell and no document: what a big sweep's page reads first."""
    return summaries.overview(session, sweep_id)


@router.get("/sweeps/{sweep_id:int}/cells", responses=responses(404))
def sweep_cells(
    sweep_id: Id,
    session: SnapshotDep,
    response: Response,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    policy: Annotated[Name | None, Query(description="only this policy's cells")] = None,
    backend: Annotated[Name | None, Query(description="only this backend's cells")] = None,
    state: Annotated[JobStatus | None, Query(description="only cells in this state")] = None,
) -> CellPage:
    """A page of the sweep's cells in cell order, each with its latest result's columns and the URL of
    its whole document; ``X-Total-Count`` (and ``total``) counts the cells the filters match."""
    page = pages.cells_page(session, sweep_id, offset, limit, policy, backend, state)
    response.headers["X-Total-Count"] = str(page.total)
    return page


@router.post("/sweeps/{sweep_id:int}/cancel", dependencies=[AdminDep], responses=responses(401, 404))
def cancel_sweep(sweep_id: Id, session: SessionDep) -> SweepPublic:
    return public_views.sweep_view(service.cancel(session, sweep_id), workers.live(session))


@router.get("/cells/{cell_id:int}", responses=responses(404))
def get_cell(cell_id: Id, session: SnapshotDep) -> CellPublic:
    return public_views.cell_view(service.get_cell(session, cell_id), workers.live(session))
