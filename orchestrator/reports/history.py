"""A device cell's history across sweeps: the same cell is the same policy, backend, options (the stage
bound aside), device class and stack (the cell's named stack, the engine's versions that made the
bundle, the runtime that ran it), and its previous sweep is the latest earlier sweep with a successful
run of that same cell."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from coverfarm.device_result import LatencyStats
from coverfarm.latency_interval import LatencyInterval, interval_of
from orchestrator.devices import repository
from orchestrator.models import Cell, DeviceRun
from orchestrator.reports.documents import latest_document


@dataclass(frozen=True)
class Timed:
    """One sweep's run of a cell on a device class: its latency's figure and interval."""

    sweep_id: int
    interval: LatencyInterval


def interval_of_run(run: DeviceRun) -> LatencyInterval | None:
    """The run's latency judged from its stored replicas; None when it has no readable latency."""
    latency = (run.document or {}).get("latency")
    if not isinstance(latency, dict):
        return None
    try:
        return interval_of(LatencyStats.model_validate(latency))
    except ValidationError:
        return None


def stack(cell: Cell, run: DeviceRun) -> dict[str, Any]:
    """What software made and ran the cell's numbers: the engine's versions and the device runtime."""
    doc = latest_document(cell)
    document = run.document or {}
    probe = document.get("probe") or {}
    return {
        "versions": doc.versions if doc is not None else {},
        "runtime": document.get("runtime"),
        "executorch_runtime": (probe.get("executorch") or {}).get("version"),
        "native_runtime": (probe.get("native_runtime") or {}).get("path"),
    }


def key(cell: Cell, run: DeviceRun) -> str:
    options = {name: value for name, value in (cell.options or {}).items() if name != "timeout_s"}
    return json.dumps(
        [cell.policy, cell.backend, options, run.device_class, cell.stack, stack(cell, run)],
        sort_keys=True,
        default=str,
    )


def timed(cell: Cell, run: DeviceRun) -> Timed | None:
    judged = interval_of_run(run)
    return Timed(cell.sweep_id, judged) if judged is not None else None


def previous(session: Session, cell: Cell, run: DeviceRun) -> tuple[Cell, DeviceRun] | None:
    """The same cell's run in the latest earlier sweep that has one, else None."""
    wanted = key(cell, run)
    for earlier, earlier_run in repository.earlier_runs(
        session, cell.policy, cell.backend, run.device_class, cell.sweep_id
    ):
        if key(earlier, earlier_run) == wanted and interval_of_run(earlier_run) is not None:
            return earlier, earlier_run
    return None
