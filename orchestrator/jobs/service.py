"""What happens to jobs: created and sent, started and finished by a worker, cancelled, re-queued.

Workers call ``start``/``finish``/``fail`` through the database directly (CPU workers are trusted,
inside the farm). Each of those is idempotent: a duplicated or late message, or a retried attempt,
never produces a second result or an impossible state. Services flush, never commit; callers wrap
them in ``orchestrator.db.unit_of_work``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from coverfarm import device_classes, routes
from coverfarm.queues import DeviceMessage, LowerMessage, baseline_queue, device_queue
from coverfarm.result import Options, ResultDocument, ReusedFrom, StageStatus, error_line, fake_weight_run
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from orchestrator.artifacts import repository as artifacts
from orchestrator.db import Outgoing, enqueue_after_commit
from orchestrator.jobs import repository
from orchestrator.jobs.cell_state import refresh_cell
from orchestrator.jobs.transitions import TERMINAL, lock_job, transition
from orchestrator.models import Cell, DeviceBaseline, DeviceRun, Job, JobAttempt, JobKind, JobStatus, utcnow
from orchestrator.workers import service as workers
from orchestrator.workers.service import Live

log = logging.getLogger(__name__)

STAGE_LOWER = "lower"
STAGE_LOWER_LONG = "lower.long"
LOWER_STAGES = (STAGE_LOWER, STAGE_LOWER_LONG)
# A device job's stage, its name in its cell: its kind's prefix and its device class (``stage_of``).
STAGE_PREFIX = {JobKind.DEVICE_RUN: "run:", JobKind.BASELINE: "baseline:"}
# A job attempt's outcome when it measured fake weights and its job went to a worker with more memory.
REQUEUED = "requeued"
# How long after a message's send its job may be stamped sent (``orchestrator.db.mark_sent``).
SEND_STAMP_MARGIN = timedelta(seconds=2)
DOC_STATUS = {
    StageStatus.OK: JobStatus.OK,
    StageStatus.SLOW: JobStatus.SLOW,
    StageStatus.FAILED: JobStatus.FAILED,
}


@dataclass(frozen=True)
class StartedJob:
    """What a worker needs to run one attempt of a job."""

    job_id: int
    attempt: int
    stage: str
    policy: str
    backend: str
    options: Options
    fresh: bool = False  # the sweep forces a run even where a stored result has the cell's reuse key
    reuse_unfinished: bool = False  # the sweep lets stored slow and failed results be reused too
    stack: str = DEFAULT_STACK  # the cell's stack (coverfarm.stacks)


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


def cause(job: Job) -> str | None:
    """Why the job ended as it did, in one line: its error's line (``error_line``), else its reason."""
    return error_line(job.error) or job.status_reason


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


AttemptAlive = Callable[[str | None, int | None], bool]


def start(
    session: Session,
    job_id: int,
    worker: str,
    settings: Settings,
    *,
    pid: int | None = None,
    attempt_alive: AttemptAlive | None = None,
    worker_stack: str | None = None,
    worker_memory_gb: float | None = None,
) -> StartedJob | None:
    """Claim a job for process ``pid`` of ``worker``; None when there is nothing to run (done,
    cancelled, running elsewhere, or not this worker's to run).

    ``worker_stack`` and ``worker_memory_gb`` (each job's share) are the worker's: a lower job of
    another stack, or one that needs more memory, is not run here. Its message came by a route that is
    no longer the job's (a stack's queues renamed, say): the job is sent where it belongs now, or,
    when that is the queue it came from (a worker told to take queues not its own), left queued for
    the reconciler to send again.

    A message for a job that is already running is a duplicate, unless the running attempt is dead:
    ``attempt_alive(worker, pid)`` answers for the running attempt's process when the caller can see it
    (the same worker host) and says False only when that process is certainly gone. That is how a
    message Celery re-delivers after a pool child was killed runs again at once instead of waiting for
    the heartbeat timeout; without an answer, only the heartbeat tells.
    """
    job = lock_job(session, job_id)
    if job is None:
        log.warning("job %s does not exist; dropping its message", job_id)
        return None
    if job.status in TERMINAL:
        log.info("job %s is already %s; dropping a duplicate message", job_id, job.status)
        return None
    if job.status is JobStatus.RUNNING:
        silent_since = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s)
        if attempt_alive is not None and not attempt_alive(job.worker, job.worker_pid):
            reason = f"{job.worker} lost process {job.worker_pid} (attempt {job.attempt})"
        elif job.heartbeat_at is not None and job.heartbeat_at >= silent_since:
            log.info("job %s runs on %s; dropping a duplicate message", job_id, job.worker)
            return None
        else:
            reason = f"{job.worker} stopped heartbeating"
        if not _lose_attempt(session, job, reason, settings):
            return None
    wrong = _not_for(job, worker_stack, worker_memory_gb)
    if wrong is not None:
        if lower_queue_of(job) != job.queue:
            log.warning("job %s: %s; sending it to %s", job_id, wrong, lower_queue_of(job))
            _send(session, job)
        else:
            log.error("job %s: %s, yet it came on its own queue %s; left queued", job_id, wrong, job.queue)
        return None
    job.attempt += 1
    job.worker = worker
    job.worker_pid = pid
    job.error = None
    session.add(JobAttempt(job_id=job.id, attempt=job.attempt, worker=worker))
    # The worker's own heartbeat says it is alive (and brings an offline one back); the start does not
    # lock the worker's row, one statement fewer per job.
    transition(session, job, JobStatus.RUNNING, f"attempt {job.attempt} started on {worker}")
    options = Options.model_validate({**job.cell.options, "timeout_s": job.timeout_s})
    sweep = job.cell.sweep
    return StartedJob(
        job.id,
        job.attempt,
        job.stage,
        job.cell.policy,
        job.cell.backend,
        options,
        fresh=sweep.fresh,
        reuse_unfinished=sweep.reuse_unfinished,
        stack=job.cell.stack,
    )


