"""HTTP for the grid: HTML pages (the grid, of one stack or several side by side; a cell; the blockers;
the progress over a sweep's stacks), the heatmap and progress SVGs and the live fragments the page
script swaps in.

Every page reads through the same service functions as the REST API (orchestrator.sweeps' service,
its public views, summaries and pages), so the grid can never show something the API does not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from coverfarm import tracker, workarounds
from dashboard import device_details, progress_page, views
from dashboard.heatmap import COL_W, ROW_H, heatmap, square
from dashboard.progress_plot import plot
from orchestrator.deps import SnapshotDep
from orchestrator.devices.grid import device_inputs, shown_classes
from orchestrator.inputs import DB_INT_MAX, Id, Name, Offset, Text
from orchestrator.models import Cell, utcnow
from orchestrator.reports import progress
from orchestrator.reports import service as reports
from orchestrator.reports.candidates import cell_candidates
from orchestrator.reports.numerics import cell_numerics
from orchestrator.reports.profiles import cell_profiles
from orchestrator.reports.progress_markdown import stack_label
from orchestrator.sweeps import cell_views, pages, public_views, service, summaries
from orchestrator.sweeps.schemas import SweepSummary
from orchestrator.workers import service as workers

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
    backend_classes=views.backend_classes,
    share_colour=views.share_colour,
    compact=views.compact,
    duration=views.duration_text,
    percent=tracker.share_percent,
    interval_words=device_details.interval_words,
    stack_label=stack_label,
    workaround_lines=workarounds.described,
    heatmap_col_w=COL_W,
    heatmap_row_h=ROW_H,
)
templates = Jinja2Templates(env=_env)

router = APIRouter(tags=["dashboard"], include_in_schema=False)


def _macros() -> Any:
    return _env.get_template("macros.html").make_module({"now": utcnow()})


StacksQuery = Annotated[
    list[Name] | None, Query(description="the stacks to show, side by side when several (default: the first)")
]


@dataclass(frozen=True)
class Rows:
    """Which of the sweep's rows (policies, in cell order) a page or a load of rows holds."""

    offset: int
    page: int  # rows a load holds
    total: int  # the sweep's policies
    columns: int  # the table's columns, the policy's (and the stack's) included
    next: int | None  # offset of the rows after these (None: these are the last)
    before: int | None  # offset of the page before (None: these are the first)
    stacks_query: str = ""  # "&stack=..." per stack asked for, kept by every link to more rows


def _stacks_query(chosen: list[str]) -> str:
    return "".join(f"&{urlencode([('stack', name)])}" for name in chosen)


def _rows(
    sweep: SweepSummary, offset: int, limit: int, chosen: list[str], *, compare: bool, page: bool = True
) -> Rows:
    """``page``: for a page of its own (links both ways); else rows loaded below others (onward only)."""
    total = len(sweep.policies)
    return Rows(
        offset=offset,
        page=limit,
        total=total,
        columns=1 + int(compare) + sum(len(views.backend_columns(backend)) for backend in sweep.backends),
        next=offset + limit if offset + limit < total else None,
        before=max(0, offset - limit) if page and offset > 0 else None,
        stacks_query=_stacks_query(chosen),
    )


def _chosen(sweep: SweepSummary, stack: list[str] | None) -> list[str]:
    """The stacks asked for, each one of the sweep's (else a 422 naming those it has)."""
    chosen = list(dict.fromkeys(stack or []))
    known = list(sweep.stacks)
    for name in chosen:
        reports.check_stack_of(sweep.id, known, name)
    return chosen


def grid_summary(session: Session, sweep_id: int) -> SweepSummary:
    """The sweep's summary with the device classes its grid shows (``shown_classes``): those asked for
    and those with a stored run. ``grid_of`` takes its columns from it."""
    sweep = summaries.summary(session, sweep_id)
    return sweep.model_copy(update={"device_classes": shown_classes(session, sweep.id, sweep.device_classes)})


