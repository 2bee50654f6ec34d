"""What the database and farm-process tests share (tests/orchestrator, dashboard, devices and farm).

A plain module: tests/ is on ``sys.path`` through tests/conftest.py, and test files must not import a
conftest, whose name every test directory shares.

- Databases: ``recreate_database`` (an empty Postgres database per xdist worker, for a directory's
  rolled-back tests), ``process_database`` (a committed database named after this test process, for
  tests whose child processes share it), ``session_broker`` (a Redis database per xdist worker).
- Rolled-back fixtures, bound to the directory's own ``settings`` fixture: ``engine`` (migrated by
  Alembic, never ``create_all``), ``connection`` (one transaction per test, rolled back), ``sessions`` and
  ``session`` (each commit a savepoint release inside it), ``broker`` (the settings' Redis database,
  flushed), ``client`` (the app bound to them) and ``admin`` (the settings' admin token as a header). A
  conftest imports the ones its directory uses.
- Processes, each in its own process group: ``start_redis`` (a throw-away redis-server),
  ``start_server`` (``coverfarm serve``), ``start_worker`` (``coverfarm worker``), and ``stop``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from coverfarm_cli.processes import stop_group
from dashboard.app import create_app
from orchestrator.migrate import upgrade

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FARM = TESTS / "farm"  # the stand-in engine (standin_engine.py) the farm's workers run
TOKEN = "farm-test-token"

StartWorker = Callable[..., subprocess.Popen[bytes]]


# --- databases --------------------------------------------------------------------------------------


def _xdist_worker() -> int:
    """This test process's index among pytest-xdist's workers (gw0, gw1, ...); 0 without xdist."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


# Two test sessions on one machine (two checkouts, say) keep apart by a name of their own: its databases
# carry the suffix, and its Redis databases live on that session's own redis-server.
SESSION_SUFFIX = os.environ.get("COVERFARM_TEST_SESSION", "")
SESSION_REDIS = os.environ.get("COVERFARM_TEST_REDIS", "127.0.0.1:6379")


def recreate_database(name: str) -> str:
    """An empty Postgres database (dropped first if a previous run left it), as a URL. Each xdist worker
    gets its own database of that name (suffixed with its index), so parallel workers never share one."""
    if worker := _xdist_worker():
        name = f"{name}_gw{worker}"
    if SESSION_SUFFIX:
        name = f"{name}_{SESSION_SUFFIX}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


# How far each xdist worker's Redis databases sit below the kit's own (11-13): Redis has 16 databases,
# so four workers fit (gw0 11-13, gw1 7-9, gw2 3-5, gw3 0-2).
_BROKER_SHIFTS = (0, 4, 8, 11)


def session_broker(database: int) -> str:
    """The machine's Redis (6379) as a broker URL on ``database``, shifted down per xdist worker
    (``_BROKER_SHIFTS``): tests that flush their broker database never flush another worker's."""
    worker = _xdist_worker()
    assert worker < len(_BROKER_SHIFTS), f"no Redis database left for xdist worker {worker}"
    shifted = database - _BROKER_SHIFTS[worker]
    assert 0 <= shifted < 16, f"Redis database {shifted} of xdist worker {worker} does not exist"
    return f"redis://{SESSION_REDIS}/{shifted}"


@contextlib.contextmanager
def process_database(prefix: str) -> Iterator[str]:
    """A committed database named ``<prefix><this process's pid>``, as a URL, dropped at the end.

    Several people's test sessions share the machine's Postgres: a session only ever drops its own
    database, and those of earlier sessions of the same prefix whose process is gone (killed before
    their teardown)."""
    database = f"{prefix}{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{prefix}%",))
        for (name,) in rows.fetchall():
            pid = name.removeprefix(prefix)
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{database}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def settings_from(env: dict[str, str]) -> Settings:
    """The farm's settings as its processes read them from ``env`` (its ``COVERFARM_`` variables)."""
    prefix = "COVERFARM_"
    values = {key.removeprefix(prefix).lower(): value for key, value in env.items() if key.startswith(prefix)}
    return Settings.model_validate(values)


# --- rolled-back fixtures (each directory defines ``settings``) -------------------------------------


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
    # Each request's (or unit of work's) commit becomes a savepoint release inside the test's transaction.
    return sessionmaker(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)


@pytest.fixture
def session(sessions: sessionmaker[Session]) -> Iterator[Session]:
    with sessions() as session:
        yield session


@pytest.fixture
def broker(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.broker_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def client(settings: Settings, sessions: sessionmaker[Session], broker: redis.Redis) -> Iterator[TestClient]:
    app = create_app(settings, sessions=sessions, background=False)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def admin(settings: Settings) -> dict[str, str]:
    assert settings.admin_token is not None
    return {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}


# --- processes --------------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    """Poll ``predicate`` (test-side only) until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def sweep_done(api: httpx.Client, sweep_id: int) -> dict[str, Any] | None:
    sweep: dict[str, Any] = api.get(f"/api/sweeps/{sweep_id}").json()
    return sweep if sweep["state"] == "done" else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# Not a farm setting: the engine's session-wide trace cache (tests/conftest.py), which the workers'
# stage child processes must share with the test session so that each policy is traced once.
INHERITED = ("COVERFARM_TRACE_CACHE",)


def child_env(farm_env: dict[str, str], path: Sequence[Path] = (), **extra: str) -> dict[str, str]:
    """This environment minus any COVERFARM_ settings (but the trace cache), plus the test's; the
    directories in ``path`` and the farm's stand-in engine importable."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("COVERFARM_") or key in INHERITED
    }
    env |= farm_env | extra
    env["PYTHONPATH"] = os.pathsep.join(str(directory) for directory in [*path, FARM, ROOT])
    return env


def coverfarm_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from coverfarm_cli import main; sys.exit(main())", *args]


def start_server(
    env: dict[str, str],
    log: Path,
    port: int | None = None,
    path: Sequence[Path] = (),
    open_files: int | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """``coverfarm serve`` on ``port`` (a free one by default) as a child process (its own group), once
    it answers; (process, base URL). ``open_files``: the process's limit on open files (soft and hard)."""
    port = port or free_port()

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    with log.open("wb") as out:
        process = subprocess.Popen(
            coverfarm_command("serve", "--port", str(port)),
            env=child_env(env, path),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=limit,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/api/sweeps", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise RuntimeError(f"coverfarm serve did not start:\n{log.read_text()}")
        time.sleep(0.2)


def start_worker(
    env: dict[str, str],
    log: Path,
    name: str,
    ready_timeout: float = 60,
    path: Sequence[Path] = (),
    args: Sequence[str] = (),
    **extra: str,
) -> subprocess.Popen[bytes]:
    """``coverfarm worker --name <name>@%h [args]`` as a child process (its own group: a test can SIGKILL
    all of it), once Celery says it is ready."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            coverfarm_command("worker", "--name", f"{name}@%h", *args),
            env=child_env(env, path, **extra),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + ready_timeout
    while b" ready." not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise RuntimeError(f"worker {name} did not start:\n{log.read_text()}")
        time.sleep(0.2)
    return process


def start_redis(port: int, folder: Path) -> subprocess.Popen[bytes]:
    """A throw-away redis-server on loopback ``port`` that keeps nothing on disk (a restart loses
    every message, the worst case for the farm)."""
    process = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(folder), "--logfile", str(folder / f"redis-{port}.log")],
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return process
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (a warm shutdown), SIGKILL it if that takes over 10 s."""
    stop_group(process, grace_s=10)
