"""The device side of a sweep's cells, typed, for their views (``coverfarm.cell_build.DeviceInput``): per
cell and device class of the sweep, its run and its eager baseline (their validated documents), its
device jobs, and whether a runner serves the class. The cells' views (``orchestrator.sweeps.cell_views``)
take them; every renderer (the grid, the cell page, the report) words their device columns with
``coverfarm.tracker``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from coverfarm.baseline import BaselineResult
from coverfarm.cell_build import DeviceInput, DeviceJob
from coverfarm.device_result import DeviceResult
from orchestrator.devices import repository
from orchestrator.jobs.repository import REUSED_SOURCE
from orchestrator.jobs.service import cause
from orchestrator.models import PENDING_STATUSES, Cell, DeviceBaseline, DeviceRun, Job, JobKind


def _job(cell: Cell, kind: JobKind, device_class: str) -> Job | None:
    return next((job for job in cell.jobs if job.kind is kind and job.device_class == device_class), None)


Key = tuple[int, str]  # (cell id, device class)


def runs(session: Session, cells: Sequence[Cell]) -> dict[Key, DeviceResult]:
    """The stored device run of each (cell, class), as its validated document, in the query's order."""
    rows = repository.runs_of_cells(session, [cell.id for cell in cells])
    return {(row.cell_id, row.device_class): DeviceResult.model_validate(row.document) for row in rows}


def baselines(session: Session, cells: Sequence[Cell]) -> dict[Key, BaselineResult]:
    """The stored eager baseline of each (cell, class), as its validated document."""
    rows = repository.baselines_of_cells(session, [cell.id for cell in cells])
    return {(row.cell_id, row.device_class): BaselineResult.model_validate(row.document) for row in rows}


def shown_classes(session: Session, sweep_id: int, asked: Sequence[str]) -> list[str]:
    """The device classes a sweep's cells get a column for: those the sweep asked for, then every other
    class with a stored run of one of its cells (an offline host's import: ``sweep bundles --class``
    needs no class in the sweep), by name."""
    stored = repository.run_classes_of_sweep(session, sweep_id)
    return [*asked, *(name for name in stored if name not in asked)]


def _input(
    name: str,
    run: DeviceRun | None,
    timer: DeviceBaseline | None,
    *,
    baseline_waits: bool,
    job: DeviceJob | None,
    enrolled: bool,
) -> DeviceInput:
    """One class's input from its stored run and baseline rows (their documents validated)."""
    return DeviceInput(
        device_class=name,
        run=DeviceResult.model_validate(run.document) if run is not None else None,
        baseline=BaselineResult.model_validate(timer.document) if timer is not None else None,
        baseline_waits=baseline_waits,
        job=job,
        enrolled=enrolled,
        run_runner_id=run.runner_id if run is not None else None,
        run_reused=run is not None and run.source == REUSED_SOURCE,
        baseline_runner_id=timer.runner_id if timer is not None else None,
    )


def device_inputs(
    session: Session, cells: Sequence[Cell], classes: Sequence[str]
) -> dict[int, list[DeviceInput]]:
    """Cell id -> one input per device class in ``classes`` (the sweep's, ``shown_classes``), in that
    order."""
    ids = [cell.id for cell in cells]
    run_rows = {(r.cell_id, r.device_class): r for r in repository.runs_of_cells(session, ids)}
    timer_rows = {(b.cell_id, b.device_class): b for b in repository.baselines_of_cells(session, ids)}
    enrolled = repository.enrolled_classes(session)
    inputs: dict[int, list[DeviceInput]] = {}
    for cell in cells:
        inputs[cell.id] = []
        for name in classes:
            timer, runner = _job(cell, JobKind.BASELINE, name), _job(cell, JobKind.DEVICE_RUN, name)
            inputs[cell.id].append(
                _input(
                    name,
                    run_rows.get((cell.id, name)),
                    timer_rows.get((cell.id, name)),
                    baseline_waits=timer is not None and timer.status in PENDING_STATUSES,
                    job=DeviceJob(runner.status.value, cause(runner)) if runner is not None else None,
                    enrolled=name in enrolled,
                )
            )
    return inputs


def candidate_inputs(
    session: Session, cells: Sequence[Cell], classes: Sequence[str]
) -> dict[int, list[DeviceInput]]:
    """Cell id -> one input per candidate-fix run beside the run its class shows (``device_inputs``), in
    ``classes``: a runtime built with upstream pull requests applied, timed against the class's baseline."""
    ids = [cell.id for cell in cells]
    timer_rows = {(b.cell_id, b.device_class): b for b in repository.baselines_of_cells(session, ids)}
    found: dict[int, list[DeviceInput]] = {cell.id: [] for cell in cells}
    for row in repository.candidate_runs_of_cells(session, ids):
        if row.device_class in classes:
            timer = timer_rows.get((row.cell_id, row.device_class))
            found[row.cell_id].append(
                _input(row.device_class, row, timer, baseline_waits=False, job=None, enrolled=True)
            )
    return found
