"""HTTP for the grid: HTML pages (the grid, of one stack or several side by side; a cell; the blockers;
the progress over a sweep's stacks), the heatmap and progress SVGs and the live fragments the page
script swaps in.

Every page reads through the same service functions as the REST API (orchestrator.sweeps.service and
its public views), so the grid can never show something the API does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates

from coverfarm import tracker
from dashboard import progress_page, views
from dashboard.heatmap import heatmap
from dashboard.progress_plot import plot
from orchestrator.deps import SessionDep
from orchestrator.devices.grid import device_inputs
from orchestrator.inputs import Id, Offset
from orchestrator.models import utcnow
from orchestrator.reports import progress
from orchestrator.reports import service as reports
from orchestrator.reports.progress_markdown import stack_label
from orchestrator.sweeps import cell_views, service
from orchestrator.workers import service as workers

HERE = Path(__file__).resolve().parent
STATIC = {"grid.js": "text/javascript", "style.css": "text/css"}
PAGE_SIZE = 50

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
    stack_label=stack_label,
)
templates = Jinja2Templates(env=_env)

router = APIRouter(tags=["dashboard"], include_in_schema=False)


def _macros() -> Any:
    return _env.get_template("macros.html").make_module({"now": utcnow()})


StacksQuery = Annotated[
    list[str] | None, Query(description="the stacks to show, side by side when several (default: the first)")
]


def _grid_context(session: SessionDep, sweep_id: int, stack: list[str] | None = None) -> dict[str, Any]:
    stored = service.get(session, sweep_id)
    chosen = list(dict.fromkeys(stack or []))
    for name in chosen:
        reports.check_stack(stored, name)
    sweep = service.sweep_view(stored, workers.live(session))
    cells = cell_views.sweep_views(session, stored)
    shown = chosen or cell_views.sweep_stacks(stored)[:1]
    grid = views.grid(sweep, cells, cell_views.release_order(stored, cells), shown)
    query = f"?{urlencode([('stack', name) for name in chosen])}" if chosen else ""
    return {
        "sweep": sweep,
        "grid": grid,
        "heatmap": heatmap(grid),
        "progress": views.progress(sweep),
        "query": query,
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
def sweep_grid(
    request: Request, sweep_id: Id, session: SessionDep, stack: StacksQuery = None
) -> HTMLResponse:
    context = _grid_context(session, sweep_id, stack)
    return templates.TemplateResponse(request, "grid.html", {**context, "now": utcnow()})


@router.get("/sweeps/{sweep_id:int}/heatmap.svg")
def sweep_heatmap(sweep_id: Id, session: SessionDep, stack: StacksQuery = None) -> Response:
    context = _grid_context(session, sweep_id, stack)
    svg = _env.get_template("heatmap.svg").render(map=context["heatmap"], standalone=True)
    return Response(svg, media_type="image/svg+xml")


@router.get("/sweeps/{sweep_id:int}/live.json")
def sweep_live(sweep_id: Id, session: SessionDep, stack: StacksQuery = None) -> JSONResponse:
    """What the page swaps in when events arrive or the stream comes back: each shown cell's columns
    as the grid renders them, the progress count and the heatmap, all rendered here by the same
    templates as the page (the script formats nothing itself)."""
    context = _grid_context(session, sweep_id, stack)
    macros = _macros()
    sweep = context["sweep"]
    return JSONResponse(
        {
            "id": sweep.id,
            "state": sweep.state,
            "now": utcnow().isoformat(),
            "cells": {str(cell.id): str(macros.cell_columns(cell)) for cell in context["grid"].cells},
            "progress": str(macros.progress_bar(context["progress"])),
            "heatmap": _env.get_template("heatmap.svg").render(map=context["heatmap"], standalone=False),
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/sweeps/{sweep_id:int}/blockers", response_class=HTMLResponse)
def sweep_blockers(
    request: Request,
    sweep_id: Id,
    session: SessionDep,
    backend: Annotated[str | None, Query(description="only this backend")] = None,
    stack: Annotated[str | None, Query(description="only this stack's cells")] = None,
) -> HTMLResponse:
    """The sweep's Known issues: blocker groups heaviest first, what-ifs, repros with their output."""
    stored = service.get(session, sweep_id)
    report = reports.blockers(stored, backend, stack)
    context = {"report": report, "stacks": cell_views.sweep_stacks(stored), "now": utcnow()}
    return templates.TemplateResponse(request, "blockers.html", context)


@router.get("/sweeps/{sweep_id:int}/progress", response_class=HTMLResponse)
def sweep_progress(request: Request, sweep_id: Id, session: SessionDep) -> HTMLResponse:
    """Per backend, each policy's tracker row on each stack (oldest release first) and its change from
    one to the next, the blocker groups each release fixed and introduced, and the plot of each
    policy's ops and heavy math on the backend per stack."""
    report = progress.progress(session, service.get(session, sweep_id))
    context = {
        "report": report,
        "tables": progress_page.tables(report),
        "plot": plot(report),
        "now": utcnow(),
    }
    return templates.TemplateResponse(request, "progress.html", context)


@router.get("/sweeps/{sweep_id:int}/progress.svg")
def sweep_progress_plot(sweep_id: Id, session: SessionDep) -> Response:
    report = progress.progress(session, service.get(session, sweep_id))
    svg = _env.get_template("progress_plot.svg").render(plot=plot(report), standalone=True)
    return Response(svg, media_type="image/svg+xml")


@router.get("/cells/{cell_id:int}", response_class=HTMLResponse)
def cell_details(
    request: Request,
    cell_id: Id,
    session: SessionDep,
    partial: Annotated[bool, Query(description="only the details, for the grid's panel")] = False,
) -> HTMLResponse:
    stored = service.get_cell(session, cell_id)
    # The cell's device columns as the grid shows them: its runs on each device class of its sweep.
    devices = device_inputs(session, [stored], stored.sweep.device_classes)[stored.id]
    online = workers.live(session)
    several = len(stored.sweep.stacks or []) > 1
    view = cell_views.view_of(stored, devices, online)
    details = views.details(service.cell_view(stored, online), view, several)
    page = "details.html" if partial else "cell.html"
    return templates.TemplateResponse(request, page, {"d": details, "now": utcnow()})


@router.get("/dashboard/static/{name}")
def static(name: str) -> FileResponse:
    if name not in STATIC:
        raise HTTPException(404, detail=f"no static file {name!r}")
    headers = {"Cache-Control": "no-cache"}
    return FileResponse(HERE / "static" / name, media_type=STATIC[name], headers=headers)
