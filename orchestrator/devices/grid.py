"""The device columns of a sweep, as the tracker writes them: ``device_cells(session, sweep)``.

Per (policy, backend) and per device class of the sweep: "✓ 12.3 ms" (the median per action chunk, with
"(4.1×)" once the eager-PyTorch baseline timed on that class's host CPU is stored, its median over the
device's, and "(baseline ⏳)" while that baseline job is still to run), "❌ cause", "⏳" while the bundle or
its run is on the way, "no device" when no runner of that class is enrolled, "-" where the class does not
run the cell's backend or the cell has no bundle to run.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from coverfarm import device_classes
from orchestrator.devices import repository
from orchestrator.jobs.service import baseline_stage, device_class_of, device_stage
from orchestrator.models import PENDING_STATUSES, Cell, DeviceBaseline, DeviceRun, JobStatus, Sweep

DONE = "✓"
FAILED = "❌"
PENDING = "⏳"
NO_DEVICE = "no device"
NOT_APPLICABLE = "-"


def run_text(run: DeviceRun, baseline: DeviceBaseline | None = None, baseline_waits: bool = False) -> str:
    if run.status == "ok":
        if run.median_ms is None:
            return DONE
        text = f"{DONE} {run.median_ms:.3g} ms" if run.median_ms < 100 else f"{DONE} {run.median_ms:.0f} ms"
        if baseline is not None and baseline.status == "ok" and baseline.median_ms and run.median_ms > 0:
            text += f" ({baseline.median_ms / run.median_ms:.1f}×)"
        elif baseline is None and baseline_waits:
            text += f" (baseline {PENDING})"
        return text
    cause = (run.error or "failed").strip().splitlines()[0]
    return f"{FAILED} {cause}"


def _cell_text(
    cell: Cell, device_class: str, run: DeviceRun | None, baseline: DeviceBaseline | None, enrolled: set[str]
) -> str:
    if device_classes.backend_of(device_class) != cell.backend:
        return NOT_APPLICABLE
    if run is not None:
        timer = next((job for job in cell.jobs if job.stage == baseline_stage(device_class)), None)
        return run_text(run, baseline, timer is not None and timer.status in PENDING_STATUSES)
    device_job = next((job for job in cell.jobs if job.stage == device_stage(device_class)), None)
    cpu_jobs = [job for job in cell.jobs if device_class_of(job) is None]
    if device_job is None and (not cpu_jobs or cpu_jobs[-1].status in PENDING_STATUSES):
        device_waits = True  # the bundle is still being made
    elif device_job is None:
        return NOT_APPLICABLE  # no bundle: nothing to run
    elif device_job.status in PENDING_STATUSES:
        device_waits = True
    elif device_job.status is JobStatus.CANCELLED:
        return NOT_APPLICABLE
    else:
        cause = (device_job.error or device_job.status_reason or "failed").strip().splitlines()[-1]
        return f"{FAILED} {cause}"
    return PENDING if device_waits and device_class in enrolled else NO_DEVICE


def device_cells(session: Session, sweep: Sweep) -> dict[tuple[str, str], dict[str, str]]:
    """(policy, backend) → {device class: the tracker's device cell text}, for the sweep's classes."""
    runs = {
        (run.cell_id, run.device_class): run
        for run in repository.runs_of_cells(session, [c.id for c in sweep.cells])
    }
    cell_ids = [c.id for c in sweep.cells]
    baselines = {(b.cell_id, b.device_class): b for b in repository.baselines_of_cells(session, cell_ids)}
    enrolled = repository.enrolled_classes(session)
    return {
        (cell.policy, cell.backend): {
            name: _cell_text(cell, name, runs.get((cell.id, name)), baselines.get((cell.id, name)), enrolled)
            for name in sweep.device_classes
        }
        for cell in sweep.cells
    }
