"""A page built from several statements reads one snapshot: a worker's commit that lands between two of
them shows on the next request, never half on this one.

Against the app's own engine (not the rolled-back connection of the rendering tests), on Postgres and on
the embedded default's SQLite file, with the commit made by a second engine from inside the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashtools import finished, grid_cells, store, text_of, worker_online
from farmkit import recreate_database, session_broker
from fastapi.testclient import TestClient
from sqlalchemy import event

from coverfarm.settings import Settings
from dashboard.app import create_app
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.migrate import upgrade

TOKEN = "snapshot-test-token"
ACT_ROW = ["90 / 100 (90%)", "80%", "3", "✓", "no device"]


@pytest.fixture(params=["postgres", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    url = recreate_database("coverfarm_test_snapshot") if request.param == "postgres" else None
    settings = Settings(
        home=tmp_path,
        database_url=url,
        broker_url=session_broker(12),
        admin_token=TOKEN,
        policies=["act"],
        backends=["vulkan"],
    )
    upgrade(settings)
    return settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, background=False)) as test_client:
        yield test_client


def test_live_json_reads_one_snapshot_while_a_worker_commits_between_its_statements(
    settings: Settings, client: TestClient
) -> None:
    admin = {"Authorization": f"Bearer {TOKEN}"}
    body = {"policies": ["act"], "backends": ["vulkan"]}
    sweep = client.post("/api/sweeps", json=body, headers=admin).json()
    cell = sweep["cells"][0]
    worker = make_engine(settings)
    worker_sessions = make_sessionmaker(worker)
    worker_online(worker_sessions, settings)

    # The worker stores the cell's result (its start and finish, committed) right after the request's
    # first statement, before the rest of the page is read.
    reads: list[str] = []

    def commit_after_the_first_read(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().upper().startswith("SELECT"):
            return
        reads.append(statement)
        if len(reads) == 1:
            store(worker_sessions, settings, cell["jobs"][0]["id"], finished("act", "vulkan"))

    app_engine = client.app.state.sessions.kw["bind"]  # type: ignore[attr-defined]
    event.listen(app_engine, "after_cursor_execute", commit_after_the_first_read)
    try:
        live = client.get(f"/sweeps/{sweep['id']}/live.json").json()
    finally:
        event.remove(app_engine, "after_cursor_execute", commit_after_the_first_read)
    assert len(reads) > 2, reads  # the page is several statements, the commit landed between them

    # All of it as before the commit: queued in the progress bar and in the cell.
    assert "1 queued" in text_of(live["progress"]), live["progress"]
    assert grid_cells(live["cells"][str(cell["id"])])[cell["id"]] == ["⏳ queued", "⏳", "⏳", "⏳", "⏳"]

    # The next request reads all of it after.
    after = client.get(f"/sweeps/{sweep['id']}/live.json").json()
    assert "1 done" in text_of(after["progress"])
    assert grid_cells(after["cells"][str(cell["id"])])[cell["id"]] == ACT_ROW
    worker.dispose()
