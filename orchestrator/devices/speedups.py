"""The speed-up of each device cell, decided from its two stored documents (``coverfarm.baseline.speedup``).

A device run and its eager baseline are stored apart (``DeviceRun``, ``DeviceBaseline``), each with the
runner that reported it. The speed-up (eager figure over device figure, with its interval from both
sides' replicas) exists only when both were timed by that same runner on the same host under the host's
timing lock, over the same inputs; otherwise ``Speedup.reasons`` says why, for the grid and the report
to show, as it says why a speed-up's interval is wide. No torch.
"""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.orm import Session

from coverfarm.baseline import BaselineResult, Speedup, speedup
from coverfarm.device_result import DeviceResult
from orchestrator.devices import repository
from orchestrator.models import DeviceBaseline, DeviceRun, Sweep


def speedup_of(run: DeviceRun, baseline: DeviceBaseline | None) -> Speedup:
    try:
        device = DeviceResult.model_validate(run.document or {})
    except ValidationError:
        return Speedup(allowed=False, reasons=["the device result is not a readable document"])
    eager = None
    if baseline is not None:
        try:
            eager = BaselineResult.model_validate(baseline.document or {})
        except ValidationError:
            return Speedup(allowed=False, reasons=["the eager baseline is not a readable document"])
    return speedup(eager, device, baseline.runner_id if baseline is not None else None, run.runner_id)


def sweep_speedups(session: Session, sweep: Sweep) -> dict[tuple[str, str], dict[str, Speedup]]:
    """(policy, backend) -> {device class: its speed-up verdict}, for every device run of the sweep."""
    cells = {cell.id: cell for cell in sweep.cells}
    baselines = {(b.cell_id, b.device_class): b for b in repository.baselines_of_cells(session, list(cells))}
    found: dict[tuple[str, str], dict[str, Speedup]] = {}
    for run in repository.runs_of_cells(session, list(cells)):
        cell = cells[run.cell_id]
        verdict = speedup_of(run, baselines.get((run.cell_id, run.device_class)))
        found.setdefault((cell.policy, cell.backend), {})[run.device_class] = verdict
    return found
