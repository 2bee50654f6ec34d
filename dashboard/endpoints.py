"""HTTP for the grid: HTML pages, the heatmap SVG and the live fragments the page script swaps in.

Every page reads through the same service functions as the REST API (orchestrator.sweeps.service and
its public views), so the grid can never show something the API does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import jinja2
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates

from coverfarm import tracker
from dashboard import views
from dashboard.heatmap import COL_W, ROW_H, heatmap, square
from orchestrator.deps import SessionDep
from orchestrator.inputs import DB_INT_MAX, Id, Offset
from orchestrator.models import Cell, utcnow
from orchestrator.reports import service as reports
from orchestrator.sweeps import cell_views, service
from orchestrator.sweeps.schemas import SweepSummary

HERE = Path(__file__).resolve().parent
STATIC = {"grid.js": "text/javascript", "style.css": "text/css"}
PAGE_SIZE = 50
# Policies (rows) a grid page renders, and that the page's script loads at a time as it scrolls.
ROWS = 50
# Cells one live update renders at most (the script asks for those of its events).
LIVE_CELLS = 500

# Autoescape everything, the SVG template included (select_autoescape would skip ".svg").
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
)
_env.globals.update(
    tracker=tracker,
    backend_columns=views.backend_columns,
    share_colour=views.share_colour,
    compact=views.compact,
    duration=views.duration_text,
    percent=tracker.share_percent,
    heatmap_col_w=COL_W,
    heatmap_row_h=ROW_H,
)
templates = Jinja2Templates(env=_env)

router = APIRouter(tags=["dashboard"], include_in_schema=False)


def _macros() -> Any:
    return _env.get_template("macros.html").make_module({"now": utcnow()})


@dataclass(frozen=True)
class Rows:
    """Which of the sweep's rows (policies, in cell order) a page or a load of rows holds."""

    offset: int
    page: int  # rows a load holds
    total: int  # the sweep's policies
    columns: int  # the table's columns, the policy's included
    next: int | None  # offset of the rows after these (None: these are the last)
    before: int | None  # offset of the page before (None: these are the first)


def _rows(sweep: SweepSummary, offset: int, limit: int, *, page: bool = True) -> Rows:
    """``page``: for a page of its own (links both ways); else rows loaded below others (onward only)."""
    total = len(sweep.policies)
    return Rows(
        offset=offset,
        page=limit,
        total=total,
        columns=1 + sum(len(views.backend_columns(backend)) for backend in sweep.backends),
        next=offset + limit if offset + limit < total else None,
        before=max(0, offset - limit) if page and offset > 0 else None,
    )


def _grid(session: SessionDep, sweep: SweepSummary, cells: list[Cell]) -> views.Grid:
    """The grid of some of the sweep's stored cells, with their device columns."""
    public = [service.cell_view(cell) for cell in cells]
    return views.grid(sweep.backends, public, cell_views.views_of(session, cells, sweep.device_classes))


def _page(session: SessionDep, sweep_id: int, offset: int) -> dict[str, Any]:
    """A grid page: the sweep's summary (counted in the database) and one page of its rows."""
    sweep = service.summary(session, sweep_id)
    grid = _grid(session, sweep, service.cells_of_rows(session, sweep, offset, ROWS))
    return {
        "sweep": sweep,
        "grid": grid,
        "rows": _rows(sweep, offset, ROWS),
        "heatmap": heatmap(grid),
        "progress": views.progress(sweep),
    }


@router.get("/", response_class=HTMLResponse)
def index(request: Request, session: SessionDep, offset: Offset = 0) -> HTMLResponse:
    sweeps = service.list_(session, PAGE_SIZE + 1, offset)
    return templates.TemplateResponse(
        request,
        "index.html",
        {
            "sweeps": [(sweep, views.progress(sweep)) for sweep in sweeps[:PAGE_SIZE]],
            "offset": offset,
            "more": len(sweeps) > PAGE_SIZE,
            "page_size": PAGE_SIZE,
            "now": utcnow(),
        },
    )


@router.get("/sweeps/{sweep_id:int}", response_class=HTMLResponse)
def sweep_grid(request: Request, sweep_id: Id, session: SessionDep, offset: Offset = 0) -> HTMLResponse:
    """The grid with the sweep's rows from ``offset`` (a page of them; the script loads the rest as
    they come into view)."""
    context = _page(session, sweep_id, offset)
    return templates.TemplateResponse(request, "grid.html", {**context, "now": utcnow()})


