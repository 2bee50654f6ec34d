"""A sweep's cells as every renderer shows them (``coverfarm.cell_view.CellView``), built by
``coverfarm.cell_build`` from what is stored: the cell's typed options, its latest result document
(validated), what its CPU jobs say, and its device runs, baselines and device jobs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from packaging.version import InvalidVersion, Version
from sqlalchemy.orm import Session

from coverfarm.cell_build import Cell as CellInput
from coverfarm.cell_build import DeviceInput, build
from coverfarm.cell_view import CellView
from coverfarm.result import Options, ResultDocument
from orchestrator.devices.grid import device_inputs, shown_classes
from orchestrator.models import Cell, Sweep
from orchestrator.sweeps.public_views import cpu_jobs
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
        cell.policy,
        cell.backend,
        options,
        latest_document(cell),
        cpu_jobs(cell, live),
        list(devices),
        cell.stack,
    )
    return build(typed)


def plain_views(sweep: Sweep) -> dict[int, CellView]:
    """Cell id -> view, without the device columns."""
    return {cell.id: view_of(cell) for cell in sweep.cells}


def sweep_views(session: Session, sweep: Sweep) -> dict[int, CellView]:
    """Cell id -> view, with a device column per device class of the sweep, and why a cell waits for a
    worker when it does."""
    return views_of(session, sweep.cells, shown_classes(session, sweep.id, sweep.device_classes))


def views_of(
    session: Session, cells: Sequence[Cell], device_classes: Sequence[str], online: Live | None = None
) -> dict[int, CellView]:
    """Cell id -> view of some of a sweep's cells, with a device column per one of ``device_classes``
    (the sweep's), and why a cell waits for a worker when it does (``online``: the workers' ``live``,
    read here when not given)."""
    inputs = device_inputs(session, cells, device_classes)
    online = live(session) if online is None else online
    return {cell.id: view_of(cell, inputs[cell.id], online) for cell in cells}


def sweep_stacks(sweep: Sweep) -> list[str]:
    """The sweep's stacks in the order it names them; a stack of one of its cells that it does not name
    comes after them (rows stored before stacks existed are of the default stack)."""
    return list(dict.fromkeys([*(sweep.stacks or []), *(cell.stack for cell in sweep.cells)]))


def _release_key(release: str | None) -> tuple[int, Version]:
    try:
        return (0, Version(release or ""))
    except InvalidVersion:
        return (1, Version("0"))


def release_order(stacks: Sequence[str], cells: Sequence[Cell], views: dict[int, CellView]) -> list[str]:
    """``stacks`` (a sweep's), oldest ExecuTorch release first: by the release most of each stack's
    results among ``cells`` recorded (``CellView.release``); a stack with none, or none that reads as a
    version, comes after them, in the sweep's order."""
    recorded: dict[str, Counter[str]] = {name: Counter() for name in stacks}
    for cell in cells:
        release = views[cell.id].release if cell.id in views else None
        if release is not None and cell.stack in recorded:
            recorded[cell.stack][release] += 1
    releases = {name: found.most_common(1)[0][0] if found else None for name, found in recorded.items()}
    return sorted(recorded, key=lambda name: _release_key(releases[name]))
