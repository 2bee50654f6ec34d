"""Postgres goes away while a worker runs a sweep, and comes back: every cell still ends with exactly one
result and no job is left queued or running. The farm's database is a private Postgres cluster (initdb on
a port of its own, stopped the hard way: ``pg_ctl stop -m immediate``); the machine's shared one on 5432 is
never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from farmkit import TOKEN, StartWorker, free_port, start_redis, start_server, stop, wait_for

from coverfarm.settings import Settings
from orchestrator.migrate import upgrade

BIN = Path("/usr/lib/postgresql/15/bin")


class PrivatePostgres:
    """A throw-away cluster owned by the postgres user, trusting loopback, on ``port``."""

    def __init__(self, port: int) -> None:
        if os.geteuid() != 0 or not (BIN / "initdb").is_file():
            pytest.skip("needs root and PostgreSQL 15's initdb to make a private cluster")
        self.port = port
        self.folder = Path(tempfile.mkdtemp(prefix="coverfarm-pg-"))
        shutil.chown(self.folder, "postgres", "postgres")
        self.data = self.folder / "data"
        self._as_postgres(BIN / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()

    def _as_postgres(self, *command: object) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--", *map(str, command)]
        subprocess.run(as_postgres, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            BIN / "pg_ctl", "-D", self.data, "-o", options, "-l", self.folder / "log", "-w", "start"
        )

    def crash(self) -> None:
        self._as_postgres(BIN / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def remove(self) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(BIN / "pg_ctl"), "-D", str(self.data),
                        "-m", "immediate", "stop"], capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    cluster = PrivatePostgres(free_port())
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def outage_env(private_postgres: PrivatePostgres, tmp_path: Path) -> Iterator[dict[str, str]]:
    with psycopg.connect(private_postgres.url("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE coverfarm")
    port = free_port()
    broker = start_redis(port, tmp_path)
    env = {
        "COVERFARM_HOME": str(tmp_path / "home"),
        "COVERFARM_DATABASE_URL": private_postgres.url("coverfarm"),
        "COVERFARM_BROKER_URL": f"redis://127.0.0.1:{port}/0",
        "COVERFARM_ADMIN_TOKEN": TOKEN,
        "COVERFARM_POLICIES": "act,diffusion",
        "COVERFARM_BACKENDS": "vulkan,xnnpack",
        "COVERFARM_ENGINE": "standin_engine:analyze",
        "COVERFARM_HEARTBEAT_INTERVAL_S": "1",
        "COVERFARM_HEARTBEAT_TIMEOUT_S": "8",
        "COVERFARM_RECONCILE_INTERVAL_S": "0.5",
        "STANDIN_SECONDS": "3",
    }
    upgrade(Settings.model_validate({k.removeprefix("COVERFARM_").lower(): v for k, v in env.items()
                                     if k.startswith("COVERFARM_")}))  # fmt: skip
    yield env
    stop(broker)


def test_a_postgres_outage_while_a_worker_runs_loses_and_duplicates_nothing(
    private_postgres: PrivatePostgres, outage_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    process, url = start_server(outage_env, tmp_path / "serve.log")
    try:
        start_worker("cpu-outage", env=outage_env)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as api:
            sweep = api.post("/api/sweeps", json={"policies": ["act", "diffusion"],
                                                  "backends": ["vulkan", "xnnpack"]}).json()  # fmt: skip

            def running() -> bool:
                cells = api.get(f"/api/sweeps/{sweep['id']}").json()["cells"]
                return any(cell["jobs"][-1]["status"] == "running" for cell in cells)

            wait_for(running, 30, "a job to start")
            private_postgres.crash()
            down = time.monotonic()
            assert api.get("/api/sweeps").status_code >= 500  # the orchestrator says it cannot answer
            time.sleep(12)  # past the worker's patience: the attempt running now cannot store its result
            private_postgres.start()
            back = time.monotonic()

            def done() -> dict[str, object] | None:
                try:
                    current = api.get(f"/api/sweeps/{sweep['id']}")
                except httpx.TransportError:
                    return None
                body: dict[str, object] = current.json()
                return body if current.status_code == 200 and body["state"] == "done" else None

            finished = wait_for(done, 120, "the sweep to finish after Postgres came back")
            settled = time.monotonic()
    finally:
        stop(process)
    with psycopg.connect(private_postgres.url("coverfarm")) as conn:
        results = conn.execute("SELECT job_id, count(*) FROM results GROUP BY job_id").fetchall()
        pending = conn.execute("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')").fetchone()
        lost = conn.execute("SELECT count(*) FROM job_attempts WHERE outcome = 'lost'").fetchone()
    cells = finished["cells"]  # type: ignore[index]
    print(
        f"\nPostgres down {back - down:.0f} s; sweep done {settled - back:.0f} s after it came back; "
        f"{len(results)} results for {len(cells)} cells, attempts lost {lost[0] if lost else '?'}"
    )
    assert [cell["state"] for cell in cells] == ["ok"] * 4  # type: ignore[index]
    assert len(results) == 4 and all(count == 1 for _, count in results)
    assert pending == (0,)
