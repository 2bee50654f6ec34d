"""A big sweep's reads: GET /api/sweeps/{id}/summary (counts per state and per backend column) and
GET /api/sweeps/{id}/cells (paged, filtered, no documents), each agreeing with the full view."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from test_jobs_service import document
from test_sweep_list import new_sweep

from coverfarm.result import StageStatus
from coverfarm.settings import Settings
from orchestrator.db import take_outbox
from orchestrator.inputs import DB_INT_MAX
from orchestrator.jobs import service as jobs
from orchestrator.jobs.reconcile import reconcile
from orchestrator.models import Job, utcnow
from orchestrator.sweeps import service as sweeps


def measured_sweep(session: Session, settings: Settings) -> int:
    """vqbet, act, diffusion x xnnpack, vulkan: act/vulkan ok (90 of 100 ops), act/xnnpack failed (50),
    vqbet/vulkan slow (70, its re-run queued), diffusion/vulkan running, the rest queued."""
    sweep_id = new_sweep(session, settings, ["vqbet", "act", "diffusion"], ["xnnpack", "vulkan"])
    job = {(cell.policy, cell.backend): cell.jobs[0].id for cell in sweeps.get(session, sweep_id).cells}
    for key, outcome, on_backend in [
        (("act", "vulkan"), StageStatus.OK, 90),
        (("act", "xnnpack"), StageStatus.FAILED, 50),
        (("vqbet", "vulkan"), StageStatus.SLOW, 70),
    ]:
        assert jobs.start(session, job[key], "w1", settings) is not None
        jobs.finish(session, job[key], 1, document(key[0], export=outcome, on_backend=on_backend), settings)
    assert jobs.start(session, job[("diffusion", "vulkan")], "w1", settings) is not None
    session.flush()
    take_outbox(session)
    return sweep_id


def test_summary_counts_states_and_backend_columns_without_documents(
    client: TestClient, session: Session, settings: Settings
) -> None:
    sweep_id = measured_sweep(session, settings)
    response = client.get(f"/api/sweeps/{sweep_id}/summary")
    assert response.status_code == 200
    summary = response.json()
    full = client.get(f"/api/sweeps/{sweep_id}").json()
    [listed] = [entry for entry in client.get("/api/sweeps").json() if entry["id"] == sweep_id]
    assert {key: value for key, value in summary.items() if key != "columns"} == listed
    assert summary["counts"] == full["counts"] == {"failed": 1, "ok": 1, "queued": 2, "running": 1, "slow": 1}
    none = {"macs_on_backend": None, "macs_total": None, "macs_share": None}
    assert summary["columns"] == [
        {"backend": "xnnpack", "cells": 3, "measured": 1, "exported": 0, "ops_on_backend": 50,
         "ops_total": 100, "ops_share": 0.5, **none},
        {"backend": "vulkan", "cells": 3, "measured": 2, "exported": 1, "ops_on_backend": 160,
         "ops_total": 200, "ops_share": 0.8, **none},
    ]  # fmt: skip
    assert "document" not in response.text and 'cells":[' not in response.text


def test_cells_come_in_pages_filtered_each_with_its_documents_url(
    client: TestClient, session: Session, settings: Settings
) -> None:
    sweep_id = measured_sweep(session, settings)
    full = {cell["id"]: cell for cell in client.get(f"/api/sweeps/{sweep_id}").json()["cells"]}

    def page(**params: Any) -> dict[str, Any]:
        response = client.get(f"/api/sweeps/{sweep_id}/cells", params=params)
        assert response.status_code == 200, response.text
        assert "document" not in response.text
        body: dict[str, Any] = response.json()
        assert response.headers["x-total-count"] == str(body["total"])
        return body

    first, second = page(limit=4), page(limit=4, offset=4)
    assert first["total"] == second["total"] == 6
    cells = first["cells"] + second["cells"]
    assert [cell["id"] for cell in cells] == sorted(full)
    for cell in cells:
        whole = full[cell["id"]]
        assert (cell["policy"], cell["backend"], cell["state"], cell["pending"]) == (
            whole["policy"], whole["backend"], whole["state"], whole["pending"],
        )  # fmt: skip
        if whole["result"] is None:
            assert cell["result"] is None
        else:
            assert cell["result"] == {k: v for k, v in whole["result"].items() if k != "document"}
        behind = client.get(cell["url"]).json()
        assert behind["id"] == cell["id"] and behind["result"] == whole["result"]

    def picked(**params: Any) -> list[tuple[str, str, str]]:
        return [(c["policy"], c["backend"], c["state"]) for c in page(**params)["cells"]]

    assert picked(policy="act") == [("act", "xnnpack", "failed"), ("act", "vulkan", "ok")]
    assert picked(backend="vulkan", state="slow") == [("vqbet", "vulkan", "slow")]
    assert picked(state="queued") == [("vqbet", "xnnpack", "queued"), ("diffusion", "xnnpack", "queued")]
    assert picked(policy="act", backend="vulkan", state="queued") == []
    assert page(policy="nope")["total"] == 0
    assert page(offset=6)["cells"] == []


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=501",
        "offset=-1",
        f"offset={DB_INT_MAX + 1}",
        "state=done",
        "policy=" + "a" * 65,
        "backend=",
        "limit=ten",
    ],
)
def test_bad_page_parameters_are_422(
    client: TestClient, session: Session, settings: Settings, query: str
) -> None:
    sweep_id = new_sweep(session, settings, ["act"], ["vulkan"])
    response = client.get(f"/api/sweeps/{sweep_id}/cells?{query}")
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][0] == "query"


def test_unknown_and_out_of_range_sweeps(client: TestClient) -> None:
    for path in ("summary", "cells"):
        missing = client.get(f"/api/sweeps/999999/{path}")
        assert missing.status_code == 404 and "sweep 999999 not found" in missing.text
        for sweep_id in (0, DB_INT_MAX + 1):
            assert client.get(f"/api/sweeps/{sweep_id}/{path}").status_code == 422


def test_each_cells_kept_state_follows_its_jobs_through_every_transition(
    client: TestClient, session: Session, settings: Settings
) -> None:
    """The state and pending flag a page and the summary read off each cell (kept as its jobs change)
    are what the full view derives from the jobs, after each step: started, slow with its re-run
    queued, the re-run running, lost and re-queued by the reconciler, finished, and cancelled."""
    sweep_id = new_sweep(session, settings, ["vqbet", "act"], ["vulkan"])
    lower = {cell.policy: cell.jobs[0].id for cell in sweeps.get(session, sweep_id).cells}
    seen: list[dict[str, tuple[str, bool]]] = []

    def agree() -> None:
        session.flush()
        take_outbox(session)
        session.expire_all()
        full = client.get(f"/api/sweeps/{sweep_id}").json()
        paged = client.get(f"/api/sweeps/{sweep_id}/cells").json()["cells"]
        kept = {cell["policy"]: (cell["state"], cell["pending"]) for cell in paged}
        assert kept == {cell["policy"]: (cell["state"], cell["pending"]) for cell in full["cells"]}
        summary = client.get(f"/api/sweeps/{sweep_id}/summary").json()
        assert (summary["counts"], summary["state"]) == (full["counts"], full["state"])
        seen.append(kept)

    agree()
    assert jobs.start(session, lower["vqbet"], "w1", settings) is not None
    agree()
    jobs.finish(session, lower["vqbet"], 1, document("vqbet", export=StageStatus.SLOW), settings)
    agree()
    rerun = next(job.id for job in sweeps.get(session, sweep_id).cells[0].jobs if job.stage == "lower.long")
    assert jobs.start(session, rerun, "w1", settings) is not None
    agree()
    job = session.get_one(Job, rerun)
    job.heartbeat_at = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s + 1)
    assert rerun in reconcile(session, settings)
    agree()
    assert jobs.start(session, rerun, "w2", settings) is not None
    jobs.finish(session, rerun, 2, document("vqbet"), settings)
    agree()
    assert jobs.start(session, lower["act"], "w1", settings) is not None
    agree()
    sweeps.cancel(session, sweep_id)
    agree()
    assert [step["vqbet"] for step in seen] == [
        ("queued", True), ("running", True), ("slow", True), ("slow", True), ("slow", True), ("ok", False),
        ("ok", False), ("ok", False),
    ]  # fmt: skip
    assert [step["act"] for step in seen][-2:] == [("running", True), ("cancelled", False)]
    result_ids = {
        cell.policy: max((job.result.id for job in cell.jobs if job.result is not None), default=None)
        for cell in sweeps.get(session, sweep_id).cells
    }
    assert {cell.policy: cell.result_id for cell in sweeps.get(session, sweep_id).cells} == result_ids
