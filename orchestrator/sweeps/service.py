"""Sweeps: validate and expand into cells and jobs, cancel, and the views of their state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from coverfarm import backends, device_classes, routes
from coverfarm.cell_build import CpuJobs
from coverfarm.result import Options
from coverfarm.settings import Settings
from orchestrator.errors import Invalid, NotFound
from orchestrator.events.repository import emit
from orchestrator.jobs import cell_state as derived
from orchestrator.jobs import sending
from orchestrator.jobs import service as jobs
from orchestrator.jobs.repository import pending_of_sweep
from orchestrator.models import PENDING_STATUSES, Cell, Job, JobKind, JobStatus, Sweep, utcnow
from orchestrator.sweeps import repository
from orchestrator.sweeps.schemas import (
    BackendColumn,
    CellBrief,
    CellPage,
    CellPublic,
    JobPublic,
    ResultBrief,
    ResultPublic,
    SweepCreate,
    SweepOptions,
    SweepOverview,
    SweepPublic,
    SweepSummary,
)
from orchestrator.sweeps.state import sweep_state
from orchestrator.workers.service import Live


def _check(body: SweepCreate, settings: Settings) -> None:
    errors: list[dict[str, Any]] = []
    for field, kind, names, known in (
        ("policies", "policy", body.policies, settings.policies),
        ("backends", "backend", body.backends, settings.backends),
    ):
        for index, name in enumerate(names):
            if name not in known:
                errors.append(
                    {
                        "loc": ["body", field, index],
                        "msg": f"unknown {kind} {name!r}; known: {', '.join(known)}",
                        "type": "value_error",
                        "input": name,
                    }
                )
    for index, name in enumerate(body.device_classes):
        try:
            device_classes.check(name, settings.backends)
        except ValueError as error:
            errors.append(
                {
                    "loc": ["body", "device_classes", index],
                    "msg": str(error),
                    "type": "value_error",
                    "input": name,
                }
            )
    if body.options.force_fp16 and not any(backends.takes_force_fp16(b) for b in body.backends):
        errors.append(
            {
                "loc": ["body", "options", "force_fp16"],
                "msg": "force_fp16 is a Vulkan partitioner option: the sweep's backends need vulkan",
                "type": "value_error",
                "input": True,
            }
        )
    if body.timeout_s is not None and not 1 <= body.timeout_s < settings.long_timeout_s:
        errors.append(
            {
                "loc": ["body", "timeout_s"],
                "msg": f"timeout_s must be at least 1 and below the slow re-run's bound, "
                f"{settings.long_timeout_s:g} s",
                "type": "value_error",
                "input": body.timeout_s,
            }
        )
    if errors:
        raise Invalid(errors)


def create(session: Session, settings: Settings, body: SweepCreate) -> Sweep:
    _check(body, settings)
    timeout_s = body.timeout_s if body.timeout_s is not None else settings.stage_timeout_s
    sweep = Sweep(
        constant_prop=body.options.constant_prop,
        lowering=body.options.lowering,
        timeout_s=timeout_s,
        device_classes=body.device_classes,
        fresh=body.fresh,
        reuse_unfinished=body.reuse_unfinished,
        reuse_device=body.reuse_device,
        stacks=body.stacks,
        policies=body.policies,
        backends=body.backends,
        weights=body.options.weights,
        force_fp16=body.options.force_fp16,
        etrecord=body.options.etrecord,
    )
    session.add(sweep)
    session.flush()
    options = Options(
        constant_prop=body.options.constant_prop,
        lowering=body.options.lowering,
        weights=body.options.weights,
        timeout_s=timeout_s,
        etrecord=body.options.etrecord,
    )
    by_backend = {
        backend: options.model_copy(
            update={"force_fp16": body.options.force_fp16 and backends.takes_force_fp16(backend)}
        )
        for backend in body.backends
    }
    cells = []
    for policy in body.policies:
        for backend in body.backends:
            cell_options = by_backend[backend].model_dump(mode="json")
            for stack in body.stacks:
                # Each first job is routed to its stack's queue (coverfarm.routes); with no live worker
                # of the stack it waits there, and its view says so.
                cell = Cell(sweep=sweep, policy=policy, backend=backend, stack=stack, options=cell_options)
                session.add(cell)
                cells.append(cell)
    sending.create_first(session, cells, timeout_s)
    emit(session, "sweep", sweep_id=sweep.id, payload={"state": "created", "cells": len(sweep.cells)})
    return sweep


def get(session: Session, sweep_id: int, *, lock: bool = False) -> Sweep:
    sweep = repository.get_sweep(session, sweep_id, lock=lock)
    if sweep is None:
        raise NotFound("sweep", sweep_id)
    return sweep


def cancel(session: Session, sweep_id: int) -> Sweep:
    sweep = get(session, sweep_id, lock=True)
    if sweep.cancelled_at is None:
        sweep.cancelled_at = utcnow()
        emit(session, "sweep", sweep_id=sweep.id, payload={"state": "cancelled"})
    for job_id in pending_of_sweep(session, sweep.id):
        jobs.cancel(session, job_id, "sweep cancelled")
    session.flush()
    session.expire_all()
    return get(session, sweep_id)


def get_cell(session: Session, cell_id: int) -> Cell:
    cell = repository.get_cell(session, cell_id)
    if cell is None:
        raise NotFound("cell", cell_id)
    return cell


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


def list_(session: Session, limit: int, offset: int) -> list[SweepSummary]:
    """A page of sweep summaries, newest first.

    Counted in the database: a summary never loads a cell's jobs or result documents, so the list
    costs the same for a sweep of ten cells and one of ten thousand.
    """
    sweeps = repository.list_sweeps(session, limit, offset)
    return _light_summaries(session, sweeps)


def count(session: Session) -> int:
    return repository.count_sweeps(session)


def summary(session: Session, sweep_id: int) -> SweepSummary:
    """One sweep's summary, counted in the database like the list's (no cell loaded)."""
    sweep = repository.get_sweep_row(session, sweep_id)
    if sweep is None:
        raise NotFound("sweep", sweep_id)
    return _light_summaries(session, [sweep])[0]


def _light_summaries(session: Session, sweeps: Sequence[Sweep]) -> list[SweepSummary]:
    tallies = repository.tally(session, [sweep.id for sweep in sweeps])
    return [_light_summary(sweep, tallies[sweep.id]) for sweep in sweeps]


def _light_summary(sweep: Sweep, tally: repository.SweepTally) -> SweepSummary:
    return SweepSummary(
        id=sweep.id,
        created_at=sweep.created_at,
        options=SweepOptions.model_validate(
            {
                "constant_prop": sweep.constant_prop,
                "lowering": sweep.lowering,
                "weights": sweep.weights,
                "force_fp16": sweep.force_fp16,
                "etrecord": sweep.etrecord,
            }
        ),
        timeout_s=sweep.timeout_s,
        policies=list(sweep.policies),
        backends=list(sweep.backends),
        stacks=list(sweep.stacks),
        device_classes=list(sweep.device_classes),
        fresh=sweep.fresh,
        reuse_unfinished=sweep.reuse_unfinished,
        reuse_device=sweep.reuse_device,
        state=sweep_state(sweep.cancelled_at is not None, tally.pending > 0),
        counts=dict(sorted(tally.counts.items())),
        cancelled_at=sweep.cancelled_at,
    )


def _whole(value: object) -> int | None:
    # Postgres sums a bigint column as numeric (a Decimal).
    return None if value is None else int(value)  # type: ignore[call-overload]


def _share(part: int | None, whole: int | None) -> float | None:
    return part / whole if part is not None and whole else None


def _add(total: int | None, value: object) -> int | None:
    """A sum over groups, None while no group had one (no measured cell counted it)."""
    whole = _whole(value)
    return total if whole is None else (total or 0) + whole


def overview(session: Session, sweep_id: int) -> SweepOverview:
    """The sweep's summary and per-backend columns, counted in the database from its cells' kept
    states: no cell, job or document is loaded, and the cells are counted once for both."""
    sweep = repository.get_sweep_row(session, sweep_id)
    if sweep is None:
        raise NotFound("sweep", sweep_id)
    tally = repository.SweepTally(pending=repository.device_pending(session, [sweep_id]).get(sweep_id, 0))
    # Per backend: cells, measured, exported (counts), then the sums of ops and MACs (None: none counted).
    sums: dict[str, list[int | None]] = {}
    for backend, state, pending, *counted in repository.cell_tally(session, sweep_id):
        tally.counts[state.value] = tally.counts.get(state.value, 0) + counted[0]
        tally.pending += counted[0] if pending else 0
        column = sums.setdefault(backend, [0, 0, 0, None, None, None, None])
        for index, value in enumerate(counted):
            column[index] = _add(column[index], value)
    columns = []
    order = {name: index for index, name in enumerate(sweep.backends)}  # the sweep's order (cell order)
    for backend in sorted(sums, key=lambda name: (order.get(name, len(order)), name)):
        cells, measured, exported, ops_on, ops, macs_on, macs = sums[backend]
        columns.append(
            BackendColumn(
                backend=backend,
                cells=cells or 0,
                measured=measured or 0,
                exported=exported or 0,
                ops_on_backend=ops_on,
                ops_total=ops,
                macs_on_backend=macs_on,
                macs_total=macs,
                ops_share=_share(ops_on, ops),
                macs_share=_share(macs_on, macs),
            )
        )
    return SweepOverview(**_light_summary(sweep, tally).model_dump(), columns=columns)


RESULT_COLUMNS = repository.RESULT_BRIEF_COLUMNS  # ResultBrief's fields (the page test holds them equal)


def cells_page(
    session: Session,
    sweep_id: int,
    offset: int,
    limit: int,
    policy: str | None = None,
    backend: str | None = None,
    state: JobStatus | None = None,
) -> CellPage:
    """One page of the sweep's cells in cell order, filtered, each with its latest result's columns
    but not its document (``url`` has it)."""
    if repository.get_sweep_row(session, sweep_id) is None:
        raise NotFound("sweep", sweep_id)
    total, rows = repository.cell_page(
        session, sweep_id, offset, limit, policy, backend, state.value if state is not None else None
    )
    cells = []
    for row in rows:
        cell_id, cell_policy, cell_backend, cell_stack, cell_state, pending, *result = row
        brief = (
            ResultBrief(**dict(zip(RESULT_COLUMNS, result, strict=True))) if result[0] is not None else None
        )
        cells.append(
            CellBrief(
                id=cell_id,
                policy=cell_policy,
                backend=cell_backend,
                stack=cell_stack,
                state=JobStatus(cell_state),
                pending=bool(pending),
                result=brief,
                url=f"/api/cells/{cell_id}",
            )
        )
    return CellPage(total=total, offset=offset, limit=limit, cells=cells)


def cells_of_rows(session: Session, sweep: SweepSummary, offset: int, limit: int) -> list[Cell]:
    """The stored cells of the sweep's policies ``offset`` to ``offset + limit`` (its rows, in cell
    order), each with its jobs and results: what a page of the grid shows."""
    policies = sweep.policies[offset : offset + limit]
    return list(repository.cells_of_policies(session, sweep.id, policies)) if policies else []


def cells_by_id(session: Session, sweep_id: int, cell_ids: Sequence[int]) -> list[Cell]:
    """Those of ``cell_ids`` that are cells of the sweep, with their jobs and results."""
    return list(repository.cells_by_id(session, sweep_id, cell_ids)) if cell_ids else []