def _not_for(job: Job, stack: str | None, memory_gb: float | None) -> str | None:
    """Why a worker of ``stack`` with ``memory_gb`` per job must not run lower job ``job`` (None: it may)."""
    if job.kind is not JobKind.LOWER:
        return None
    if stack is not None and stack != job.cell.stack:
        return f"the cell is of stack {job.cell.stack}, this worker of {stack}"
    if job.memory_gb is not None and memory_gb is not None and memory_gb < job.memory_gb:
        return f"it needs {job.memory_gb:g} GB, this worker has {memory_gb:g} GB per job"
    return None


def heartbeat(session: Session, job_id: int, attempt: int, worker: str) -> bool:
    alive = repository.beat(session, job_id, attempt, worker)
    workers.seen(session, worker)
    return alive


def _current(session: Session, job_id: int, attempt: int) -> Job | None:
    job = lock_job(session, job_id)
    if job is None or job.status is not JobStatus.RUNNING or job.attempt != attempt:
        # The job was cancelled, or given to another attempt after this one was presumed lost:
        # the newer attempt owns the result, so this one writes nothing.
        state = "gone" if job is None else f"{job.status}, attempt {job.attempt}"
        log.warning("job %s attempt %s finished but the job is %s; result dropped", job_id, attempt, state)
        return None
    return job


def _close_attempt(session: Session, job: Job, outcome: str, error: str | None = None) -> None:
    repository.close_attempt(session, job.id, job.attempt, outcome, error)


