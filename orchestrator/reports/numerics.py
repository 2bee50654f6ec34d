"""Which op goes wrong: the report's section on the device cells that have a numerics run.

Each such cell (a device run whose result carries ``numerics``, ``coverfarm/numerics.py``) gets the
first op whose output departed from eager beyond the bundle's tolerance, with its error, and how the
error grew along the graph; the runtime Known-issues table gets a row per first departing op
(``orchestrator.reports.devices.runtime_issues``), whose one-op repro ``worker.repros.numerics`` builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import tracker
from coverfarm.numerics import NumericsRun
from coverfarm.tracker import markdown_table
from orchestrator.devices.grid import runs
from orchestrator.models import Cell, Sweep

TRIGGERS = {"wrong_output": "its output was wrong", "requested": "asked for"}
GROWTH_HEADER = ["Program", "Op", "Where", "Max abs error", "May be", "Judged"]


@dataclass(frozen=True)
class CellNumerics:
    policy: str
    device_class: str
    numerics: NumericsRun


def sweep_numerics(
    session: Session, sweep: Sweep, backend: str, stack: str | None = None
) -> list[CellNumerics]:
    """The numerics runs of the backend's cells (of one stack's, when given)."""
    return cell_numerics(
        session, [cell for cell in sweep.cells if cell.backend == backend and stack in (None, cell.stack)]
    )


def cell_numerics(session: Session, cells: Sequence[Cell]) -> list[CellNumerics]:
    """The numerics run of each device run of ``cells`` that has one, by policy and device class."""
    by_id = {cell.id: cell for cell in cells}
    found = [
        CellNumerics(by_id[cell_id].policy, device_class, run.numerics)
        for (cell_id, device_class), run in runs(session, cells).items()
        if run.numerics is not None
    ]
    return sorted(found, key=lambda n: (n.policy, n.device_class))


def run_heading(run: NumericsRun) -> str:
    return f"numerics run ({TRIGGERS[run.trigger]}) by {run.runtime}"


def numerics_section(cells: list[CellNumerics]) -> list[str]:
    """The section's Markdown lines; none without a numerics run."""
    if not cells:
        return []
    lines = [
        "",
        "#### Which op goes wrong",
        "",
        "Each program of the bundle run once more on its test case with its intermediate outputs "
        "captured, apart from the timed runs, and compared with eager's on the same inputs "
        "(`executorch.devtools.Inspector`, from the bundle's ETRecords). The first op whose output is "
        "outside the bundle's tolerance is named; the table shows how the error grows (each output whose "
        "error exceeds every one before it).",
    ]
    for cell in cells:
        run = cell.numerics
        lines += ["", f"**{cell.policy}** on {cell.device_class}, {run_heading(run)}:"]
        if run.status != "ok":
            lines += ["", f"numerics run failed: {run.error}"]
            continue
        summary = run.summary
        if summary is None:
            lines += ["", f"intermediate outputs captured, not compared: {run.summary_note or 'no summary'}"]
            continue
        lines += ["", tracker.numerics_line(summary) + ".", "", f"Captured: {summary.grain}."]
        if summary.pairing:
            lines += ["", f"Paired {summary.pairing}."]
        rows = tracker.numerics_rows(summary)
        if rows:
            lines += ["", markdown_table(GROWTH_HEADER, rows)]
    return lines
