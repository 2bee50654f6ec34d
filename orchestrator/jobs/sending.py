"""Jobs made and sent: a cell's lower jobs with their stage and route (``create_lower``, ``create_first``;
``lower_queue_of``, routed again at every send), device and baseline jobs with their kind and device
class (``create_device_job``, ``create_device_jobs``, a stored device row copied instead where a reused
cell may take it), why a queued lower job waits (``waiting``), and the send after commit (``_send``).
Services flush, never commit; callers wrap them in ``orchestrator.db.unit_of_work``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import device_classes, routes
from coverfarm.queues import DeviceMessage, LowerMessage, baseline_queue, device_queue
from coverfarm.settings import Settings
from orchestrator.db import Outgoing, enqueue_after_commit
from orchestrator.jobs import repository
from orchestrator.jobs.cell_state import refresh_cell
from orchestrator.models import Cell, DeviceBaseline, DeviceRun, Job, JobKind, JobStatus
from orchestrator.workers.service import Live

log = logging.getLogger(__name__)

STAGE_LOWER = "lower"
STAGE_LOWER_LONG = "lower.long"
LOWER_STAGES = (STAGE_LOWER, STAGE_LOWER_LONG)
# A device job's stage, its name in its cell: its kind's prefix and its device class (``stage_of``).
STAGE_PREFIX = {JobKind.DEVICE_RUN: "run:", JobKind.BASELINE: "baseline:"}


def create(
    session: Session, cell: Cell, stage: str, queue: str, timeout_s: float, memory_gb: float | None = None
) -> Job:
    """A queued lower job on ``stage`` (``STAGE_LOWER`` or ``STAGE_LOWER_LONG``), sent after commit. Its
    ``queue`` is its route's (``lower_queue_of``) whatever is passed: ``create_lower`` says so."""
    if stage not in LOWER_STAGES:
        raise ValueError(f"{stage!r} is not a lower job's stage ({', '.join(LOWER_STAGES)})")
    return _create(session, cell, JobKind.LOWER, None, stage, queue, timeout_s, memory_gb)


def create_device_job(
    session: Session, cell: Cell, kind: JobKind, device_class: str, queue: str, timeout_s: float
) -> Job:
    """A queued device job of ``kind`` (a bundle run or its eager baseline) on ``device_class``, sent
    after commit."""
    stage = stage_of(kind, device_class)
    return _create(session, cell, kind, device_class, stage, queue, timeout_s, None)


def _create(
    session: Session,
    cell: Cell,
    kind: JobKind,
    device_class: str | None,
    stage: str,
    queue: str,
    timeout_s: float,
    memory_gb: float | None,
) -> Job:
    # New jobs start queued; every later status change goes through transitions.transition.
    job = Job(
        cell=cell,
        kind=kind,
        device_class=device_class,
        stage=stage,
        queue=queue,
        timeout_s=timeout_s,
        memory_gb=memory_gb,
        status=JobStatus.QUEUED,
        attempt=0,
    )
    session.add(job)
    session.flush()
    if kind is JobKind.LOWER and len(cell.jobs) > 1:
        # A new cell's first job leaves it queued, as it was made; a re-run changes what it shows.
        refresh_cell(session, cell.id)
    _send(session, job)
    return job


def create_lower(
    session: Session, cell: Cell, stage: str, timeout_s: float, memory_gb: float | None = None
) -> Job:
    """A lower job (``STAGE_LOWER`` or ``STAGE_LOWER_LONG``) of ``cell``, routed to its stack's queue
    and, with ``memory_gb``, to a worker of that memory class."""
    long = stage == STAGE_LOWER_LONG
    queue = routes.lower_queue(cell.stack, long=long, memory_gb=routes.memory_class(memory_gb))
    return create(session, cell, stage, queue, timeout_s, memory_gb)


def lower_queue_of(job: Job) -> str:
    """The queue a lower job goes to (``coverfarm.routes``): its cell's stack, whether it is the longer
    re-run of a slow result, and the memory class of its need."""
    long = job.stage == STAGE_LOWER_LONG
    return routes.lower_queue(job.cell.stack, long=long, memory_gb=routes.memory_class(job.memory_gb))


