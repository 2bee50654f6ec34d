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


def latest_document(cell: Cell) -> ResultDocument | None:
    """The cell's latest stored result document, validated."""
    for job in reversed(cell.jobs):
        if job.result is not None:
            return ResultDocument.model_validate(job.result.document)
    return None


def view_of(cell: Cell, devices: Sequence[DeviceInput] = ()) -> CellView:
    options = Options.model_validate(cell.options)
    typed = CellInput(
        cell.policy, cell.backend, options, latest_document(cell), cpu_jobs(cell), list(devices)
    )
    return build(typed)


def plain_views(sweep: Sweep) -> dict[int, CellView]:
    """Cell id -> view, without the device columns."""
    return {cell.id: view_of(cell) for cell in sweep.cells}


def sweep_views(session: Session, sweep: Sweep) -> dict[int, CellView]:
    """Cell id -> view, with a device column per device class of the sweep."""
    return views_of(session, sweep.cells, sweep.device_classes)


def views_of(session: Session, cells: Sequence[Cell], device_classes: Sequence[str]) -> dict[int, CellView]:
    """Cell id -> view of some of a sweep's cells, with a device column per one of ``device_classes``
    (the sweep's)."""
    inputs = device_inputs(session, cells, device_classes)
    return {cell.id: view_of(cell, inputs[cell.id]) for cell in cells}
