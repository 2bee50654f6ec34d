"""Fixtures for the farm's process tests: the orchestrator (``coverfarm serve``) and Celery workers
(``coverfarm worker``) as real child processes, on a real Postgres and a real Redis.

These tests need committed data (several processes share it), so they use their own database,
created and migrated once per session, and each test works on the sweeps it creates. The database
is named after the test session's process and the session runs its own redis-server on a free
loopback port: several engineers' test sessions share this machine, and one must never drop the
database or flush the queues of another that is running.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import farmkit
import httpx
import pytest
from farmkit import (
    TOKEN,
    StartWorker,
    free_port,
    process_database,
    settings_from,
    start_redis,
    start_server,
    stop,
)
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.migrate import upgrade


@pytest.fixture(scope="session")
def farm_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    process = start_redis(port, tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/0"
    stop(process)


@pytest.fixture(scope="session")
def farm_env(tmp_path_factory: pytest.TempPathFactory, farm_broker: str) -> Iterator[dict[str, str]]:
    with process_database("coverfarm_test_farm_") as database_url:
        env = {
            "COVERFARM_HOME": str(tmp_path_factory.mktemp("farm-home")),
            "COVERFARM_DATABASE_URL": database_url,
            "COVERFARM_BROKER_URL": farm_broker,
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
        upgrade(settings_from(env))
        yield env


@pytest.fixture(scope="session")
def farm_settings(farm_env: dict[str, str]) -> Settings:
    return settings_from(farm_env)


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
    process, url = start_server(farm_env, tmp_path_factory.mktemp("logs") / "serve.log")
    yield url
    stop(process)


@pytest.fixture
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as client:
        yield client


@pytest.fixture
def start_worker(farm_env: dict[str, str], tmp_path: Path) -> Iterator[StartWorker]:
    started: list[subprocess.Popen[bytes]] = []

    def start(
        name: str,
        ready_timeout: float = 60,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        **extra_env: str,
    ) -> subprocess.Popen[bytes]:
        """A worker on the farm's settings, or on ``env`` (another farm) when given; ``args`` for its
        command line."""
        process = farmkit.start_worker(
            env or farm_env, tmp_path / f"{name}.log", name, ready_timeout, args=args, **extra_env
        )
        started.append(process)
        return process

    yield start
    for process in started:
        stop(process)