def finish(
    session: Session,
    job_id: int,
    attempt: int,
    doc: ResultDocument,
    settings: Settings,
    reuse_key: str | None = None,
) -> None:
    """Store the attempt's result (an upsert keyed by job) with its reuse key (``coverfarm.reuse``; None:
    never reused) and end the job with the document's status."""
    job = _current(session, job_id, attempt)
    if job is None:
        return
    stored = repository.stored_result(session, job.id) if job.memory_gb is not None else None
    if stored is not None:
        # The real-weight run of a cell first measured with fake weights: keep what that one measured.
        earlier = ResultDocument.model_validate(stored[0])
        if earlier.needs_bigger_worker() is not None and doc.needs_bigger_worker() is None:
            doc.fake_weight_run = fake_weight_run(earlier, doc, job.id, stored[1])
    status = DOC_STATUS[doc.status]
    repository.upsert_result(
        session,
        {
            "job_id": job.id,
            "cell_id": job.cell_id,
            "attempt": attempt,
            "status": doc.status.value,
            "export_status": doc.export.status.value,
            "ops_total": doc.ops.total,
            "ops_on_backend": doc.ops.on_backend,
            "macs_total": doc.heavy_macs.total,
            "macs_on_backend": doc.heavy_macs.on_backend,
            "programs": doc.programs.count,
            "document": doc.model_dump(mode="json"),
            "reuse_key": reuse_key,
        },
    )
    if _to_bigger_worker(session, job, doc):
        return
    _close_attempt(session, job, status.value)
    if doc.reused_from is not None:
        source = doc.reused_from
        reason = f"attempt {attempt} reused the result of job {source.job_id} (sweep {source.sweep_id})"
    else:
        reason = f"attempt {attempt} stored its result ({doc.status.value})"
    transition(session, job, status, reason)
    if status is JobStatus.SLOW and job.stage == STAGE_LOWER:
        # docs/design.md: a stage that runs out of its bound is re-run once with a longer one, on a
        # worker of the same memory class.
        create_lower(session, job.cell, STAGE_LOWER_LONG, settings.long_timeout_s, job.memory_gb)
    if status is JobStatus.OK and doc.bundle is not None and artifacts.known(session, doc.bundle.sha256):
        # Sent after commit, like every job: a runner never claims a job whose row does not exist.
        sweep = job.cell.sweep
        reuse = None
        if doc.reused_from is not None and sweep.reuse_device and reuse_key is not None:
            statuses = None if sweep.reuse_unfinished else ("ok",)
            reuse = DeviceReuse(reuse_key, doc.bundle.sha256, statuses)
        create_device_jobs(session, job.cell, settings, reuse)


def _to_bigger_worker(session: Session, job: Job, doc: ResultDocument) -> bool:
    """Send a locked running job whose attempt fell back to fake weights (the policy did not fit its
    worker) to a worker of the memory class its real weights need; False when it is not such a job,
    already was sent so once, or needs more than the largest class (its fake-weight result then stands).

    Its stored fake-weight result stays, and is what the cell shows, until the real-weight attempt's
    result replaces it (``finish``, which keeps the fake-weight numbers in ``fake_weight_run``)."""
    need = doc.needs_bigger_worker()
    if need is None or job.memory_gb is not None:
        return False
    try:
        size = routes.memory_class(need)
    except routes.NoMemoryClass as error:
        log.warning(
            "job %s needs a worker no memory class holds (%s); its fake-weight result stands", job.id, error
        )
        return False
    _close_attempt(session, job, REQUEUED)
    job.memory_gb = float(need)
    reason = f"attempt {job.attempt} measured fake weights; real ones need {need} GB: to a ≥ {size} GB worker"
    transition(session, job, JobStatus.QUEUED, reason)
    _send(session, job)
    return True


def reusable(session: Session, key: str, job_id: int, unfinished: bool) -> ResultDocument | None:
    """A copy of the newest stored result with reuse key ``key`` (of another job: ok, or also slow and
    failed when ``unfinished``), marked with the job and sweep that measured it (kept from the source
    when it was itself reused); None when there is none."""
    statuses = [StageStatus.OK, *((StageStatus.SLOW, StageStatus.FAILED) if unfinished else ())]
    found = repository.result_with_key(session, key, job_id, [status.value for status in statuses])
    if found is None:
        return None
    document, source_job, source_sweep = found
    doc = ResultDocument.model_validate(document)
    if doc.reused_from is None:
        doc.reused_from = ReusedFrom(job_id=source_job, sweep_id=source_sweep)
    return doc


def fail(session: Session, job_id: int, attempt: int, error: str) -> None:
    """End a job whose engine raised (no result document): the cause is stored on the job."""
    job = _current(session, job_id, attempt)
    if job is None:
        return
    job.error = error
    _close_attempt(session, job, JobStatus.FAILED.value, error)
    line = error_line(error) or "engine failed"
    transition(session, job, JobStatus.FAILED, f"attempt {attempt} raised: {line}")


def _lose_attempt(session: Session, job: Job, reason: str, settings: Settings) -> bool:
    """Give up the running attempt; re-queue the job (True) unless it has had all its attempts."""
    _close_attempt(session, job, "lost", reason)
    if job.attempt >= settings.max_attempts:
        job.error = f"worker lost on each of {job.attempt} attempts; last: {reason}"
        transition(session, job, JobStatus.FAILED, job.error)
        return False
    transition(session, job, JobStatus.QUEUED, reason)
    return True


def running_attempt(session: Session, job_id: int, attempt: int) -> Job | None:
    """The job locked, when ``attempt`` is its running attempt (None: gone, ended or given to another)."""
    return _current(session, job_id, attempt)


