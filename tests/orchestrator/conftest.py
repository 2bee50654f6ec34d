"""Fixtures for the orchestrator's tests: a real Postgres migrated by Alembic, one rolled-back
transaction per test, the app bound to it, and a real Redis (database 13, or its xdist worker's
shifted one: ``dbtools.session_broker``) as the broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from dbtools import recreate_database, session_broker
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from orchestrator.app import create_app
from orchestrator.migrate import upgrade

DATABASE = "coverfarm_test_api"
BROKER = session_broker(13)
TOKEN = "test-admin-token"


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        home=tmp_path_factory.mktemp("home"),
        database_url=recreate_database(DATABASE),
        broker_url=BROKER,
        admin_token=TOKEN,
        policies=["act", "vqbet", "diffusion"],
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
    # Each request's commit becomes a savepoint release inside the test's transaction.
    return sessionmaker(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)


@pytest.fixture
def session(sessions: sessionmaker[Session]) -> Iterator[Session]:
    with sessions() as session:
        yield session


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(BROKER)
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
def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}
