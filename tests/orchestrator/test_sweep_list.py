"""GET /api/sweeps: a light, paged view (cells counted per state in the database, no documents)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from test_jobs_service import document

from coverfarm.result import StageStatus
from coverfarm.settings import Settings
from orchestrator.db import take_outbox
from orchestrator.jobs import service as jobs
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate


def new_sweep(session: Session, settings: Settings, policies: list[str], backends: list[str]) -> int:
    sweep = sweeps.create(session, settings, SweepCreate(policies=policies, backends=backends, timeout_s=60))
    take_outbox(session)
    return sweep.id


def test_list_counts_cell_states_like_the_full_view_without_documents(
    client: TestClient, session: Session, settings: Settings
) -> None:
    sweep_id = new_sweep(session, settings, ["vqbet", "act", "diffusion"], ["xnnpack", "vulkan"])
    cells = sweeps.get(session, sweep_id).cells
    job = {(cell.policy, cell.backend): cell.jobs[0].id for cell in cells}
    for key, outcome in [
        (("act", "vulkan"), StageStatus.OK),
        (("act", "xnnpack"), StageStatus.FAILED),
        (("vqbet", "vulkan"), StageStatus.SLOW),  # its re-run on lower.long is queued: still "slow"
    ]:
        assert jobs.start(session, job[key], "w1", settings) is not None
        jobs.finish(session, job[key], 1, document(key[0], export=outcome), settings)
    assert jobs.start(session, job[("diffusion", "vulkan")], "w1", settings) is not None
    session.flush()
    take_outbox(session)

    response = client.get("/api/sweeps")
    assert response.status_code == 200
    assert response.headers["x-total-count"] == "1"
    [summary] = response.json()
    full = client.get(f"/api/sweeps/{sweep_id}").json()
    assert summary["counts"] == full["counts"] == {"failed": 1, "ok": 1, "queued": 2, "running": 1, "slow": 1}
    assert summary == {key: value for key, value in full.items() if key != "cells"}
    assert (summary["policies"], summary["backends"]) == (
        ["vqbet", "act", "diffusion"],
        ["xnnpack", "vulkan"],
    )
    assert summary["state"] == "running"
    assert "cells" not in summary and "document" not in response.text


def test_list_pages_newest_first(client: TestClient, session: Session, settings: Settings) -> None:
    ids = [new_sweep(session, settings, ["act"], ["vulkan"]) for _ in range(5)]
    session.flush()
    first = client.get("/api/sweeps", params={"limit": 2})
    second = client.get("/api/sweeps", params={"limit": 2, "offset": 2})
    last = client.get("/api/sweeps", params={"limit": 2, "offset": 4})
    assert [s["id"] for s in first.json()] == [ids[4], ids[3]]
    assert [s["id"] for s in second.json()] == [ids[2], ids[1]]
    assert [s["id"] for s in last.json()] == [ids[0]]
    assert {r.headers["x-total-count"] for r in (first, second, last)} == {"5"}
    assert client.get("/api/sweeps", params={"offset": 5}).json() == []
    assert client.get("/api/sweeps", params={"limit": 0}).status_code == 422
    assert client.get("/api/sweeps", params={"limit": 501}).status_code == 422
    # A cancelled sweep is "cancelled" whatever its cells did.
    client.post(f"/api/sweeps/{ids[0]}/cancel", headers={"Authorization": "Bearer test-admin-token"})
    cancelled = client.get("/api/sweeps", params={"limit": 1, "offset": 4}).json()[0]
    assert (cancelled["state"], cancelled["counts"]) == ("cancelled", {"cancelled": 1})
