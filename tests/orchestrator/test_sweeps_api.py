"""The sweeps API against a real migrated Postgres and a real Redis broker."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coverfarm.result import Options
from orchestrator.models import Cell, Event, Job, Sweep


def counts(session: Session) -> dict[str, int]:
    return {
        model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
        for model in (Sweep, Cell, Job, Event)
    }


def queued_messages(broker: redis.Redis, queue: str = "lower") -> list[Any]:
    """The task arguments of the messages waiting on a queue (kombu's Redis envelope, JSON body)."""
    envelopes = [json.loads(raw) for raw in broker.lrange(queue, 0, -1)]  # type: ignore[union-attr]
    return [json.loads(base64.b64decode(envelope["body"])) for envelope in envelopes]


def test_create_sweep_expands_cells_and_sends_after_commit(
    client: TestClient, admin: dict[str, str], session: Session, broker: redis.Redis
) -> None:
    response = client.post(
        "/api/sweeps",
        json={"policies": ["act", "vqbet"], "backends": ["vulkan", "xnnpack"], "timeout_s": 120},
        headers=admin,
    )
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["state"] == "running"
    assert sweep["counts"] == {"queued": 4}
    assert [(c["policy"], c["backend"]) for c in sweep["cells"]] == [
        ("act", "vulkan"),
        ("act", "xnnpack"),
        ("vqbet", "vulkan"),
        ("vqbet", "xnnpack"),
    ]
    cell = sweep["cells"][0]
    assert cell["pending"] is True and cell["result"] is None
    # The engine's options: the sweep's choices over the engine's defaults (coverfarm.result.Options).
    assert cell["options"] == Options(constant_prop=True, lowering="fast", timeout_s=120).model_dump(
        mode="json"
    )
    assert (cell["options"]["seed"], cell["options"]["checkpoint"]) == (0, None)
    job_ids = {c["jobs"][0]["id"] for c in sweep["cells"]}
    # One message per job, on "lower", carrying only what the worker needs to find its row.
    messages = queued_messages(broker)
    assert {args[0]["job_id"] for args, _kwargs, _embed in messages} == job_ids

    listed = client.get("/api/sweeps").json()
    assert [s["id"] for s in listed][:1] == [sweep["id"]]
    assert client.get(f"/api/sweeps/{sweep['id']}").json() == sweep
    assert client.get(f"/api/cells/{cell['id']}").json() == cell
    assert counts(session)["jobs"] == 4


@pytest.mark.parametrize(
    ("body", "loc", "needle"),
    [
        ({"policies": ["nope"], "backends": ["vulkan"]}, ["body", "policies", 0], "unknown policy 'nope'"),
        ({"policies": ["act"], "backends": ["metal"]}, ["body", "backends", 0], "unknown backend 'metal'"),
        ({"policies": [], "backends": ["vulkan"]}, ["body", "policies"], "at least 1"),
        ({"policies": ["act"], "backends": []}, ["body", "backends"], "at least 1"),
        ({"policies": ["act", "act"], "backends": ["vulkan"]}, ["body", "policies"], "'act' is listed twice"),
        ({"policies": ["act"], "backends": ["vulkan"], "timeout_s": 0}, ["body", "timeout_s"], "at least 1"),
        ({"policies": ["act"], "backends": ["vulkan"], "timeout_s": 1e6}, ["body", "timeout_s"], "below"),
        (
            {"policies": ["act"], "backends": ["vulkan"], "options": {"lowering": "magic"}},
            ["body", "options", "lowering"],
            "'stock' or 'fast'",
        ),
        ({"policies": ["act"], "backends": ["vulkan"], "colour": "red"}, ["body", "colour"], "Extra inputs"),
    ],
)
def test_invalid_sweep_is_422_and_stores_and_sends_nothing(
    client: TestClient,
    admin: dict[str, str],
    session: Session,
    broker: redis.Redis,
    body: dict[str, Any],
    loc: list[Any],
    needle: str,
) -> None:
    before = counts(session)
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(error["loc"] == loc and needle in error["msg"] for error in errors), errors
    assert counts(session) == before
    assert broker.llen("lower") == 0


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eDp5"}])
def test_unauthenticated_writes_are_401_and_change_nothing(
    client: TestClient, session: Session, broker: redis.Redis, headers: dict[str, str], admin: dict[str, str]
) -> None:
    sweep = client.post(
        "/api/sweeps", json={"policies": ["act"], "backends": ["vulkan"]}, headers=admin
    ).json()
    broker.flushdb()
    before = counts(session)
    response = client.post("/api/sweeps", json={"policies": ["act"], "backends": ["vulkan"]}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "admin token" in response.json()["detail"]
    response = client.post(f"/api/sweeps/{sweep['id']}/cancel", headers=headers)
    assert response.status_code == 401
    assert counts(session) == before
    assert broker.llen("lower") == 0
    assert client.get(f"/api/sweeps/{sweep['id']}").json()["state"] == "running"


def test_cancel_cancels_pending_jobs_and_is_idempotent(client: TestClient, admin: dict[str, str]) -> None:
    sweep = client.post(
        "/api/sweeps", json={"policies": ["act", "vqbet"], "backends": ["vulkan"]}, headers=admin
    ).json()
    cancelled = client.post(f"/api/sweeps/{sweep['id']}/cancel", headers=admin)
    assert cancelled.status_code == 200
    body = cancelled.json()
    assert body["state"] == "cancelled"
    assert body["counts"] == {"cancelled": 2}
    assert all(cell["jobs"][0]["status_reason"] == "sweep cancelled" for cell in body["cells"])
    again = client.post(f"/api/sweeps/{sweep['id']}/cancel", headers=admin).json()
    assert again["counts"] == {"cancelled": 2} and again["cancelled_at"] == body["cancelled_at"]
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "| act | - | - | - | - |" in report


def test_missing_things_are_404_with_detail(client: TestClient, admin: dict[str, str]) -> None:
    assert client.get("/api/sweeps/999999").json() == {"detail": "sweep 999999 not found"}
    assert client.get("/api/cells/999999").status_code == 404
    assert client.post("/api/sweeps/999999/cancel", headers=admin).status_code == 404
    assert client.get("/api/sweeps/999999/report.md").status_code == 404
