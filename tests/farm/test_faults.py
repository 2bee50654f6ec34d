"""Faults under a running sweep: a killed Celery pool child (on Redis and on the embedded default), and
Redis restarted with every message lost.

Real `coverfarm worker` (Celery) processes with the stand-in engine; the Redis restart test runs its
own redis-server and orchestrator on free loopback ports, so the shared Redis is never touched.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from farmkit import TOKEN, StartWorker, free_port, start_redis, start_server, stop, sweep_done, wait_for
from farmkit import start_worker as farmkit_start_worker
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.models import Job, JobAttempt, JobStatus, Result


def results_per_job(sessions: sessionmaker[Session], job_ids: list[int]) -> dict[int, int]:
    with sessions() as session:
        rows = session.execute(
            select(Result.job_id, func.count()).where(Result.job_id.in_(job_ids)).group_by(Result.job_id)
        ).all()
    return {job_id: count for job_id, count in rows}


def test_killed_pool_child_runs_again_at_once_with_one_result(
    api: httpx.Client, start_worker: StartWorker, farm_sessions: sessionmaker[Session]
) -> None:
    start_worker("w-child", STANDIN_FIRST_ATTEMPT_SECONDS="60", STANDIN_SECONDS="0.2")
    sweep = api.post(
        "/api/sweeps", json={"policies": ["act"], "backends": ["vulkan"], "timeout_s": 30}
    ).json()
    job_id = sweep["cells"][0]["jobs"][0]["id"]

    def pool_child() -> int | None:
        with farm_sessions() as session:
            job = session.get(Job, job_id)
            return job.worker_pid if job is not None and job.status is JobStatus.RUNNING else None

    pid = wait_for(pool_child, 30, "the worker's pool child to start the job")
    os.kill(pid, signal.SIGKILL)  # only the pool child: the worker's main process lives on
    killed = time.monotonic()

    # Celery re-delivers the message (task_reject_on_worker_lost); the new pool child sees that the
    # attempt's process is gone and runs the job again, well before the heartbeat timeout (8 s) would.
    done: Any = wait_for(lambda: sweep_done(api, sweep["id"]), 60, "the job to run again")
    job = done["cells"][0]["jobs"][0]
    assert (job["status"], job["attempt"]) == ("ok", 2)
    assert job["worker"].startswith("w-child@")
    with farm_sessions() as session:
        attempts = session.scalars(
            select(JobAttempt).where(JobAttempt.job_id == job_id).order_by(JobAttempt.attempt)
        ).all()
        assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lost"), (2, "ok")]
        assert attempts[0].error == f"{job['worker']} lost process {pid} (attempt 1)"
        assert (attempts[1].started_at - attempts[0].started_at).total_seconds() < 60
    assert results_per_job(farm_sessions, [job_id]) == {job_id: 1}
    assert time.monotonic() - killed < 60


def test_a_killed_pool_child_s_job_is_queued_again_at_once_on_the_embedded_default(tmp_path: Path) -> None:
    """SQLite and the filesystem broker, whose re-delivered message goes to the back of the queue: the
    worker's main process sees its pool child die and queues the job again at once, instead of the job
    showing ``running`` until its heartbeat is missed (90 s by default) or its message comes round."""
    env = {
        "COVERFARM_HOME": str(tmp_path / "home"),
        "COVERFARM_ADMIN_TOKEN": TOKEN,
        "COVERFARM_POLICIES": "act,diffusion,tdmpc,vqbet",
        "COVERFARM_BACKENDS": "vulkan,xnnpack",
        "COVERFARM_ENGINE": "standin_engine:analyze",
        "COVERFARM_RECONCILE_INTERVAL_S": "1",
    }
    server, url = start_server(env, tmp_path / "serve.log")
    worker = None
    try:
        worker = farmkit_start_worker(
            env, tmp_path / "worker.log", "w-embedded", STANDIN_SECONDS="6",
            STANDIN_FIRST_ATTEMPT_SECONDS="120", STANDIN_FIRST_ATTEMPT_POLICIES="act",
        )  # fmt: skip
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as api:
            # act first; the other three queue behind it, 18 s of work.
            body = {"policies": ["act", "diffusion", "tdmpc"], "backends": ["vulkan", "xnnpack"]}
            sweep = api.post("/api/sweeps", json=body | {"backends": ["vulkan"]}).json()
            api.post("/api/sweeps", json=body | {"policies": ["diffusion"], "backends": ["xnnpack"]})
            act = next(cell["jobs"][0] for cell in sweep["cells"] if cell["policy"] == "act")

            def job() -> dict[str, Any]:
                found: dict[str, Any] = api.get(f"/api/sweeps/{sweep['id']}").json()
                return next(cell["jobs"][0] for cell in found["cells"] if cell["policy"] == "act")

            wait_for(lambda: job()["status"] == "running", 60, "the worker to start act's job")
            with sqlite3.connect(tmp_path / "home" / "coverfarm.db") as db:
                (pid,) = db.execute("SELECT worker_pid FROM jobs WHERE id = ?", (act["id"],)).fetchone()
            os.kill(pid, signal.SIGKILL)  # only the pool child: the worker's main process lives on
            killed = time.monotonic()
            wait_for(lambda: job()["status"] != "running", 10, "act's job to leave running")
            back = time.monotonic() - killed
            done: Any = wait_for(lambda: sweep_done(api, sweep["id"]), 90, "the sweep to finish")
        assert {cell["state"] for cell in done["cells"]} == {"ok"}
        with sqlite3.connect(tmp_path / "home" / "coverfarm.db") as db:
            attempts = db.execute(
                "SELECT attempt, outcome, error FROM job_attempts WHERE job_id = ? ORDER BY attempt",
                (act["id"],),
            ).fetchall()
            results = db.execute("SELECT job_id, count(*) FROM results GROUP BY job_id").fetchall()
        assert [(number, outcome) for number, outcome, _ in attempts] == [(1, "lost"), (2, "ok")]
        assert attempts[0][2].endswith(f"lost process {pid} (attempt 1)")
        assert {count for _, count in results} == {1}
        print(f"\nact's job queued again {back:.1f} s after its pool child was killed")
    finally:
        if worker is not None:
            stop(worker)
        stop(server)


@dataclass
class PrivateFarm:
    """An orchestrator on the shared test database but its own redis-server, which a test may kill."""

    env: dict[str, str]
    url: str
    redis_port: int
    redis_dir: Path
    redis: subprocess.Popen[bytes]

    def kill_and_restart_redis(self) -> None:
        # kill -9: Redis goes with every queued and unacknowledged message (it keeps nothing on disk).
        self.redis.send_signal(signal.SIGKILL)
        self.redis.wait()
        time.sleep(1)
        self.redis = start_redis(self.redis_port, self.redis_dir)


@pytest.fixture
def private_farm(farm_env: dict[str, str], tmp_path: Path) -> Iterator[PrivateFarm]:
    port = free_port()
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    env = farm_env | {
        "COVERFARM_BROKER_URL": f"redis://127.0.0.1:{port}/0",
        # The default: a queued job's message is not presumed lost for an hour, unless the broker
        # says it restarted since the job was sent.
        "COVERFARM_RESEND_AFTER_S": "3600",
    }
    farm = PrivateFarm(env, "", port, redis_dir, start_redis(port, redis_dir))
    try:
        server, farm.url = start_server(env, tmp_path / "serve.log")
        try:
            yield farm
        finally:
            stop(server)
    finally:
        stop(farm.redis)


def test_sweep_completes_across_a_redis_restart(
    private_farm: PrivateFarm, start_worker: StartWorker, farm_sessions: sessionmaker[Session]
) -> None:
    start_worker("w-redis", env=private_farm.env, STANDIN_SECONDS="1")
    with httpx.Client(
        base_url=private_farm.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    ) as api:
        sweep = api.post(
            "/api/sweeps",
            json={"policies": ["act", "diffusion"], "backends": ["vulkan", "xnnpack"], "timeout_s": 30},
        ).json()
        job_ids = [cell["jobs"][0]["id"] for cell in sweep["cells"]]

        def some_running() -> bool:
            with farm_sessions() as session:
                statuses = session.scalars(select(Job.status).where(Job.id.in_(job_ids))).all()
            return JobStatus.RUNNING in statuses

        wait_for(some_running, 30, "the worker to start a job")
        private_farm.kill_and_restart_redis()
        back = time.monotonic()
        # The worker reconnects; the running job finishes into the database; the three messages that
        # Redis lost are sent again by the reconciler as soon as it sees the broker restarted (not an
        # hour later), and any duplicate is dropped by the worker.
        done: Any = wait_for(lambda: sweep_done(api, sweep["id"]), 45, "the sweep to finish")
        print(f"\nsweep done {time.monotonic() - back:.1f} s after Redis came back empty")
    assert {cell["state"] for cell in done["cells"]} == {"ok"}
    assert results_per_job(farm_sessions, job_ids) == dict.fromkeys(job_ids, 1)