def grid_of(session: Session, sweep: SweepSummary, cells: list[Cell], chosen: list[str]) -> views.Grid:
    """The grid of some of the sweep's stored cells, with their device columns and why a cell waits
    for a worker; the ``chosen`` stacks (default: the sweep's first), side by side when
    several. Each cell is read once: its row (the state kept on it) and its view. ``sweep`` is a
    ``grid_summary``: its device classes are those the grid shows."""
    cell_views_ = cell_views.views_of(session, cells, sweep.device_classes, workers.live(session))
    stacks = cell_views.release_order(list(sweep.stacks), cells, cell_views_)
    return views.grid(sweep.backends, cells, cell_views_, stacks, chosen or list(sweep.stacks)[:1])


def _page(session: Session, sweep_id: int, offset: int, stack: list[str] | None = None) -> dict[str, Any]:
    """A grid page: the sweep's summary (counted in the database) and one page of its rows."""
    sweep = grid_summary(session, sweep_id)
    chosen = _chosen(sweep, stack)
    grid = grid_of(session, sweep, pages.cells_of_rows(session, sweep, offset, ROWS), chosen)
    # The stacks shown are named in every link the page follows (its next rows, live.json), so that
    # what it loads later is of the stacks it shows, whichever order a load of other rows would give.
    shown = grid.shown if len(grid.stacks) > 1 else []
    return {
        "sweep": sweep,
        "grid": grid,
        "rows": _rows(sweep, offset, ROWS, shown, compare=grid.compare),
        "heatmap": heatmap(grid),
        "progress": views.progress(sweep),
        "query": f"?{urlencode([('stack', name) for name in shown])}" if shown else "",
    }


@router.get("/", response_class=HTMLResponse)
def index(request: Request, session: SnapshotDep, offset: Offset = 0) -> HTMLResponse:
    sweeps = summaries.list_(session, PAGE_SIZE + 1, offset)
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
    request: Request, sweep_id: Id, session: SnapshotDep, offset: Offset = 0, stack: StacksQuery = None
) -> HTMLResponse:
    """The grid with the sweep's rows from ``offset`` (a page of them; the script loads the rest as
    they come into view), of the ``stack`` asked for, or several side by side."""
    context = _page(session, sweep_id, offset, stack)
    return templates.TemplateResponse(request, "grid.html", {**context, "now": utcnow()})


@router.get("/sweeps/{sweep_id:int}/heatmap.svg")
def sweep_heatmap(
    sweep_id: Id, session: SnapshotDep, offset: Offset = 0, stack: StacksQuery = None
) -> Response:
    """The heatmap of the grid page's rows from ``offset``."""
    context = _page(session, sweep_id, offset, stack)
    svg = _env.get_template("heatmap.svg").render(map=context["heatmap"], standalone=True)
    return Response(svg, media_type="image/svg+xml")


