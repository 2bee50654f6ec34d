"""Races on SQLite and on Postgres alike, with real threads against a real served orchestrator: one
enrolment token tried by several boards at once, one device job claimed by several runners at once, and
two reconcilers re-queuing the same silent jobs at once. Each test prints its counts (``-s`` shows them).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from devicetools import CLASS, lower_with_bundle, make_healthy, probe
from farmkit import free_port, recreate_database, session_broker
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from dashboard.app import create_app
from farmrun.celery_app import make_celery
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.jobs import service as jobs
from orchestrator.migrate import upgrade
from orchestrator.models import Job, JobAttempt, JobStatus, Runner, utcnow
from orchestrator.reconciler import reconcile_once

TOKEN = "races-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BROKER = session_broker(11)
POLICIES = ["act", "vqbet", "diffusion", "tdmpc"]


@dataclass
class Farm:
    database: str
    url: str
    settings: Settings
    sessions: sessionmaker[Session]
    broker: redis.Redis


@pytest.fixture(params=["sqlite", "postgres"])
def farm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Farm]:
    database_url = recreate_database("coverfarm_test_races") if request.param == "postgres" else None
    settings = Settings(
        home=tmp_path / "home", database_url=database_url, broker_url=BROKER, admin_token=TOKEN,
        policies=POLICIES, backends=["xnnpack"],
    )  # fmt: skip
    upgrade(settings)
    broker = redis.Redis.from_url(BROKER)
    broker.flushdb()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, background=False), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    while not server.started:
        assert serving.is_alive(), "the orchestrator did not start"
        time.sleep(0.05)
    engine = make_engine(settings)
    try:
        yield Farm(request.param, f"http://127.0.0.1:{port}", settings, make_sessionmaker(engine), broker)
    finally:
        server.should_exit = True
        serving.join(timeout=10)
        engine.dispose()
        broker.flushdb()
        broker.close()


def at_once(calls: list[Callable[[], int]]) -> list[int]:
    """Run every call on its own thread, released together; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[int] = [0] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def post(url: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Callable[[], int]:
    def call() -> int:
        with httpx.Client(base_url=url, timeout=60) as client:
            return client.post(path, headers=headers or {}, **kwargs).status_code

    return call


TOKENS, BOARDS_PER_TOKEN = 20, 4


def test_a_one_time_token_enrols_one_runner_however_many_boards_race_it(farm: Farm) -> None:
    with httpx.Client(base_url=farm.url, headers=ADMIN, timeout=30) as admin:
        tokens = [admin.post("/api/enrolment-tokens", json={}).json()["token"] for _ in range(TOKENS)]
    statuses: list[int] = []
    for token in tokens:
        body = {"token": token, "name": "board", "probe": probe()}
        statuses += at_once(
            [post(farm.url, "/api/runners/enrol", json=body) for _ in range(BOARDS_PER_TOKEN)]
        )
    counts = Counter(statuses)
    with farm.sessions() as session:
        runners = len(session.scalars(select(Runner.id)).all())
    print(f"\n[{farm.database}] token race: {TOKENS} tokens x {BOARDS_PER_TOKEN} boards at once: "
          f"{dict(counts)}; runners stored {runners}")  # fmt: skip
    assert counts == {201: TOKENS, 401: TOKENS * (BOARDS_PER_TOKEN - 1)}
    assert runners == TOKENS


RUNNERS = 4


def test_a_device_job_is_claimed_by_one_runner_however_many_race_for_it(farm: Farm, tmp_path: Path) -> None:
    credentials = []
    with httpx.Client(base_url=farm.url, headers=ADMIN, timeout=30) as admin:
        for index in range(RUNNERS):
            token = admin.post("/api/enrolment-tokens", json={}).json()["token"]
            body = {"token": token, "name": f"board-{index}", "probe": probe()}
            enrolled = admin.post("/api/runners/enrol", json=body).json()
            credentials.append({"Authorization": f"Bearer {enrolled['credential']}"})
        for credential in credentials:
            make_healthy(admin, credential)
        for _ in range(3):
            sweep = admin.post("/api/sweeps", json={"policies": POLICIES, "backends": ["xnnpack"],
                                                    "device_classes": [CLASS]}).json()  # fmt: skip
            for cell in sweep["cells"]:
                lower_with_bundle(
                    farm.sessions, farm.settings, cell["jobs"][0]["id"], cell["policy"], tmp_path
                )
    with farm.sessions() as session:
        job_ids = [
            job.id for job in session.scalars(select(Job).order_by(Job.id)) if job.stage.startswith("run:")
        ]
    assert len(job_ids) == 12
    per_job = []
    for job_id in job_ids:
        per_job.append(at_once([post(farm.url, f"/api/device-jobs/{job_id}/claim", c) for c in credentials]))
    counts = Counter(status for statuses in per_job for status in statuses)
    with farm.sessions() as session:
        attempts = Counter(session.scalars(select(JobAttempt.job_id).where(JobAttempt.job_id.in_(job_ids))))
        running = [session.get(Job, job_id).status for job_id in job_ids]  # type: ignore[union-attr]
    print(f"\n[{farm.database}] claim race: {len(job_ids)} jobs x {RUNNERS} runners at once: {dict(counts)}; "
          f"attempts per job {sorted(set(attempts.values()))}")  # fmt: skip
    assert all(sorted(statuses) == [200] + [409] * (RUNNERS - 1) for statuses in per_job), per_job
    assert attempts == {job_id: 1 for job_id in job_ids}
    assert running == [JobStatus.RUNNING] * len(job_ids)


SILENT = 10


def test_two_reconcilers_at_once_requeue_each_silent_job_once(farm: Farm) -> None:
    with httpx.Client(base_url=farm.url, headers=ADMIN, timeout=30) as admin:
        for _ in range(SILENT // len(POLICIES) + 1):
            admin.post("/api/sweeps", json={"policies": POLICIES, "backends": ["xnnpack"]})
    with farm.sessions() as session:
        ids = list(session.scalars(select(Job.id).order_by(Job.id).limit(SILENT)))
        for job_id in ids:
            assert jobs.start(session, job_id, "cpu@gone", farm.settings) is not None
        for job in session.scalars(select(Job).where(Job.id.in_(ids))):
            job.heartbeat_at = utcnow() - timedelta(seconds=farm.settings.heartbeat_timeout_s + 5)
        session.commit()
    farm.broker.flushdb()
    resent: list[list[int]] = [[], []]

    def reconciler(index: int) -> Callable[[], int]:
        def run() -> int:
            # As the app's Reconciler calls it: with its memory of never-sent jobs (none yet).
            resent[index] = reconcile_once(farm.sessions, make_celery(farm.settings), farm.settings, set())
            return len(resent[index])

        return run

    at_once([reconciler(0), reconciler(1)])
    with farm.sessions() as session:
        lost = Counter(session.scalars(select(JobAttempt.job_id).where(JobAttempt.outcome == "lost")))
        states = {
            job.id: (job.status, job.attempt) for job in session.scalars(select(Job).where(Job.id.in_(ids)))
        }
    requeued = set(resent[0]) | set(resent[1])
    messages = farm.broker.llen("lower")
    print(f"\n[{farm.database}] two reconcilers, {SILENT} silent jobs: re-queued by each "
          f"{len(resent[0])} + {len(resent[1])}, attempts lost per job {sorted(set(lost.values()))}, "
          f"messages {messages}")  # fmt: skip
    assert requeued == set(ids)
    assert lost == {job_id: 1 for job_id in ids}  # each silent attempt given up once, by one of them
    assert states == {job_id: (JobStatus.QUEUED, 1) for job_id in ids}
    assert messages == SILENT  # one message each: the second did not send what the first was sending
