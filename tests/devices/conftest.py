"""Fixtures for the device runner tests.

Two kinds: API tests on a real Postgres migrated by Alembic, one rolled-back transaction per test (like
tests/orchestrator), and process tests with a real ``coverfarm serve``, a real Celery CPU worker and real
``coverfarm runner`` processes on their own committed database and their own redis-server (like
tests/farm, whose helpers they reuse; the database is named after this test process, with a prefix of
its own, so neither suite's clean-up touches the other's).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "farm"), str(HERE.parent / "orchestrator")]

from dbtools import recreate_database, session_broker  # noqa: E402
from farmtools import (  # noqa: E402
    ROOT,
    TOKEN,
    coverfarm_command,
    free_port,
    start_redis,
    start_server,
    stop,
    wait_for,
)
from runnertools import StartRunner, child_env_with_engine, run_cli  # noqa: E402

from coverfarm.settings import Settings  # noqa: E402
from orchestrator.app import create_app  # noqa: E402
from orchestrator.db import make_engine, make_sessionmaker  # noqa: E402
from orchestrator.migrate import upgrade  # noqa: E402

API_DATABASE = "coverfarm_test_devices_api"
API_BROKER = session_broker(12)
API_TOKEN = "devices-admin-token"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
FARM_PREFIX = "coverfarm_test_devfarm_"


# --- API tests: rolled-back transactions --------------------------------------------------------


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        home=tmp_path_factory.mktemp("devices-home"),
        database_url=recreate_database(API_DATABASE),
        broker_url=API_BROKER,
        admin_token=API_TOKEN,
        policies=["act", "vqbet"],
        backends=["vulkan", "xnnpack"],
    )


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    upgrade(settings)
    engine = create_engine(settings.sqlalchemy_url)
    yield engine
    engine.dispose()


@pytest.fixture
def connection(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        outer = conn.begin()
        yield conn
        outer.rollback()


@pytest.fixture
def sessions(connection: Connection) -> sessionmaker[Session]:
    return sessionmaker(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)


@pytest.fixture
def client(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[TestClient]:
    broker = redis.Redis.from_url(API_BROKER)
    broker.flushdb()
    app = create_app(settings, sessions=sessions, background=False)
    with TestClient(app) as test_client:
        yield test_client
    broker.flushdb()
    broker.close()


@pytest.fixture
def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_TOKEN}"}


# --- process tests: the farm and its runners as real processes ----------------------------------


def _drop_abandoned(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'coverfarm_test_devfarm_%'")
    for (name,) in rows.fetchall():
        pid = name.removeprefix(FARM_PREFIX)
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def farm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    port = free_port()
    redis_process = start_redis(port, tmp_path_factory.mktemp("devices-redis"))
    database = f"{FARM_PREFIX}{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        _drop_abandoned(conn)
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    env = {
        "COVERFARM_HOME": str(tmp_path_factory.mktemp("devices-farm-home")),
        "COVERFARM_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{database}",
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
    }
    upgrade(Settings.model_validate({k.removeprefix("COVERFARM_").lower(): v for k, v in env.items()}))
    yield env
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    stop(redis_process)


@pytest.fixture(scope="session")
def farm_sessions(farm_env: dict[str, str]) -> Iterator[sessionmaker[Session]]:
    settings = Settings.model_validate({k.removeprefix("COVERFARM_").lower(): v for k, v in farm_env.items()})
    engine = make_engine(settings)
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
    with log.open("wb") as out:
        process = subprocess.Popen(
            coverfarm_command("worker", "--name", "cpu-devices@%h"),
            env=child_env_with_engine(farm_env),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_for(lambda: b" ready." in log.read_bytes() or process.poll() is not None, 60, "the CPU worker")
    assert process.poll() is None, log.read_text()
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