@router.get("/sweeps/{sweep_id:int}/heatmap.svg")
def sweep_heatmap(sweep_id: Id, session: SessionDep, offset: Offset = 0) -> Response:
    """The heatmap of the grid page's rows from ``offset``."""
    context = _page(session, sweep_id, offset)
    svg = _env.get_template("heatmap.svg").render(map=context["heatmap"], standalone=True)
    return Response(svg, media_type="image/svg+xml")


@router.get("/sweeps/{sweep_id:int}/rows")
def sweep_rows(
    sweep_id: Id,
    session: SessionDep,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=4 * ROWS)] = ROWS,
) -> JSONResponse:
    """The sweep's rows from ``offset``, rendered as the page renders its own (``rows``), and what goes
    below them (``more``: the next rows' link, empty after the last)."""
    sweep = service.summary(session, sweep_id)
    grid = _grid(session, sweep, service.cells_of_rows(session, sweep, offset, limit))
    macros = _macros()
    return JSONResponse(
        {
            "rows": str(macros.grid_rows(grid)),
            "more": str(macros.more_rows(sweep.id, _rows(sweep, offset, limit, page=False))),
            "now": utcnow().isoformat(),
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/sweeps/{sweep_id:int}/live.json")
def sweep_live(
    sweep_id: Id,
    session: SessionDep,
    cells: Annotated[
        list[Id] | None, Query(max_length=LIVE_CELLS, description="these cells (their events' ids)")
    ] = None,
    rows: Annotated[
        int | None, Query(ge=0, le=DB_INT_MAX, description="the cells of this many rows from offset")
    ] = None,
    offset: Offset = 0,
) -> JSONResponse:
    """What the page swaps in when events arrive or the stream comes back: the columns and heatmap
    square of the cells asked for (``cells``, else those of ``rows`` rows from ``offset``, else of the
    page's rows), as the page renders them, and the sweep's state and progress, counted in the
    database. The script formats nothing itself."""
    sweep = service.summary(session, sweep_id)
    if cells:
        stored = service.cells_by_id(session, sweep_id, cells)
    else:
        stored = service.cells_of_rows(session, sweep, offset, ROWS if rows is None else rows)
    grid = _grid(session, sweep, stored)
    macros = _macros()
    return JSONResponse(
        {
            "id": sweep.id,
            "state": sweep.state,
            "now": utcnow().isoformat(),
            "cells": {str(cell.id): str(macros.cell_columns(cell)) for cell in grid.cells},
            "squares": {str(cell.id): str(macros.heatmap_square(square(cell))) for cell in grid.cells},
            "progress": str(macros.progress_bar(views.progress(sweep))),
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/sweeps/{sweep_id:int}/blockers", response_class=HTMLResponse)
def sweep_blockers(
    request: Request,
    sweep_id: Id,
    session: SessionDep,
    backend: Annotated[str | None, Query(description="only this backend")] = None,
) -> HTMLResponse:
    """The sweep's Known issues: blocker groups heaviest first, what-ifs, repros with their output."""
    report = reports.blockers(service.get(session, sweep_id), backend)
    return templates.TemplateResponse(request, "blockers.html", {"report": report, "now": utcnow()})


@router.get("/cells/{cell_id:int}", response_class=HTMLResponse)
def cell_details(
    request: Request,
    cell_id: Id,
    session: SessionDep,
    partial: Annotated[bool, Query(description="only the details, for the grid's panel")] = False,
) -> HTMLResponse:
    stored = service.get_cell(session, cell_id)
    details = views.details(service.cell_view(stored), cell_views.view_of(stored))
    page = "details.html" if partial else "cell.html"
    return templates.TemplateResponse(request, page, {"d": details, "now": utcnow()})


@router.get("/dashboard/static/{name}")
def static(name: str) -> FileResponse:
    if name not in STATIC:
        raise HTTPException(404, detail=f"no static file {name!r}")
    headers = {"Cache-Control": "no-cache"}
    return FileResponse(HERE / "static" / name, media_type=STATIC[name], headers=headers)
