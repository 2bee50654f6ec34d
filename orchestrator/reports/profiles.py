"""Where the time goes: the report's section on the device cells that have a profile run.

Each profiled cell (a device run whose result carries ``profile``, ``coverfarm/profile.py``) gets the
split of its profiled chunk (each delegate, the CPU-left ops, the runtime between instructions, the
hand-over between programs) and its top ops by time, each CPU-left op with its blocker groups (op,
reason) from the cell's result document. The figures are the profile's, taken with the event tracer on:
never the cell's latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import tracker
from coverfarm.profile import ProfileRun
from coverfarm.result import Blocker
from coverfarm.tracker import markdown_table
from orchestrator.devices.grid import runs
from orchestrator.models import Cell, Sweep
from orchestrator.sweeps.cell_views import latest_document


@dataclass(frozen=True)
class CellProfile:
    policy: str
    device_class: str
    profile: ProfileRun
    blockers: list[Blocker]


def sweep_profiles(
    session: Session, sweep: Sweep, backend: str, stack: str | None = None
) -> list[CellProfile]:
    """The profiles of the backend's cells (of one stack's, when given)."""
    return cell_profiles(
        session, [cell for cell in sweep.cells if cell.backend == backend and stack in (None, cell.stack)]
    )


def cell_profiles(session: Session, cells: Sequence[Cell]) -> list[CellProfile]:
    """The profile run of each device run of ``cells`` that has one, by policy and device class, each
    with its cell's blocker groups."""
    by_id = {cell.id: cell for cell in cells}
    found = []
    for (cell_id, device_class), run in runs(session, cells).items():
        if run.profile is None:
            continue
        doc = latest_document(by_id[cell_id])
        found.append(
            CellProfile(by_id[cell_id].policy, device_class, run.profile, doc.blockers if doc else [])
        )
    return sorted(found, key=lambda p: (p.policy, p.device_class))


def profile_section(profiles: list[CellProfile]) -> list[str]:
    """The section's Markdown lines; none without a profiled cell."""
    if not profiles:
        return []
    lines = [
        "",
        "#### Where the time goes",
        "",
        "Each profiled device cell's action chunk, run once more with a runtime built with the event tracer "
        "on, apart from its timed runs (these milliseconds are not its latency). CPU-left ops name their "
        "blocker group.",
    ]
    for cell in profiles:
        run = cell.profile
        lines += ["", f"**{cell.policy}** on {cell.device_class}, profiled by {run.runtime}:"]
        if run.status != "ok":
            lines += ["", f"profile failed: {run.error}"]
            continue
        summary = run.summary
        if summary is None:
            lines += ["", f"ETDumps stored, not read: {run.summary_note or 'no summary'}"]
            continue
        lines += ["", tracker.profile_line(summary), ""]
        lines.append(markdown_table(["Part", "Time", "Share"], tracker.profile_split(summary)))
        if run.handover_note:
            lines += ["", f"Hand-over {run.handover_note}."]
        if summary.top_ops:
            lines += ["", f"Top {len(summary.top_ops)} ops by time:", ""]
            lines.append(
                markdown_table(
                    ["Op", "Where", "Time", "Calls", "Blocker group"],
                    tracker.profile_op_rows(summary, cell.blockers),
                )
            )
    return lines
