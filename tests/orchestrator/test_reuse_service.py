"""What a reuse key finds (``jobs.reusable``) and what finishing with a reused result does, on the
rolled-back Postgres session: the newest stored result of another job with that key, ok only unless
asked, the source named once; its bundle's device jobs made afresh, unless the sweep asks for the
device results stored with the key (``reuse_device``)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session
from test_jobs_service import document

from coverfarm.result import Bundle, ResultDocument, StageStatus
from coverfarm.settings import Settings
from orchestrator.artifacts import repository as artifacts
from orchestrator.artifacts.store import Stored
from orchestrator.db import take_outbox
from orchestrator.devices import repository as devices
from orchestrator.jobs import service as jobs
from orchestrator.models import DeviceBaseline, DeviceRun, Job
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps import summaries
from orchestrator.sweeps.schemas import SweepCreate

KEY = "k" * 64
DEVICE_CLASS = "cpu-x86_64-vulkan"


def lower_job(session: Session, settings: Settings, **sweep: object) -> tuple[Job, int]:
    body = SweepCreate.model_validate({"policies": ["act"], "backends": ["vulkan"], "timeout_s": 60, **sweep})
    created = sweeps.create(session, settings, body)
    take_outbox(session)
    return created.cells[0].jobs[0], created.id


def run(session: Session, settings: Settings, job: Job, status: StageStatus, key: str | None = KEY) -> None:
    started = jobs.start(session, job.id, "w1", settings)
    assert started is not None
    jobs.finish(session, job.id, started.attempt, document("act", export=status), settings, reuse_key=key)
    session.flush()


def test_reusable_finds_the_newest_ok_result_of_another_job(session: Session, settings: Settings) -> None:
    assert jobs.reusable(session, KEY, 0, unfinished=False) is None
    first, first_sweep = lower_job(session, settings)
    run(session, settings, first, StageStatus.OK)
    slow, _ = lower_job(session, settings)
    run(session, settings, slow, StageStatus.SLOW)
    unkeyed, _ = lower_job(session, settings)
    run(session, settings, unkeyed, StageStatus.OK, key=None)

    found = jobs.reusable(session, KEY, 0, unfinished=False)
    assert found is not None and found.reused_from is not None
    assert (found.reused_from.job_id, found.reused_from.sweep_id) == (first.id, first_sweep)
    assert found.status is StageStatus.OK
    # A job never reuses its own result; without another ok one there is nothing.
    assert jobs.reusable(session, KEY, first.id, unfinished=False) is None
    asked = jobs.reusable(session, KEY, first.id, unfinished=True)
    assert asked is not None and asked.reused_from is not None
    assert (asked.status, asked.reused_from.job_id) == (StageStatus.SLOW, slow.id)
    assert jobs.reusable(session, "other" + KEY[5:], 0, unfinished=True) is None

    # A reuse of a reuse names the result that was measured, not the copy.
    copy, _ = lower_job(session, settings)
    started = jobs.start(session, copy.id, "w1", settings)
    assert started is not None
    jobs.finish(session, copy.id, started.attempt, found, settings, reuse_key=KEY)
    session.flush()
    again = jobs.reusable(session, KEY, first.id, unfinished=False)
    assert again is not None and again.reused_from == found.reused_from
    assert "reused the result of job" in (copy.status_reason or "")


def test_start_says_whether_the_sweep_is_fresh(session: Session, settings: Settings) -> None:
    plain, _ = lower_job(session, settings)
    fresh, _ = lower_job(session, settings, fresh=True, reuse_unfinished=True)
    started_plain = jobs.start(session, plain.id, "w1", settings)
    started_fresh = jobs.start(session, fresh.id, "w1", settings)
    assert started_plain is not None and started_fresh is not None
    assert (started_plain.fresh, started_plain.reuse_unfinished) == (False, False)
    assert (started_fresh.fresh, started_fresh.reuse_unfinished) == (True, True)


def lowered_with_bundle(session: Session, settings: Settings, sha: str) -> tuple[Job, ResultDocument]:
    """An act cell of a sweep on DEVICE_CLASS lowered, its result stored under KEY with bundle ``sha``
    (in the store's records), as a worker stores it: the job and its document."""
    artifacts.record(session, Stored(sha, Path("/store") / sha, 10, 2))
    source, _ = lower_job(session, settings, device_classes=[DEVICE_CLASS])
    measured = document("act").model_copy(update={"bundle": Bundle(sha256=sha, path="/out/bundle")})
    started = jobs.start(session, source.id, "w1", settings)
    assert started is not None
    jobs.finish(session, source.id, started.attempt, measured, settings, reuse_key=KEY)
    session.flush()
    return source, measured


def test_a_reused_result_with_a_bundle_gets_device_jobs_of_its_own(
    session: Session, settings: Settings
) -> None:
    sha = "ab" * 32
    _, measured = lowered_with_bundle(session, settings, sha)

    reusing, _ = lower_job(session, settings, device_classes=[DEVICE_CLASS])
    found = jobs.reusable(session, KEY, reusing.id, unfinished=False)
    assert found is not None and found.bundle == measured.bundle
    started = jobs.start(session, reusing.id, "w1", settings)
    assert started is not None
    jobs.finish(session, reusing.id, started.attempt, found, settings, reuse_key=KEY)
    session.flush()
    session.refresh(reusing.cell)
    assert [job.stage for job in reusing.cell.jobs] == ["lower", f"run:{DEVICE_CLASS}"]
    assert reusing.cell.jobs[1].status.value == "queued"


def device_row(cell_id: int, status: str, median_ms: float | None, sha: str) -> dict[str, object]:
    document = {"status": status, "median_ms": median_ms}
    return {"cell_id": cell_id, "device_class": DEVICE_CLASS, "job_id": None, "runner_id": None,
            "attempt": 1, "status": status, "median_ms": median_ms, "error": None,
            "document": document, "source": "job", "bundle_sha256": sha}  # fmt: skip


def finish_reusing(session: Session, settings: Settings, sha: str, **sweep: object) -> Job:
    """A sweep's act cell finished with the stored result of KEY (bundle ``sha``), as a worker does."""
    job, _ = lower_job(session, settings, device_classes=[DEVICE_CLASS], **sweep)
    found = jobs.reusable(session, KEY, job.id, unfinished=False)
    assert found is not None and found.bundle is not None and found.bundle.sha256 == sha
    started = jobs.start(session, job.id, "w1", settings)
    assert started is not None
    jobs.finish(session, job.id, started.attempt, found, settings, reuse_key=KEY)
    session.flush()
    session.refresh(job.cell)
    return job


def test_a_reuse_device_sweep_takes_the_stored_device_results_of_its_key(
    session: Session, settings: Settings
) -> None:
    sha = "cd" * 32
    source, _ = lowered_with_bundle(session, settings, sha)

    # Nothing measured on the device yet: even a reuse_device sweep runs its bundle.
    first = finish_reusing(session, settings, sha, reuse_device=True)
    assert [job.stage for job in first.cell.jobs] == ["lower", f"run:{DEVICE_CLASS}"]

    # A failed run is taken only with reuse_unfinished; an ok one by any reuse_device sweep.
    devices.upsert_run(session, device_row(source.cell_id, "failed", None, sha))
    assert len(finish_reusing(session, settings, sha, reuse_device=True).cell.jobs) == 2
    unfinished = finish_reusing(session, settings, sha, reuse_device=True, reuse_unfinished=True)
    assert [job.stage for job in unfinished.cell.jobs] == ["lower"]
    devices.upsert_run(session, device_row(source.cell_id, "ok", 31.2, sha))
    devices.upsert_baseline(
        session, {k: v for k, v in device_row(source.cell_id, "ok", 78.0, sha).items()
                  if k not in ("source", "bundle_sha256")}
    )  # fmt: skip
    session.flush()

    taken = finish_reusing(session, settings, sha, reuse_device=True)
    assert [job.stage for job in taken.cell.jobs] == ["lower"]  # no device job: the run is the stored one
    run = session.query(DeviceRun).filter_by(cell_id=taken.cell_id).one()
    assert (run.source, run.status, run.median_ms, run.bundle_sha256, run.job_id) == (
        "reused",
        "ok",
        31.2,
        sha,
        None,
    )
    baseline = session.query(DeviceBaseline).filter_by(cell_id=taken.cell_id).one()
    assert (baseline.status, baseline.median_ms) == ("ok", 78.0)
    assert summaries.summary(session, taken.cell.sweep_id).state == "done"

    # Without reuse_device the device run is the cell's own, as before.
    plain = finish_reusing(session, settings, sha)
    assert [job.stage for job in plain.cell.jobs] == ["lower", f"run:{DEVICE_CLASS}"]
    assert session.query(DeviceRun).filter_by(cell_id=plain.cell_id).one_or_none() is None
