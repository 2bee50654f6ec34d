"""Fixtures for the farm's process tests: the orchestrator (``coverfarm serve``) and Celery workers
(``coverfarm worker``) as real child processes, on a real Postgres and a real Redis (database 14).

These tests need committed data (several processes share it), so they use their own database,
recreated and migrated once per session, and each test works on the sweeps it creates.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from farmtools import ROOT, TOKEN, StartWorker, child_env, coverfarm_command, free_port, stop
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.migrate import upgrade

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "coverfarm_test_farm"
BROKER = "redis://127.0.0.1:6379/14"


@pytest.fixture(scope="session")
def farm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')
    redis.Redis.from_url(BROKER).flushdb()
    env = {
        "COVERFARM_HOME": str(tmp_path_factory.mktemp("farm-home")),
        "COVERFARM_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{DATABASE}",
        "COVERFARM_BROKER_URL": BROKER,
        "COVERFARM_ADMIN_TOKEN": TOKEN,
        "COVERFARM_POLICIES": "act,vqbet,pi05,diffusion",
        "COVERFARM_BACKENDS": "vulkan,xnnpack",
        "COVERFARM_ENGINE": "standin_engine:analyze",
        "COVERFARM_STAGE_TIMEOUT_S": "30",
        "COVERFARM_LONG_TIMEOUT_S": "1200",
        # Short heartbeats so that a killed worker's job comes back within seconds.
        "COVERFARM_HEARTBEAT_INTERVAL_S": "1",
        "COVERFARM_HEARTBEAT_TIMEOUT_S": "8",
        "COVERFARM_RECONCILE_INTERVAL_S": "0.5",
    }
    upgrade(farm_settings_from(env))
    return env


def farm_settings_from(env: dict[str, str]) -> Settings:
    values = {key.removeprefix("COVERFARM_").lower(): value for key, value in env.items()}
    return Settings.model_validate(values)


@pytest.fixture(scope="session")
def farm_settings(farm_env: dict[str, str]) -> Settings:
    return farm_settings_from(farm_env)


@pytest.fixture(scope="session")
def farm_engine(farm_settings: Settings) -> Iterator[Engine]:
    engine = make_engine(farm_settings)
    yield engine
    engine.dispose()


@pytest.fixture
def farm_sessions(farm_engine: Engine) -> sessionmaker[Session]:
    return make_sessionmaker(farm_engine)


@pytest.fixture(scope="session")
def server(farm_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            coverfarm_command("serve", "--port", str(port)),
            env=child_env(farm_env),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/api/sweeps", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"coverfarm serve did not start:\n{log.read_text()}")
        time.sleep(0.2)
    yield url
    stop(process)


@pytest.fixture
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as client:
        yield client


@pytest.fixture
def start_worker(farm_env: dict[str, str], tmp_path: Path) -> Iterator[StartWorker]:
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, ready_timeout: float = 60, **extra_env: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                coverfarm_command("worker", "--name", f"{name}@%h"),
                env=child_env(farm_env, **extra_env),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the test can SIGKILL all of it
            )
        started.append(process)
        deadline = time.monotonic() + ready_timeout
        while b" ready." not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start:\n{log.read_text()}")
            time.sleep(0.2)
        return process

    yield start
    for process in started:
        stop(process)
