"""A sweep and its cells as the API gives them, from rows loaded with their jobs and results
(``cell_view``, ``sweep_view``, ``summary_view``), and what a cell's CPU jobs say: its state by the rule
(``cell_state``), why its queued job waits (``waiting``), and what its view takes of them (``cpu_jobs``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from coverfarm import routes
from coverfarm.cell_build import CpuJobs
from coverfarm.result import Options
from orchestrator.jobs import cell_state as derived
from orchestrator.jobs import sending
from orchestrator.jobs import service as jobs
from orchestrator.models import PENDING_STATUSES, Cell, Job, JobKind, JobStatus, Sweep
from orchestrator.sweeps.schemas import (
    CellPublic,
    JobPublic,
    ResultPublic,
    SweepOptions,
    SweepPublic,
    SweepSummary,
)
from orchestrator.sweeps.state import sweep_state
from orchestrator.workers.service import Live


def cell_state(cell: Cell) -> tuple[JobStatus, bool]:
    """(state, pending) of a loaded cell: ``jobs.cell_state.cell_state`` over its CPU jobs (device jobs
    have their own columns and do not change the cell's state)."""
    cpu = [job for job in cell.jobs if job.kind is JobKind.LOWER]
    return derived.cell_state(
        cpu[-1].status if cpu else None, any(job.status is JobStatus.SLOW for job in cpu)
    )


def _latest_cpu_job(cell: Cell) -> Job | None:
    cpu = [job for job in cell.jobs if job.kind is JobKind.LOWER]
    return cpu[-1] if cpu else None


def waiting(cell: Cell, live: Live | None) -> str | None:
    """Why the cell's queued lower job waits for a worker (``jobs.sending.waiting``); None when a live
    worker takes it, when nothing is queued, and when ``live`` is not known."""
    latest = _latest_cpu_job(cell)
    return sending.waiting(latest, live) if latest is not None and live is not None else None


def cpu_jobs(cell: Cell, live: Live | None = None) -> CpuJobs:
    """What the cell's CPU jobs say, for its view: the state rule's answer as the cell's row keeps it
    (``jobs.cell_state.refresh_cell``), and its latest job (with ``live``, the online workers, also
    whether it waits for one)."""
    state, pending = cell.state, cell.pending
    latest = _latest_cpu_job(cell)
    running = latest is not None and latest.status is JobStatus.RUNNING
    memory = routes.memory_class(latest.memory_gb) if latest is not None else None
    return CpuJobs(
        pending=pending,
        cancelled=state is JobStatus.CANCELLED,
        running=running,
        since=latest.started_at if latest is not None and running else None,
        cause=jobs.cause(latest) if latest is not None else None,
        waiting=waiting(cell, live),
        memory_class_gb=memory if pending else None,
    )


def cell_view(cell: Cell, live: Live | None = None) -> CellPublic:
    """The cell as the API gives it: its state as its row keeps it, as the grid and the report read it,
    its jobs and its latest result."""
    results = [job.result for job in cell.jobs if job.result is not None]
    return CellPublic(
        id=cell.id,
        sweep_id=cell.sweep_id,
        policy=cell.policy,
        backend=cell.backend,
        stack=cell.stack,
        options=cell.options,
        state=cell.state,
        pending=cell.pending,
        waiting=waiting(cell, live),
        result=ResultPublic.model_validate(results[-1]) if results else None,
        jobs=[JobPublic.model_validate(job) for job in cell.jobs],
    )


def _summary_fields(sweep: Sweep, cells: list[CellPublic]) -> dict[str, Any]:
    counts = Counter(cell.state.value for cell in cells)
    device_pending = any(
        job.status in PENDING_STATUSES
        for cell in sweep.cells  # loaded with their jobs: ``cells`` are their views
        for job in cell.jobs
        if job.kind is not JobKind.LOWER
    )
    pending = device_pending or any(cell.pending for cell in cells)
    return {
        "id": sweep.id,
        "created_at": sweep.created_at,
        "options": SweepOptions.model_validate(
            {
                "constant_prop": sweep.constant_prop,
                "lowering": sweep.lowering,
                # weights has no sweep column: every cell of a sweep records the same one
                "weights": cells[0].options.weights if cells else Options().weights,
                # nor has force_fp16, which only the Vulkan cells record
                "force_fp16": any(cell.options.force_fp16 for cell in cells),
                "etrecord": any(cell.options.etrecord for cell in cells),
                "workarounds": sorted({name for cell in cells for name in cell.options.workarounds}),
            }
        ),
        "timeout_s": sweep.timeout_s,
        "policies": list(dict.fromkeys(cell.policy for cell in cells)),
        "backends": list(dict.fromkeys(cell.backend for cell in cells)),
        "stacks": list(sweep.stacks),
        "device_classes": list(sweep.device_classes),
        "fresh": sweep.fresh,
        "reuse_unfinished": sweep.reuse_unfinished,
        "reuse_device": sweep.reuse_device,
        "state": sweep_state(sweep.cancelled_at is not None, pending),
        "counts": dict(sorted(counts.items())),
        "cancelled_at": sweep.cancelled_at,
    }


def summary_view(sweep: Sweep) -> SweepSummary:
    return SweepSummary(**_summary_fields(sweep, [cell_view(cell) for cell in sweep.cells]))


def sweep_view(sweep: Sweep, live: Live | None = None) -> SweepPublic:
    """The sweep with its cells; with ``live`` (``workers.service.live``) each waiting cell says why."""
    cells = [cell_view(cell, live) for cell in sweep.cells]
    return SweepPublic(**_summary_fields(sweep, cells), cells=cells)
