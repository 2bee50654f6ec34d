"""What a candidate upstream fix changes on the device: each run of a runtime built with pull requests
applied (``RuntimeIdentity.patches``), beside the run its cell and class show, the release runtime's
where there is one; for the report's section and the cell's details."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import tracker
from coverfarm.cell_build import Column, DeviceInput
from coverfarm.tracker import markdown_table
from orchestrator.devices.grid import candidate_inputs, shown_classes
from orchestrator.models import Cell, Sweep
from orchestrator.sweeps.cell_views import view_of

HEADER = ["Policy", "Device class", "Shown (release runtime)", "With the candidate fix"]


@dataclass(frozen=True)
class CandidateRun:
    policy: str
    device_class: str
    patches: tuple[str, ...]
    device: DeviceInput  # the candidate run, with its class's baseline
    column: Column  # the candidate run as a device column


def candidate_column(cell: Cell, device: DeviceInput) -> Column:
    """A candidate run's column, worded as the grid words the run its class shows."""
    return view_of(cell, [device]).devices[device.device_class]


def cell_candidates(session: Session, cells: Sequence[Cell], classes: Sequence[str]) -> list[CandidateRun]:
    """The candidate-fix runs of ``cells`` on ``classes``, by policy, class and patches."""
    by_id = {cell.id: cell for cell in cells}
    found = []
    for cell_id, devices in candidate_inputs(session, cells, classes).items():
        for device in devices:
            identity = device.run.runtime_identity if device.run is not None else None
            patches = tuple(identity.patches) if identity is not None else ()
            column = candidate_column(by_id[cell_id], device)
            found.append(CandidateRun(by_id[cell_id].policy, device.device_class, patches, device, column))
    return sorted(found, key=lambda c: (c.policy, c.device_class, c.patches))


def sweep_candidates(
    session: Session, sweep: Sweep, backend: str, stack: str | None = None
) -> list[CandidateRun]:
    """The candidate-fix runs of the backend's cells (of one stack's, when given)."""
    cells = [cell for cell in sweep.cells if cell.backend == backend and stack in (None, cell.stack)]
    return cell_candidates(session, cells, shown_classes(session, sweep.id, sweep.device_classes))


def candidate_section(rows: list[tuple[CandidateRun, Column | None]]) -> list[str]:
    """The section's Markdown lines, each candidate run beside the column its class shows; none
    without a candidate run."""
    if not rows:
        return []
    table = [
        [
            run.policy,
            run.device_class,
            tracker.device_text(shown) if shown is not None else "",
            tracker.device_text(run.column),
        ]
        for run, shown in rows
    ]
    return [
        "",
        "#### What a candidate fix changes on the device",
        "",
        "Runs of a runtime built with upstream pull requests applied (a candidate fix, not a release), "
        "beside the run the cell shows for that class.",
        "",
        markdown_table(HEADER, table),
    ]