def end(session: Session, job: Job, to: JobStatus, reason: str, error: str | None = None) -> None:
    """End a locked running attempt with ``to`` (a device job storing its result, say)."""
    job.error = error
    _close_attempt(session, job, to.value, error)
    transition(session, job, to, reason)


def give_back(session: Session, job: Job, reason: str, settings: Settings) -> bool:
    """End a locked running attempt that could not run for reasons of its host (not of the job) and
    send the job again; False when it has had all its attempts and failed instead."""
    if not _lose_attempt(session, job, reason, settings):
        return False
    _send(session, job)
    return True


def lose_process(session: Session, job_id: int, worker: str, pid: int, settings: Settings) -> bool:
    """``worker`` saw its process ``pid`` die while it ran job ``job_id`` (killed, out of memory): end that
    attempt as lost and send the job again at once (True), rather than show it running until its
    heartbeat is missed. False when the job is not running on that process (ended, or another attempt's
    now), or has had all its attempts and failed instead."""
    job = lock_job(session, job_id)
    if job is None or job.status is not JobStatus.RUNNING or (job.worker, job.worker_pid) != (worker, pid):
        return False
    return give_back(session, job, f"{worker} lost process {pid} (attempt {job.attempt})", settings)


def cancel(session: Session, job_id: int, reason: str) -> None:
    job = lock_job(session, job_id)
    if job is None or job.status in TERMINAL:
        return
    if job.status is JobStatus.RUNNING:
        _close_attempt(session, job, JobStatus.CANCELLED.value)
    transition(session, job, JobStatus.CANCELLED, reason)


def reconcile(
    session: Session,
    settings: Settings,
    unsent_before: set[int] | None = None,
    broker_since: datetime | None = None,
) -> list[int]:
    """Re-queue jobs whose worker went silent and re-send queued jobs whose message seems lost.

    The jobs table, not the broker, decides what still has to run: a SIGKILLed worker leaves its
    message unacknowledged in Redis until the visibility timeout (hours), so waiting for the broker
    would stall the cell. A duplicate message that does arrive later is dropped by ``start``.

    A queued job the broker never took (``sent_at IS NULL``: its send failed after the commit) is sent
    when the previous pass saw it so too: ``unsent_before`` holds those ids and is updated in place. The
    one pass of grace leaves alone a job whose sender has committed and is sending right now (another
    reconciler's, say). None: send every such job at once.

    ``broker_since`` is the moment since which the broker holds what it was sent (its start, or a
    failover: ``orchestrator.broker``): a queued job sent before it has no message any more and is sent
    again now, not ``resend_after_s`` after its send.
    """
    now = utcnow()
    resent: list[int] = []
    for job in repository.silent_running(session, now - timedelta(seconds=settings.heartbeat_timeout_s)):
        if _lose_attempt(
            session, job, f"{job.worker} stopped heartbeating (attempt {job.attempt})", settings
        ):
            _send(session, job)
            resent.append(job.id)
    cutoff = now - timedelta(seconds=settings.resend_after_s)
    if broker_since is not None:
        # A job is stamped once the broker took its message, a moment after the send: one sent just
        # before the broker went may carry a stamp just after it came back.
        cutoff = max(cutoff, min(broker_since + SEND_STAMP_MARGIN, now))
    unsent = set()
    emptied: list[int] = []
    for job in repository.unsent_queued(session, cutoff):
        if job.id in resent:  # re-queued just above, its message already in the outbox
            continue
        if job.sent_at is None:
            if unsent_before is not None and job.id not in unsent_before:
                unsent.add(job.id)
                continue
            log.warning("job %s has no message on the broker (its send failed); sending it", job.id)
        elif broker_since is not None and job.sent_at < broker_since + SEND_STAMP_MARGIN:
            emptied.append(job.id)
        else:
            log.warning("job %s sent at %s and not started; sending it again", job.id, job.sent_at)
        _send(session, job)
        resent.append(job.id)
    if emptied:
        log.warning(
            "the broker holds messages since %s only: sending again %d queued job(s) sent before (%s)",
            broker_since, len(emptied), _some(emptied),
        )  # fmt: skip
    if unsent_before is not None:
        unsent_before.clear()
        unsent_before.update(unsent)
    return resent


def _some(ids: list[int], shown: int = 10) -> str:
    """``ids`` for a log line: the first ``shown`` of them, and how many more."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(map(str, ids[:shown])) + more
