"""The job state machine and the worker-facing service, on the rolled-back Postgres session.

The result documents here are built by hand: these tests are about the farm's own bookkeeping
(idempotent results, stale attempts, the slow re-run), not about what the engine measures.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coverfarm.queues import DeviceMessage
from coverfarm.result import ErrorInfo, Ops, Options, ResultDocument, StageResult, StageStatus
from coverfarm.settings import Settings
from orchestrator.db import take_outbox
from orchestrator.jobs import sending
from orchestrator.jobs import service as jobs
from orchestrator.jobs.reconcile import reconcile
from orchestrator.jobs.repository import upsert_result
from orchestrator.jobs.transitions import ALLOWED, TERMINAL, TransitionError, lock_job, transition
from orchestrator.models import Job, JobAttempt, JobKind, JobStatus, Result, utcnow
from orchestrator.reports.service import report_markdown
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.public_views import cell_state
from orchestrator.sweeps.schemas import SweepCreate


def document(policy: str, export: StageStatus = StageStatus.OK, on_backend: int = 90) -> ResultDocument:
    ok = StageResult(status=StageStatus.OK)
    error = (
        ErrorInfo(stage="export", type="Timeout", message="ran out") if export is StageStatus.SLOW else None
    )
    return ResultDocument(
        policy=policy,
        backend="vulkan",
        options=Options(),
        trace=ok,
        partition=ok,
        export=StageResult(status=export, error=error),
        ops=Ops(total=100, on_backend=on_backend),
    )


def new_job(session: Session, settings: Settings, policy: str = "act") -> Job:
    sweep = sweeps.create(
        session, settings, SweepCreate(policies=[policy], backends=["vulkan"], timeout_s=60)
    )
    return sent(session, sweep.cells[0].jobs[0])


def sent(session: Session, job: Job) -> Job:
    """What the unit of work does after the commit: the message goes to the broker, the job is stamped."""
    assert job.id in [item.message.job_id for item in take_outbox(session)]
    job.sent_at = utcnow()
    session.flush()
    return job


def results_of(session: Session, job_id: int) -> int:
    return session.scalar(select(func.count()).select_from(Result).where(Result.job_id == job_id)) or 0


def test_finish_stores_one_result_and_ignores_a_duplicate(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    started = jobs.start(session, job.id, "w1", settings)
    assert started is not None and started.attempt == 1 and started.options.timeout_s == 60
    jobs.finish(session, job.id, 1, document("act"), settings)
    jobs.finish(session, job.id, 1, document("act", on_backend=1), settings)  # a redelivered message
    assert results_of(session, job.id) == 1
    result = session.scalars(select(Result).where(Result.job_id == job.id)).one()
    assert (result.ops_on_backend, result.status, job.status) == (90, "ok", JobStatus.OK)
    assert jobs.start(session, job.id, "w2", settings) is None  # done: a late message is a no-op


def test_upsert_is_keyed_by_job(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    for on_backend in (10, 20):
        upsert_result(
            session,
            {
                "job_id": job.id,
                "cell_id": job.cell_id,
                "attempt": 1,
                "status": "ok",
                "export_status": "ok",
                "ops_on_backend": on_backend,
                "document": document("act", on_backend=on_backend).model_dump(mode="json"),
            },
        )
    session.expire_all()
    assert results_of(session, job.id) == 1
    assert session.scalars(select(Result.ops_on_backend).where(Result.job_id == job.id)).one() == 20


def test_silent_worker_is_replaced_and_its_late_result_dropped(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    assert jobs.start(session, job.id, "w1", settings) is not None
    # A second message while w1 heartbeats is a duplicate, not a takeover.
    assert jobs.start(session, job.id, "w2", settings) is None
    job.heartbeat_at = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s + 1)
    session.flush()
    assert reconcile(session, settings) == [job.id]
    assert job.status is JobStatus.QUEUED and "w1 stopped heartbeating" in (job.status_reason or "")
    assert [item.message.job_id for item in take_outbox(session)] == [job.id]
    assert jobs.start(session, job.id, "w2", settings) is not None
    jobs.finish(session, job.id, 1, document("act", on_backend=1), settings)  # w1 was only slow: dropped
    jobs.finish(session, job.id, 2, document("act"), settings)
    assert results_of(session, job.id) == 1
    attempts = session.scalars(select(JobAttempt).where(JobAttempt.job_id == job.id).order_by(JobAttempt.id))
    assert [(a.attempt, a.worker, a.outcome) for a in attempts] == [(1, "w1", "lost"), (2, "w2", "ok")]


def test_queued_job_whose_message_was_lost_is_sent_again(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    assert reconcile(session, settings) == []  # just sent: leave it to the broker
    job.sent_at = utcnow() - timedelta(seconds=settings.resend_after_s + 1)
    session.flush()
    assert reconcile(session, settings) == [job.id]
    assert [item.message.job_id for item in take_outbox(session)] == [job.id]
    # Owed a send until the broker takes the message (then stamped, as ``sent`` does).
    assert job.status is JobStatus.QUEUED and job.sent_at is None


def test_queued_job_sent_before_the_broker_restarted_is_sent_again_at_once(
    session: Session, settings: Settings
) -> None:
    before, after = new_job(session, settings), new_job(session, settings, "vqbet")
    before.sent_at = utcnow() - timedelta(seconds=60)
    after.sent_at = utcnow() - timedelta(seconds=5)
    session.flush()
    take_outbox(session)
    assert reconcile(session, settings) == []  # an hour is not up for either
    # The broker has held messages for 30 s only: the one sent a minute ago lost its message.
    assert reconcile(session, settings, broker_since=utcnow() - timedelta(seconds=30)) == [before.id]
    assert [item.message.job_id for item in take_outbox(session)] == [before.id]
    assert before.status is JobStatus.QUEUED and before.sent_at is None


def test_a_job_whose_process_died_is_queued_and_sent_again(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    assert jobs.start(session, job.id, "w1", settings, pid=41) is not None
    assert not jobs.lose_process(session, job.id, "w1", 42, settings)  # not the process running it
    assert not jobs.lose_process(session, job.id, "w2", 41, settings)  # nor that worker's
    assert job.status is JobStatus.RUNNING
    assert jobs.lose_process(session, job.id, "w1", 41, settings)
    assert job.status is JobStatus.QUEUED and job.status_reason == "w1 lost process 41 (attempt 1)"
    assert [item.message.job_id for item in take_outbox(session)] == [job.id]
    assert not jobs.lose_process(session, job.id, "w1", 41, settings)  # told twice: once


def test_job_that_keeps_losing_its_worker_fails(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    for attempt in range(1, settings.max_attempts + 1):
        assert jobs.start(session, job.id, f"w{attempt}", settings) is not None
        job.heartbeat_at = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s + 1)
        session.flush()
        resent = reconcile(session, settings)
        assert resent == ([job.id] if attempt < settings.max_attempts else [])
    assert job.status is JobStatus.FAILED
    assert job.error is not None and job.error.startswith("worker lost on each of 3 attempts")


def test_slow_result_is_rerun_once_on_the_long_queue(session: Session, settings: Settings) -> None:
    job = new_job(session, settings, "vqbet")
    jobs.start(session, job.id, "w1", settings)
    jobs.finish(session, job.id, 1, document("vqbet", StageStatus.SLOW), settings)
    assert job.status is JobStatus.SLOW
    cell = job.cell
    session.refresh(cell)
    long_job = cell.jobs[-1]
    assert (long_job.stage, long_job.queue, long_job.timeout_s) == ("lower.long", "lower.long", 7200.0)
    assert (job.kind, long_job.kind, long_job.device_class) == (JobKind.LOWER, JobKind.LOWER, None)
    [outgoing] = take_outbox(session)
    assert (outgoing.queue, outgoing.message.job_id) == ("lower.long", long_job.id)
    assert cell_state(cell) == (JobStatus.SLOW, True)
    report = report_markdown(sweeps.get(session, cell.sweep_id))
    assert "| vqbet | 90 / 100 (90%) | ❌ | ❌ | slow ⏳ |" in report

    started = jobs.start(session, long_job.id, "w2", settings)
    assert started is not None and started.options.timeout_s == 7200.0
    jobs.finish(session, long_job.id, 1, document("vqbet", StageStatus.SLOW), settings)
    session.refresh(cell)
    assert [j.status for j in cell.jobs] == [JobStatus.SLOW, JobStatus.SLOW]  # no third run
    assert take_outbox(session) == []
    assert cell_state(cell) == (JobStatus.SLOW, False)


def test_a_lower_job_is_made_only_on_a_lower_stage(session: Session, settings: Settings) -> None:
    """A device job is made with its kind and class (``create_device_job``), never from a stage name."""
    cell = new_job(session, settings).cell
    with pytest.raises(ValueError, match="'run:cpu-x86_64-xnnpack' is not a lower job's stage"):
        sending.create(session, cell, "run:cpu-x86_64-xnnpack", "lower", 60)
    run = sending.create_device_job(
        session, cell, JobKind.DEVICE_RUN, "cpu-x86_64-xnnpack", "device.cpu-x86_64-xnnpack", 60
    )
    assert (run.kind, run.device_class, run.stage) == (
        JobKind.DEVICE_RUN, "cpu-x86_64-xnnpack", "run:cpu-x86_64-xnnpack",
    )  # fmt: skip
    [outgoing] = take_outbox(session)
    assert outgoing.queue == "device.cpu-x86_64-xnnpack"
    assert outgoing.message == DeviceMessage(job_id=run.id, device_class="cpu-x86_64-xnnpack")
    assert cell_state(cell) == (JobStatus.QUEUED, True)  # a device job leaves the cell as it was


def test_cancelled_job_is_not_started_and_its_result_dropped(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    jobs.start(session, job.id, "w1", settings)
    jobs.cancel(session, job.id, "sweep cancelled")
    jobs.finish(session, job.id, 1, document("act"), settings)
    assert job.status is JobStatus.CANCELLED and results_of(session, job.id) == 0
    assert jobs.start(session, job.id, "w2", settings) is None


def test_engine_failure_is_stored_on_the_job(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    jobs.start(session, job.id, "w1", settings)
    jobs.fail(session, job.id, 1, "Traceback (most recent call last):\nUserError: policy 'act' is broken")
    assert job.status is JobStatus.FAILED
    assert job.status_reason == "attempt 1 raised: UserError: policy 'act' is broken"
    report = report_markdown(sweeps.get(session, job.cell.sweep_id))
    assert "| act | ❌ | ❌ | ❌ | ❌ |" in report
    assert "- act: UserError: policy 'act' is broken" in report


@pytest.mark.parametrize("to", [JobStatus.RUNNING, JobStatus.QUEUED, JobStatus.OK])
def test_terminal_jobs_do_not_move(session: Session, settings: Settings, to: JobStatus) -> None:
    job = new_job(session, settings)
    locked = lock_job(session, job.id)
    assert locked is not None
    transition(session, locked, JobStatus.CANCELLED, "test")
    with pytest.raises(TransitionError):
        transition(session, locked, to, "test")


def test_give_back_on_the_last_attempt_fails_the_job_and_sends_nothing(
    session: Session, settings: Settings
) -> None:
    job = new_job(session, settings)
    for attempt in range(1, settings.max_attempts + 1):
        assert jobs.start(session, job.id, f"runner-{attempt}", settings) is not None
        locked = lock_job(session, job.id)
        assert locked is not None
        given = jobs.give_back(session, locked, f"infrastructure error {attempt}", settings)
        assert given is (attempt < settings.max_attempts)
        outbox = [item.message.job_id for item in take_outbox(session)]
        assert outbox == ([job.id] if given else [])
    assert job.status is JobStatus.FAILED and job.attempt == settings.max_attempts
    assert (
        job.error == f"worker lost on each of 3 attempts; last: infrastructure error {settings.max_attempts}"
    )
    assert jobs.start(session, job.id, "runner-late", settings) is None


def test_start_of_a_job_that_does_not_exist_is_nothing_to_run(session: Session, settings: Settings) -> None:
    before = session.scalar(select(func.count()).select_from(JobAttempt))
    assert jobs.start(session, 2_000_000_000, "w1", settings) is None
    assert session.scalar(select(func.count()).select_from(JobAttempt)) == before


def test_a_heartbeat_of_an_attempt_that_is_not_running_is_refused(
    session: Session, settings: Settings
) -> None:
    job = new_job(session, settings)
    assert jobs.heartbeat(session, job.id, 1, "w1") is False  # queued: nobody's attempt
    assert jobs.start(session, job.id, "w1", settings) is not None
    stamped = job.heartbeat_at
    assert jobs.heartbeat(session, job.id, 2, "w1") is False  # not its attempt
    assert jobs.heartbeat(session, job.id, 1, "w2") is False  # not its worker
    assert jobs.heartbeat(session, 2_000_000_000, 1, "w1") is False  # no such job
    session.refresh(job)
    assert job.heartbeat_at == stamped
    assert jobs.heartbeat(session, job.id, 1, "w1") is True
    jobs.cancel(session, job.id, "cancelled")
    assert jobs.heartbeat(session, job.id, 1, "w1") is False  # ended


def job_in(session: Session, settings: Settings, state: JobStatus) -> Job:
    """A job brought to ``state`` by allowed moves only."""
    job = new_job(session, settings)
    if state is JobStatus.QUEUED:
        return job
    assert jobs.start(session, job.id, "w1", settings) is not None
    if state is not JobStatus.RUNNING:
        locked = lock_job(session, job.id)
        assert locked is not None
        transition(session, locked, state, "test")
    return job


@pytest.mark.parametrize("start", list(JobStatus), ids=str)
@pytest.mark.parametrize("to", list(JobStatus), ids=str)
def test_every_move_from_every_state_is_the_table_s(
    session: Session, settings: Settings, start: JobStatus, to: JobStatus
) -> None:
    job = job_in(session, settings, start)
    locked = lock_job(session, job.id)
    assert locked is not None and locked.status is start
    if to in ALLOWED.get(start, frozenset()):
        transition(session, locked, to, "test")
        assert locked.status is to and locked.status_reason == "test"
    else:
        with pytest.raises(TransitionError):
            transition(session, locked, to, "test")
        assert locked.status is start
    # The table itself: terminal states go nowhere, and only a running job goes back to the queue.
    assert (start in TERMINAL) == (start not in ALLOWED)
