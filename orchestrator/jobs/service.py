"""What happens to a job's attempts: started and finished by a worker, failed, lost and re-queued,
ended, cancelled; a stored result found by its reuse key. Jobs are made and sent by
``orchestrator.jobs.sending``, and the reconciler's pass is ``orchestrator.jobs.reconcile``.

Workers call ``start``/``finish``/``fail`` through the database directly (CPU workers are trusted,
inside the farm). Each of those is idempotent: a duplicated or late message, or a retried attempt,
never produces a second result or an impossible state. Services flush, never commit; callers wrap
them in ``orchestrator.db.unit_of_work``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from coverfarm import routes
from coverfarm.result import Options, ResultDocument, ReusedFrom, StageStatus, error_line, fake_weight_run
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from orchestrator.artifacts import repository as artifacts
from orchestrator.jobs import repository
from orchestrator.jobs.sending import (
    STAGE_LOWER,
    STAGE_LOWER_LONG,
    DeviceReuse,
    _send,
    create_device_jobs,
    create_lower,
    lower_queue_of,
)
from orchestrator.jobs.transitions import TERMINAL, lock_job, transition
from orchestrator.models import Job, JobAttempt, JobKind, JobStatus, utcnow
from orchestrator.workers import service as workers

log = logging.getLogger(__name__)

# A job attempt's outcome when it measured fake weights and its job went to a worker with more memory.
REQUEUED = "requeued"
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


def cause(job: Job) -> str | None:
    """Why the job ended as it did, in one line: its error's line (``error_line``), else its reason."""
    return error_line(job.error) or job.status_reason


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
