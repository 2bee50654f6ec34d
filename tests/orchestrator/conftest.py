"""Fixtures for the orchestrator's tests: a real Postgres migrated by Alembic, one rolled-back
transaction per test, the app bound to it, and a real Redis (database 13, or its xdist worker's
shifted one) as the broker (``farmkit``)."""

from __future__ import annotations

import pytest
from farmkit import (
    admin,
    broker,
    client,
    connection,
    engine,
    recreate_database,
    session,
    session_broker,
    sessions,
)

from coverfarm.settings import Settings

__all__ = ["admin", "broker", "client", "connection", "engine", "session", "sessions"]  # farmkit's fixtures


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        home=tmp_path_factory.mktemp("home"),
        database_url=recreate_database("coverfarm_test_api"),
        broker_url=session_broker(13),
        admin_token="test-admin-token",
        policies=["act", "vqbet", "diffusion"],
        backends=["vulkan", "xnnpack"],
    )
