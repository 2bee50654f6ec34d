"""The grid, the cell details, the tracker report, the sweep diff and the CLI row of two stored sweeps
that cover every kind of cell (golden_sweep.py), compared byte for byte with the files in golden/.

A change to any of them shows here as a diff of the rendered text. When the change is meant, write the
files again with ``COVERFARM_WRITE_GOLDEN=1`` and commit them with the change that explains it.

The sweeps are built once, committed, in a database of this module's own (created fresh, so that ids
are the same on every run).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from farmkit import recreate_database, session_broker
from fastapi.testclient import TestClient
from golden_sweep import NOW, Built, build
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from coverfarm import tracker
from coverfarm.settings import Settings
from dashboard import endpoints
from dashboard.app import create_app
from orchestrator.migrate import upgrade

GOLDEN = Path(__file__).resolve().parent / "golden"
WRITE = os.environ.get("COVERFARM_WRITE_GOLDEN") == "1"
BROKER = session_broker(12)


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Built]]:
    settings = Settings(
        home=tmp_path_factory.mktemp("golden-home"),
        database_url=recreate_database("coverfarm_test_golden_views"),
        broker_url=BROKER,
        admin_token="golden-token",
        policies=[
            "act", "diffusion", "dm05", "eo1", "evo1", "fastwam", "gaussian_actor", "groot", "lingbot_va",
            "multi_task_dit", "pi0", "pi05", "pi0_fast", "smolvla", "tdmpc", "vqbet", "wall_oss_05",
            "wall_x", "xvla",
        ],
        backends=["vulkan", "xnnpack"],
    )  # fmt: skip
    upgrade(settings)
    engine = create_engine(settings.sqlalchemy_url)
    sessions = sessionmaker(bind=engine, expire_on_commit=False)
    broker = redis.Redis.from_url(BROKER)
    broker.flushdb()
    with TestClient(create_app(settings, sessions=sessions, background=False)) as client:
        built = build(client, sessions, settings)
        yield client, built
    broker.flushdb()
    broker.close()
    engine.dispose()


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages' clock (a running cell's "since", the page's own time) stopped at golden_sweep.NOW."""
    monkeypatch.setattr(endpoints, "utcnow", lambda: NOW)


def check(name: str, rendered: str) -> None:
    path = GOLDEN / name
    if WRITE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"{path} is missing: write it with COVERFARM_WRITE_GOLDEN=1"
    expected = path.read_text()
    assert rendered == expected, f"{name} differs from {path}"


def get(client: TestClient, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.text
    return response.text


def test_grid_pages(farm: tuple[TestClient, Built]) -> None:
    client, built = farm
    for number, sweep_id in enumerate(built.sweeps, start=1):
        check(f"grid-{number}.html", get(client, f"/sweeps/{sweep_id}"))


def test_cell_details(farm: tuple[TestClient, Built]) -> None:
    client, built = farm
    pages = [
        f"<!-- cell {sweep}/{policy}/{backend} -->\n{get(client, f'/cells/{cell_id}?partial=true')}"
        for (sweep, policy, backend), cell_id in built.cells.items()
    ]
    check("details.html", "\n".join(pages))


def test_reports(farm: tuple[TestClient, Built]) -> None:
    client, built = farm
    for number, sweep_id in enumerate(built.sweeps, start=1):
        check(f"report-{number}.md", get(client, f"/api/sweeps/{sweep_id}/report.md"))
    a, b = built.sweeps
    check("diff.md", get(client, f"/api/sweeps/{a}/diff/{b}.md"))


def test_cli_rows(farm: tuple[TestClient, Built]) -> None:
    _, built = farm
    rows = [
        f"$ coverfarm analyze --policy {doc.policy} --backend {doc.backend}\n{tracker.analyze_output(doc)}\n"
        for doc in built.documents
    ]
    check("cli-rows.md", "\n".join(rows))


def test_index_page(farm: tuple[TestClient, Built]) -> None:
    """The sweep list: each sweep's state and its cells counted per state in the database."""
    client, _ = farm
    check("index.html", get(client, "/"))
