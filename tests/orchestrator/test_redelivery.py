"""A message re-delivered for a running job: dropped while its attempt lives, run at once when the
process that ran the attempt is gone (a killed Celery pool child), with one result either way."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session
from test_jobs_service import document, new_job, results_of

from coverfarm.settings import Settings
from orchestrator.jobs import service as jobs
from orchestrator.models import JobAttempt, JobStatus


def test_redelivery_after_the_attempts_process_died_runs_again_at_once(
    session: Session, settings: Settings
) -> None:
    job = new_job(session, settings)
    seen: list[tuple[str | None, int | None]] = []

    def alive(name: str | None, pid: int | None) -> bool:
        seen.append((name, pid))
        return pid != 4242

    first = jobs.start(session, job.id, "cpu@h", settings, pid=4242, attempt_alive=alive)
    assert first is not None and first.attempt == 1 and job.worker_pid == 4242
    # The heartbeat is fresh: only the dead process tells that attempt 1 is over.
    second = jobs.start(session, job.id, "cpu@h", settings, pid=4343, attempt_alive=alive)
    assert second is not None and second.attempt == 2
    assert seen == [("cpu@h", 4242)]
    assert (job.status, job.worker_pid) == (JobStatus.RUNNING, 4343)

    jobs.finish(session, job.id, 1, document("act"), settings)  # the dead attempt's late result: dropped
    jobs.finish(session, job.id, 2, document("act"), settings)
    assert results_of(session, job.id) == 1
    attempts = session.scalars(select(JobAttempt).where(JobAttempt.job_id == job.id)).all()
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lost"), (2, "ok")]
    assert attempts[0].error == "cpu@h lost process 4242 (attempt 1)"


def test_redelivery_while_the_attempt_lives_is_dropped(session: Session, settings: Settings) -> None:
    job = new_job(session, settings)
    assert jobs.start(session, job.id, "cpu@h", settings, pid=1, attempt_alive=lambda _n, _p: True)
    assert jobs.start(session, job.id, "cpu@h", settings, pid=2, attempt_alive=lambda _n, _p: True) is None
    assert jobs.start(session, job.id, "cpu@other", settings, pid=3) is None
    assert (job.attempt, job.worker_pid) == (1, 1)