@router.get("/sweeps/{sweep_id:int}/rows")
def sweep_rows(
    sweep_id: Id,
    session: SnapshotDep,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=4 * ROWS)] = ROWS,
    stack: StacksQuery = None,
) -> JSONResponse:
    """The sweep's rows from ``offset``, rendered as the page renders its own (``rows``), and what goes
    below them (``more``: the next rows' link, empty after the last)."""
    sweep = grid_summary(session, sweep_id)
    chosen = _chosen(sweep, stack)
    grid = grid_of(session, sweep, pages.cells_of_rows(session, sweep, offset, limit), chosen)
    macros = _macros()
    more = _rows(sweep, offset, limit, chosen, compare=grid.compare, page=False)
    return JSONResponse(
        {
            "rows": str(macros.grid_rows(grid)),
            "more": str(macros.more_rows(sweep.id, more)),
            "now": utcnow().isoformat(),
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/sweeps/{sweep_id:int}/live.json")
def sweep_live(
    sweep_id: Id,
    session: SnapshotDep,
    cells: Annotated[
        list[Id] | None, Query(max_length=LIVE_CELLS, description="these cells (their events' ids)")
    ] = None,
    rows: Annotated[
        int | None, Query(ge=0, le=DB_INT_MAX, description="the cells of this many rows from offset")
    ] = None,
    offset: Offset = 0,
    stack: StacksQuery = None,
) -> JSONResponse:
    """What the page swaps in when events arrive or the stream comes back: the columns and heatmap
    square of the cells asked for (``cells``, else those of ``rows`` rows from ``offset``, else of the
    page's rows) of the stacks shown, as the page renders them, and the sweep's state and progress,
    counted in the database. The script formats nothing itself."""
    sweep = grid_summary(session, sweep_id)
    chosen = _chosen(sweep, stack)
    if cells:
        stored = pages.cells_by_id(session, sweep_id, cells)
    else:
        stored = pages.cells_of_rows(session, sweep, offset, ROWS if rows is None else rows)
    grid = grid_of(session, sweep, stored, chosen)
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
    session: SnapshotDep,
    backend: Annotated[Name | None, Query(description="only this backend")] = None,
    stack: Annotated[Name | None, Query(description="only this stack's cells")] = None,
) -> HTMLResponse:
    """The sweep's Known issues: blocker groups heaviest first, what-ifs, repros with their output."""
    stored = service.get(session, sweep_id)
    report = reports.blockers(stored, backend, stack)
    context = {"report": report, "stacks": cell_views.sweep_stacks(stored), "now": utcnow()}
    return templates.TemplateResponse(request, "blockers.html", context)


@router.get("/sweeps/{sweep_id:int}/progress", response_class=HTMLResponse)
def sweep_progress(request: Request, sweep_id: Id, session: SnapshotDep) -> HTMLResponse:
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
def sweep_progress_plot(sweep_id: Id, session: SnapshotDep) -> Response:
    report = progress.progress(session, service.get(session, sweep_id))
    svg = _env.get_template("progress_plot.svg").render(plot=plot(report), standalone=True)
    return Response(svg, media_type="image/svg+xml")


@router.get("/cells/{cell_id:int}", response_class=HTMLResponse)
def cell_details(
    request: Request,
    cell_id: Id,
    session: SnapshotDep,
    partial: Annotated[bool, Query(description="only the details, for the grid's panel")] = False,
) -> HTMLResponse:
    stored = service.get_cell(session, cell_id)
    # The cell's device columns as the grid shows them: its runs on each device class of its sweep.
    classes = shown_classes(session, stored.sweep_id, stored.sweep.device_classes)
    devices = device_inputs(session, [stored], classes)[stored.id]
    online = workers.live(session)
    several = len(stored.sweep.stacks or []) > 1
    view = cell_views.view_of(stored, devices, online)
    details = views.details(public_views.cell_view(stored, online), view, several, devices)
    # Candidate-fix runs beside the runs the cell shows, each in full as its class's run is.
    beside = [
        replace(shown, candidate=True)
        for run in cell_candidates(session, [stored], classes)
        for shown in device_details.device_details(
            [run.device],
            {run.device_class: run.column},
            {run.device_class: views.KIND_TONES[run.column.kind]},
        )
    ]
    details = replace(
        details,
        profiles=views.profile_views(cell_profiles(session, [stored])),
        numerics=views.numerics_views(cell_numerics(session, [stored])),
        devices=[*details.devices, *beside],
    )
    page = "details.html" if partial else "cell.html"
    return templates.TemplateResponse(request, page, {"d": details, "now": utcnow()})


@router.get("/dashboard/static/{name}")
def static(name: Text) -> FileResponse:
    if name not in STATIC:
        raise HTTPException(404, detail=f"no static file {name!r}")
    headers = {"Cache-Control": "no-cache"}
    return FileResponse(HERE / "static" / name, media_type=STATIC[name], headers=headers)
