"""Fixtures for the grid's tests.

Rendering tests: a real Postgres migrated by Alembic, one rolled-back transaction per test, and the
orchestrator app (with the grid mounted) bound to it. Browser tests: their own database with committed
data, a real ``coverfarm serve`` (restartable) and real ``coverfarm worker`` processes running a gated
stand-in engine, and headless Chromium driven by Selenium.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import browsertools
import httpx
import pytest
import redis
from farmkit import (
    admin,
    broker,
    client,
    connection,
    engine,
    recreate_database,
    session_broker,
    sessions,
    settings_from,
    stop,
)
from sqlalchemy.orm import Session, sessionmaker

from coverfarm import catalog
from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.migrate import upgrade

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

__all__ = ["admin", "broker", "client", "connection", "engine", "sessions"]  # farmkit's fixtures

TOKEN = "dashboard-test-token"


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        home=tmp_path_factory.mktemp("dashboard-home"),
        database_url=recreate_database("coverfarm_test_dashboard"),
        broker_url=session_broker(12),
        admin_token=TOKEN,
        policies=list(catalog.POLICIES),
        backends=["vulkan", "xnnpack"],
    )


# --- browser tests ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def live_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of the browser tests' ``coverfarm serve`` and ``coverfarm worker`` processes."""
    redis.Redis.from_url(browsertools.LIVE_BROKER).flushdb()
    env = {
        "COVERFARM_HOME": str(tmp_path_factory.mktemp("live-home")),
        "COVERFARM_DATABASE_URL": recreate_database(browsertools.LIVE_DATABASE),
        "COVERFARM_BROKER_URL": browsertools.LIVE_BROKER,
        "COVERFARM_ADMIN_TOKEN": TOKEN,
        # The tracker's policies, and more made-up ones than a grid page holds (for the rows it loads).
        "COVERFARM_POLICIES": ",".join([*catalog.POLICIES, *browsertools.BIG_SWEEP]),
        "COVERFARM_BACKENDS": "vulkan,xnnpack",
        "COVERFARM_ENGINE": "gated_engine:analyze",
        "COVERFARM_STAGE_TIMEOUT_S": "30",
        "COVERFARM_LONG_TIMEOUT_S": "1200",
        "COVERFARM_HEARTBEAT_INTERVAL_S": "1",
        # Long: cells this test process marks running (it sends no heartbeats) must stay running.
        "COVERFARM_HEARTBEAT_TIMEOUT_S": "600",
        "COVERFARM_RECONCILE_INTERVAL_S": "1",
        "GATE_DIR": str(tmp_path_factory.mktemp("gates")),
        "STANDIN_SECONDS": "0.05",
    }
    upgrade(settings_from(env))
    return env


@pytest.fixture(scope="session")
def live_settings(live_env: dict[str, str]) -> Settings:
    return settings_from(live_env)


@pytest.fixture(scope="session")
def live_sessions(live_settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(live_settings)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def orchestrator(
    live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[browsertools.Orchestrator]:
    browsertools.require_chromium()
    server = browsertools.Orchestrator(live_env, tmp_path_factory.mktemp("serve-logs"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def api(orchestrator: browsertools.Orchestrator) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=orchestrator.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    ) as client:
        yield client


@pytest.fixture
def gates(live_env: dict[str, str]) -> Iterator[browsertools.Gates]:
    gates = browsertools.Gates(Path(live_env["GATE_DIR"]))
    gates.close_all()
    yield gates
    gates.open_all()  # whatever the test left waiting finishes, so its worker stops at once


@pytest.fixture
def worker(
    live_env: dict[str, str], gates: browsertools.Gates, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    process = browsertools.start_grid_worker(live_env, tmp_path / "worker.log")
    yield process
    gates.open_all()
    stop(process)


@pytest.fixture(scope="session")
def browser() -> Iterator[WebDriver]:
    browsertools.require_chromium()
    driver = browsertools.chromium(javascript=True)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    return browsertools.screenshot_dir()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if browsertools.SAVED:
        directory = browsertools.screenshot_dir()
        names = ", ".join(path.name for path in browsertools.SAVED)
        terminalreporter.write_line(f"dashboard screenshots in {directory}: {names}")