def waiting(job: Job, live: Live) -> str | None:
    """Why a queued lower job waits when no online worker takes its queue (no worker of its stack, or
    none of its memory class); None when one does, and for running, ended and device jobs."""
    if job.status is not JobStatus.QUEUED or job.kind is not JobKind.LOWER or job.queue in live.queues:
        return None
    return routes.waiting_reason(job.cell.stack, job.memory_gb, live.stacks)


def create_first(session: Session, cells: list[Cell], timeout_s: float) -> list[Job]:
    """The first lower job of each of a new sweep's ``cells``, all written in one flush with the cells
    (an INSERT per table, not two per cell), each sent after the transaction commits."""
    made = [
        Job(
            cell=cell,
            kind=JobKind.LOWER,
            stage=STAGE_LOWER,
            queue=routes.lower_queue(cell.stack, long=False, memory_gb=None),
            timeout_s=timeout_s,
            status=JobStatus.QUEUED,
            attempt=0,
        )
        for cell in cells
    ]
    session.add_all(made)
    session.flush()
    for job in made:
        _send(session, job)
    return made


def stage_of(kind: JobKind, device_class: str) -> str:
    """The stage of a device job of ``kind`` on ``device_class``: ``run:<class>`` or ``baseline:<class>``."""
    return f"{STAGE_PREFIX[kind]}{device_class}"


def _send(session: Session, job: Job) -> None:
    # Stamped again once the broker has the message (orchestrator.db.mark_sent): until then the job is
    # owed a send, which the reconciler makes should this one fail.
    job.sent_at = None
    message: LowerMessage | DeviceMessage
    if job.device_class is not None:
        message = DeviceMessage(job_id=job.id, device_class=job.device_class)
    else:
        # Routed at every send, the reconciler's included, from what the jobs table holds: a job stored
        # under an older route (or a broker that lost it) goes where the routing says now.
        job.queue = lower_queue_of(job)
        message = LowerMessage(job_id=job.id, policy=job.cell.policy, backend=job.cell.backend)
    enqueue_after_commit(session, Outgoing(message, job.queue, job.timeout_s))


@dataclass(frozen=True)
class DeviceReuse:
    """What a reused cell of a ``reuse_device`` sweep takes stored device results by: its reuse key,
    its bundle, and which statuses (None: any, the sweep's ``reuse_unfinished``; else ok only)."""

    key: str
    bundle_sha256: str
    statuses: tuple[str, ...] | None


def create_device_jobs(
    session: Session, cell: Cell, settings: Settings, reuse: DeviceReuse | None = None
) -> list[Job]:
    """One device job per device class of the cell's sweep that runs the cell's backend, and beside it a
    baseline job (eager PyTorch on that class's host CPU) when a runner of the class can time one.

    With ``reuse``, a class whose run (or baseline) is stored for a cell of the same reuse key and bundle
    gets a copy of it (``repository.copy_device_row``) instead of a job."""
    created = []
    timers = repository.baseline_classes(session)
    for name in cell.sweep.device_classes:
        if device_classes.backend_of(name) != cell.backend:
            continue
        timeout = settings.device_timeout_s
        if not _reused_device_row(session, cell, DeviceRun, name, reuse):
            queue = device_queue(name, cell.stack)
            created.append(create_device_job(session, cell, JobKind.DEVICE_RUN, name, queue, timeout))
        if not _reused_device_row(session, cell, DeviceBaseline, name, reuse) and name in timers:
            queue = baseline_queue(name)
            created.append(create_device_job(session, cell, JobKind.BASELINE, name, queue, timeout))
    return created


def _reused_device_row(
    session: Session,
    cell: Cell,
    model: type[DeviceRun] | type[DeviceBaseline],
    device_class: str,
    reuse: DeviceReuse | None,
) -> bool:
    """Copy the stored row of ``model`` that ``reuse`` finds for ``device_class`` onto ``cell``; False
    when there is none to reuse (or no reuse was asked for)."""
    if reuse is None:
        return False
    found = repository.stored_device_row(
        session, model, reuse.key, device_class, reuse.statuses, reuse.bundle_sha256
    )
    if found is None or found.cell_id == cell.id:
        return False
    repository.copy_device_row(session, found, cell.id)
    what = model.__tablename__
    log.info("cell %s: reused the %s row on %s of cell %s", cell.id, what, device_class, found.cell_id)
    return True
