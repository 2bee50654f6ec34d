"""Sweeps through the API, run by real `coverfarm worker` (Celery) processes with the stand-in engine."""

from __future__ import annotations

import os
import signal
from typing import Any

import httpx
from farmkit import StartWorker, sweep_done, wait_for
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.models import Job, JobAttempt, Result, Worker


def test_sweep_runs_on_a_worker_with_slow_rerun_and_failure(
    api: httpx.Client, start_worker: StartWorker, farm_sessions: sessionmaker[Session]
) -> None:
    start_worker("w-basic")
    response = api.post(
        "/api/sweeps", json={"policies": ["act", "vqbet", "pi05"], "backends": ["xnnpack"], "timeout_s": 30}
    )
    assert response.status_code == 201, response.text
    sweep_id = response.json()["id"]
    sweep: Any = wait_for(lambda: sweep_done(api, sweep_id), 60, "the sweep to finish")
    cells = {cell["policy"]: cell for cell in sweep["cells"]}

    assert cells["act"]["state"] == "ok"
    assert cells["act"]["result"]["ops_on_backend"] == 90
    assert cells["act"]["result"]["document"]["versions"]["engine"] == "stand-in"

    # vqbet exported "slow" on its 30 s bound, was re-queued once on lower.long with the long bound.
    jobs = cells["vqbet"]["jobs"]
    assert [(job["stage"], job["queue"], job["status"], job["timeout_s"]) for job in jobs] == [
        ("lower", "lower", "slow", 30.0),
        ("lower.long", "lower.long", "ok", 1200.0),
    ]
    assert cells["vqbet"]["state"] == "ok"

    assert cells["pi05"]["state"] == "failed"
    assert "pi05 cannot be traced" in cells["pi05"]["jobs"][0]["error"]

    report = api.get(f"/api/sweeps/{sweep_id}/report.md").text
    assert "| act | 90 / 100 (90%) | 80% | 3 | ✓ |" in report
    assert "| pi05 | ❌ | ❌ | ❌ | ❌ |" in report
    assert "pi05: RuntimeError: stand-in engine: pi05 cannot be traced" in report

    with farm_sessions() as session:
        worker = session.scalars(select(Worker).where(Worker.name.startswith("w-basic@"))).one()
        assert (worker.state, worker.state_reason) == ("online", "registered")
        assert worker.queues == ["lower", "lower.long"]


def test_sigkilled_worker_job_runs_again_elsewhere_with_one_result(
    api: httpx.Client, start_worker: StartWorker, farm_sessions: sessionmaker[Session]
) -> None:
    doomed = start_worker("w-doomed", STANDIN_SECONDS="60")
    sweep = api.post(
        "/api/sweeps", json={"policies": ["diffusion"], "backends": ["vulkan"], "timeout_s": 30}
    ).json()
    job_id = sweep["cells"][0]["jobs"][0]["id"]

    def running_on_doomed() -> bool:
        job = api.get(f"/api/cells/{sweep['cells'][0]['id']}").json()["jobs"][0]
        return job["status"] == "running" and job["worker"].startswith("w-doomed@")

    wait_for(running_on_doomed, 30, "the doomed worker to start the job")
    os.killpg(doomed.pid, signal.SIGKILL)  # the whole worker: main process and its pool child
    doomed.wait()

    start_worker("w-rescue", STANDIN_SECONDS="0.2")

    def doomed_offline() -> dict[str, Any] | None:
        listed = {w["name"].split("@")[0]: w for w in api.get("/api/workers").json()}
        doomed = listed.get("w-doomed")
        return doomed if doomed is not None and doomed["state"] == "offline" else None

    # Its main process is gone too: no more worker heartbeats, and the reconciler says so.
    gone: Any = wait_for(doomed_offline, 30, "the killed worker to be marked offline")
    assert gone["state_reason"].startswith("missed heartbeats: silent for ")
    done: Any = wait_for(lambda: sweep_done(api, sweep["id"]), 60, "the job to run again on the new worker")
    job = done["cells"][0]["jobs"][0]
    assert job["status"] == "ok"
    assert job["attempt"] == 2
    assert job["worker"].startswith("w-rescue@")

    with farm_sessions() as session:
        assert session.scalar(select(func.count()).select_from(Result).where(Result.job_id == job_id)) == 1
        attempts = session.scalars(
            select(JobAttempt).where(JobAttempt.job_id == job_id).order_by(JobAttempt.attempt)
        ).all()
        assert [(a.attempt, a.worker.split("@")[0], a.outcome) for a in attempts] == [
            (1, "w-doomed", "lost"),
            (2, "w-rescue", "ok"),
        ]
        assert session.get(Job, job_id) is not None
