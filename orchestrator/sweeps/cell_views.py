"""A sweep's cells as every renderer shows them (``coverfarm.cell_view.CellView``), built by
``coverfarm.cell_build`` from what is stored: the cell's typed options, its latest result document
(validated), what its CPU jobs say, and its device runs, baselines and device jobs."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from coverfarm.cell_build import Cell as CellInput
from coverfarm.cell_build import DeviceInput, build
from coverfarm.cell_view import CellView
from coverfarm.result import Options, ResultDocument
from orchestrator.devices.grid import device_inputs
from orchestrator.models import Cell, Sweep
from orchestrator.sweeps.service import cpu_jobs
from orchestrator.workers.service import Live, live


def latest_document(cell: Cell) -> ResultDocument | None:
    """The cell's latest stored result document, validated."""
    for job in reversed(cell.jobs):
        if job.result is not None:
            return ResultDocument.model_validate(job.result.document)
    return None


def view_of(cell: Cell, devices: Sequence[DeviceInput] = (), live: Live | None = None) -> CellView:
    """The cell's view; with ``live`` (``workers.service.live``) a cell that waits for a worker says so."""
    options = Options.model_validate(cell.options)
    typed = CellInput(
        cell.policy, cell.backend, options, latest_document(cell), cpu_jobs(cell, live), list(devices)
    )
    return build(typed)


def plain_views(sweep: Sweep) -> dict[int, CellView]:
    """Cell id -> view, without the device columns."""
    return {cell.id: view_of(cell) for cell in sweep.cells}


def sweep_views(session: Session, sweep: Sweep) -> dict[int, CellView]:
    """Cell id -> view, with a device column per device class of the sweep, and why a cell waits for a
    worker when it does."""
    inputs = device_inputs(session, sweep.cells, sweep.device_classes)
    online = live(session)
    return {cell.id: view_of(cell, inputs[cell.id], online) for cell in sweep.cells}
