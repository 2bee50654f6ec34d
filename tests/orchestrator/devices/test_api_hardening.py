"""Runners sending what the farm cannot store or should not keep whole: a blank infrastructure error, a
5 MB health-check error, NUL characters, a NaN median; and a claim of a job that does not exist. Each is
refused or stored bounded, never a 500, and nothing of a refused request is kept."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from devicetools import CLASS, device_jobs, device_result, enrol, lower_with_bundle, make_healthy, probe
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.models import DeviceRun, Job, JobStatus, Runner


def claimed_job(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings, tmp: Path
) -> tuple[int, dict[str, str], str]:
    """A device job claimed by a healthy runner: (job id, the runner's credential, the bundle)."""
    _, credential = enrol(client, admin)
    make_healthy(client, credential)
    body = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp)
    with sessions() as session:
        [job] = device_jobs(session, sweep["id"])
        job_id = job.id
    claim = client.post(f"/api/device-jobs/{job_id}/claim", headers=credential)
    assert claim.status_code == 200, claim.text
    return job_id, credential, claim.json()["bundle_sha256"]


@pytest.mark.parametrize("blank", [" ", "\n\n", " \t\r\n "])
def test_a_blank_infrastructure_error_requeues_the_job_with_a_cause(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path, blank: str,
) -> None:  # fmt: skip
    job_id, credential, _ = claimed_job(client, admin, sessions, settings, tmp_path)
    body = {"attempt": 1, "error": blank}
    response = client.post(f"/api/device-jobs/{job_id}/infra-error", headers=credential, json=body)
    assert response.status_code == 204, response.text
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status is JobStatus.QUEUED
        assert job.status_reason is not None and job.status_reason.endswith(
            "infrastructure error: no cause given"
        )


def test_a_huge_health_check_error_is_stored_clipped_and_listed_small(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session]
) -> None:
    runner_id, credential = enrol(client, admin)
    sha = client.get("/api/runners/me/health-check", headers=credential).json()[0]["sha256"]
    # Under the body limit, far over what a reason keeps.
    failed = {**device_result(sha, status="failed"), "error": "E" * 1_500_000 + " the last line"}
    report = {"device_class": CLASS, "sha256": sha, "result": failed}
    response = client.post("/api/runners/me/health-check", headers=credential, json=report)
    assert response.status_code == 200, response.text[:300]
    assert len(response.content) < 5000
    with sessions() as session:
        runner = session.get(Runner, runner_id)
        assert runner is not None and runner.state_reason is not None
        assert len(runner.state_reason) <= 2000
        assert runner.state_reason.startswith("health check on") and runner.state_reason.endswith(
            "the last line"
        )
        assert "characters cut" in runner.state_reason
    listing = client.get("/api/runners")
    assert listing.status_code == 200 and len(listing.content) < 20_000


@pytest.mark.parametrize("where", ["name", "probe"])
def test_nul_in_a_runner_name_or_probe_is_422_and_stores_nothing(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], where: str
) -> None:
    token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
    body = {"token": token, "name": "board", "probe": probe()}
    if where == "name":
        body["name"] = "bo\x00ard"
    else:
        body["probe"]["board"]["model"] = "rk\x003588"
    response = client.post("/api/runners/enrol", json=body)
    assert response.status_code == 422, response.text
    assert "NUL" in response.json()["detail"][0]["ctx"]["error"]
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Runner)) == 0
    # The token was not used up by the refusal.
    clean = {"token": token, "name": "board", "probe": probe()}
    assert client.post("/api/runners/enrol", json=clean).status_code == 201


def test_a_failed_statement_keeps_its_parameters_out_of_the_error(settings: Settings) -> None:
    """What reaches the log of a failed INSERT: the statement, never its values (a credential hash)."""
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            session.add(Runner(name="bo\x00ard", device_classes=[], probe={}, credential_hash="f" * 63 + "e",
                               state="quarantined"))  # fmt: skip
            with pytest.raises(DBAPIError) as raised:
                session.flush()
            session.rollback()
    finally:
        engine.dispose()
    assert "f" * 63 + "e" not in str(raised.value)
    assert "hidden due to hide_parameters" in str(raised.value)


def test_a_nan_median_is_refused_and_nothing_is_stored(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    job_id, credential, sha = claimed_job(client, admin, sessions, settings, tmp_path)
    result = copy.deepcopy(device_result(sha))
    result["latency"]["median_ms"] = "NaN-marker"
    text = client.build_request("POST", "/", json={"attempt": 1, "result": result}).content.decode()
    for bad in ("NaN", "Infinity", "1e999"):
        response = client.post(
            f"/api/device-jobs/{job_id}/result",
            content=text.replace('"NaN-marker"', bad),
            headers={**credential, "Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(DeviceRun)) == 0
        job = session.get(Job, job_id)
        assert job is not None and job.status is JobStatus.RUNNING


def test_claiming_a_job_that_does_not_exist_is_refused(client: TestClient, admin: dict[str, str]) -> None:
    _, credential = enrol(client, admin)
    make_healthy(client, credential)
    response = client.post("/api/device-jobs/2147483000/claim", headers=credential)
    assert response.status_code == 403 and "not a device job" in response.json()["detail"]
