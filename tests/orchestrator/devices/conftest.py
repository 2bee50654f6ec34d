"""Fixtures for the device runner tests.

Two kinds: API tests on a real Postgres migrated by Alembic, one rolled-back transaction per test (like
tests/orchestrator), and process tests with a real ``coverfarm serve``, a real Celery CPU worker and real
``coverfarm runner`` processes on their own committed database and their own redis-server (like
tests/farm; the database is named after this test process, with a prefix of its own, so neither suite's
clean-up touches the other's). Both come from ``farmkit``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from farmkit import (
    FARM,
    ROOT,
    TOKEN,
    admin,
    broker,
    client,
    connection,
    coverfarm_command,
    engine,
    free_port,
    process_database,
    recreate_database,
    session_broker,
    sessions,
    settings_from,
    start_redis,
    start_server,
    start_worker,
    stop,
)
from runnertools import HERE, StartRunner, child_env_with_engine, run_cli
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.migrate import upgrade

__all__ = ["admin", "broker", "client", "connection", "engine", "sessions"]  # farmkit's fixtures

# bundle_engine (imported by devicetools in this process, too) wraps the farm's stand-in engine.
sys.path.insert(0, str(FARM))


# --- API tests: rolled-back transactions --------------------------------------------------------


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        home=tmp_path_factory.mktemp("devices-home"),
        database_url=recreate_database("coverfarm_test_devices_api"),
        broker_url=session_broker(12),
        admin_token="devices-admin-token",
        policies=["act", "vqbet"],
        backends=["vulkan", "xnnpack"],
    )


# --- process tests: the farm and its runners as real processes ----------------------------------


@pytest.fixture(scope="session")
def farm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    port = free_port()
    redis_process = start_redis(port, tmp_path_factory.mktemp("devices-redis"))
    with process_database("coverfarm_test_devfarm_") as database_url:
        env = {
            "COVERFARM_HOME": str(tmp_path_factory.mktemp("devices-farm-home")),
            "COVERFARM_DATABASE_URL": database_url,
            "COVERFARM_BROKER_URL": f"redis://127.0.0.1:{port}/0",
            "COVERFARM_ADMIN_TOKEN": TOKEN,
            "COVERFARM_POLICIES": "act,vqbet,diffusion,tdmpc",
            "COVERFARM_BACKENDS": "vulkan,xnnpack",
            "COVERFARM_ENGINE": "bundle_engine:analyze",
            "COVERFARM_STAGE_TIMEOUT_S": "30",
            "COVERFARM_LONG_TIMEOUT_S": "1200",
            "COVERFARM_DEVICE_TIMEOUT_S": "120",
            "COVERFARM_HEARTBEAT_INTERVAL_S": "1",
            "COVERFARM_HEARTBEAT_TIMEOUT_S": "8",
            "COVERFARM_RECONCILE_INTERVAL_S": "0.5",
            "COVERFARM_TIMING__MIN_S": "0.5",  # the stand-in bundles are tiny; the rules still apply
            "COVERFARM_TIMING__REPLICAS": "2",  # the fewest with an interval: each is a fresh process
        }
        upgrade(settings_from(env))
        yield env
    stop(redis_process)


@pytest.fixture(scope="session")
def farm_sessions(farm_env: dict[str, str]) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings_from(farm_env))
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def server(farm_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, url = start_server(farm_env, tmp_path_factory.mktemp("devices-logs") / "serve.log")
    yield url
    stop(process)


@pytest.fixture(scope="session")
def cpu_worker(
    farm_env: dict[str, str], server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    log = tmp_path_factory.mktemp("devices-worker") / "worker.log"
    process = start_worker(farm_env, log, "cpu-devices", path=[HERE])
    yield
    stop(process)


@pytest.fixture
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        yield client


@pytest.fixture
def register_runner(
    farm_env: dict[str, str], server: str, api: httpx.Client, tmp_path: Path
) -> Callable[[str], Path]:
    """Enrol a runner with a real one-time token; returns its credential file. It takes no eager-baseline
    jobs: these tests' bundles come from a stand-in engine (test_farm_real_act.py times the real one)."""

    def register(name: str) -> Path:
        token = run_cli(farm_env, "token", "create", "--url", server, "--token", TOKEN)
        assert token.returncode == 0, token.stderr
        config = tmp_path / f"{name}.json"
        done = run_cli(
            farm_env, "runner", "register", "--url", server, "--token", token.stdout.strip(),
            "--name", name, "--config", str(config), "--no-baseline",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return config

    return register


@pytest.fixture
def start_runner(farm_env: dict[str, str], tmp_path: Path) -> Iterator[StartRunner]:
    started: list[subprocess.Popen[bytes]] = []

    def start(config: Path, *args: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"{config.stem}-{len(started)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                coverfarm_command("runner", "start", "--config", str(config), *args),
                env=child_env_with_engine(farm_env),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the test can SIGKILL all of it
            )
        started.append(process)
        return process

    yield start
    for process in started:
        stop(process)
