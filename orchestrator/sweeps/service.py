"""Sweeps: validate and expand into cells and jobs, cancel. Their views and the cells' are
``public_views``, their summaries counted in the database ``summaries``, pages of cells ``pages``."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from coverfarm import backends, device_classes, workarounds
from coverfarm.result import Options
from coverfarm.settings import Settings
from orchestrator.errors import Invalid, NotFound
from orchestrator.events.repository import emit
from orchestrator.jobs import sending
from orchestrator.jobs import service as jobs
from orchestrator.jobs.repository import pending_of_sweep
from orchestrator.models import Cell, Sweep, utcnow
from orchestrator.sweeps import repository
from orchestrator.sweeps.schemas import SweepCreate


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
    for name in body.options.workarounds:
        if not any(workarounds.for_backend([name], backend) for backend in body.backends):
            errors.append(
                {
                    "loc": ["body", "options", "workarounds"],
                    "msg": f"workaround {name} is for {', '.join(workarounds.WORKAROUNDS[name].backends)} "
                    "cells: the sweep's backends have none",
                    "type": "value_error",
                    "input": name,
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
        workarounds=body.options.workarounds,
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
            update={
                "force_fp16": body.options.force_fp16 and backends.takes_force_fp16(backend),
                "workarounds": workarounds.for_backend(body.options.workarounds, backend),
            }
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
