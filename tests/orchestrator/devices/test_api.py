"""Enrolment, credentials, health, device jobs and offline imports through the API, on a real Postgres."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

from devicetools import (
    CLASS,
    device_jobs,
    device_result,
    enrol,
    grid_device_texts,
    lower_with_bundle,
    make_healthy,
    probe,
)
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.queues import device_queue
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from farmrun.signing import new_key_pair, sign
from orchestrator.devices import service as devices
from orchestrator.models import DeviceRun, EnrolmentToken, Job, JobStatus, Runner, Sweep, utcnow


def device_run_count(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(DeviceRun)) or 0


def submit(client: TestClient, admin: dict[str, str], **extra: object) -> dict[str, object]:
    body = {"policies": ["act"], "backends": ["xnnpack", "vulkan"], "device_classes": [CLASS], **extra}
    response = client.post("/api/sweeps", headers=admin, json=body)
    assert response.status_code == 201, response.text
    sweep: dict[str, object] = response.json()
    return sweep


def test_tokens_are_one_time_hashed_and_admin_only(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session]
) -> None:
    assert client.post("/api/enrolment-tokens", json={}).status_code == 401
    assert client.post("/api/enrolment-tokens", headers=admin, json={"expires_in_s": -1}).status_code == 422
    token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
    with sessions() as session:
        stored = session.scalars(select(EnrolmentToken.token_hash)).all()
    assert token not in stored and len(stored) == 1

    body = {"token": token, "name": "rk3588", "probe": probe()}
    first = client.post("/api/runners/enrol", json=body)
    assert first.status_code == 201, first.text
    assert first.json()["state"] == "quarantined"
    again = client.post("/api/runners/enrol", json=body)
    assert again.status_code == 401
    assert "already used" in again.json()["detail"]

    expired = client.post("/api/enrolment-tokens", headers=admin, json={"expires_in_s": 1}).json()["token"]
    with sessions() as session:
        for row in session.scalars(select(EnrolmentToken).where(EnrolmentToken.used_at.is_(None))):
            row.expires_at = utcnow() - timedelta(seconds=1)
        session.commit()
    assert client.post("/api/runners/enrol", json={**body, "token": expired}).status_code == 401


def test_enrolment_refuses_malformed_or_unknown_classes(client: TestClient, admin: dict[str, str]) -> None:
    for classes, words in (([], "offers no device class"), (["Mali G610"], "not a device class name"),
                           (["npu-foo-qnn"], "not one of")):  # fmt: skip
        token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
        response = client.post(
            "/api/runners/enrol", json={"token": token, "name": "b", "probe": probe(classes)}
        )
        assert response.status_code == 422, response.text
        assert words in response.json()["detail"][0]["msg"]


def test_enrolment_keeps_only_the_classes_of_the_farms_backends(
    client: TestClient, admin: dict[str, str]
) -> None:
    """A host whose runtime also offers a backend this farm (vulkan, xnnpack) does not measure, such as
    OpenVINO's CPU class beside XNNPACK's, enrols for the farm's classes."""
    token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
    offered = ["cpu-x86_64-openvino", "cpu-x86_64-xnnpack"]
    response = client.post("/api/runners/enrol", json={"token": token, "name": "b", "probe": probe(offered)})
    assert response.status_code == 201, response.text
    assert response.json()["device_classes"] == ["cpu-x86_64-xnnpack"]


def test_credential_is_stored_hashed_and_revocable(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session]
) -> None:
    runner_id, credential = enrol(client, admin)
    with sessions() as session:
        runner = session.get(Runner, runner_id)
        assert runner is not None
        assert credential["Authorization"].split(".", 1)[1] not in runner.credential_hash
    assert client.post("/api/runners/me/heartbeat", headers=credential).json()["state"] == "quarantined"
    forged = {"Authorization": f"Bearer {runner_id}.not-the-secret"}
    assert client.post("/api/runners/me/heartbeat", headers=forged).status_code == 401
    assert client.post("/api/runners/me/heartbeat").status_code == 401
    assert client.post(f"/api/runners/{runner_id}/revoke").status_code == 401
    revoked = client.post(f"/api/runners/{runner_id}/revoke", headers=admin)
    assert revoked.json()["state"] == "revoked"
    refused = client.post("/api/runners/me/heartbeat", headers=credential)
    assert refused.status_code == 403 and "revoked" in refused.json()["detail"]
    listed = {r["id"]: r for r in client.get("/api/runners").json()}
    assert listed[runner_id]["state"] == "revoked"
    assert listed[runner_id]["probe"]["device_classes"] == [CLASS]


def test_health_check_then_offline_then_quarantined_again(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    runner_id, credential = enrol(client, admin)
    sweep = submit(client, admin, backends=["xnnpack"])
    lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp_path)  # type: ignore[index]
    with sessions() as session:
        job_id = device_jobs(session, int(sweep["id"]))[0].id  # type: ignore[call-overload]
    # A quarantined runner may not claim (423) until its health check passes.
    quarantined = client.post(f"/api/device-jobs/{job_id}/claim", headers=credential)
    assert quarantined.status_code == 423 and "health check first" in quarantined.json()["detail"]
    make_healthy(client, credential)
    bad = device_result("0" * 64, status="failed")
    wrong = client.post(
        "/api/runners/me/health-check", headers=credential,
        json={"device_class": CLASS, "sha256": "0" * 64, "result": bad},
    )  # fmt: skip
    assert wrong.status_code == 403  # not a health-check bundle: the runner stays healthy
    assert client.post("/api/runners/me/heartbeat", headers=credential).json()["state"] == "healthy"
    with sessions() as session:
        runner = session.get(Runner, runner_id)
        assert runner is not None
        runner.last_heartbeat = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s + 1)
        session.flush()
        assert devices.mark_silent_offline(session, settings) == [runner_id]
        session.commit()
        assert runner.state == "offline" and runner.state_reason is not None
        assert runner.state_reason.startswith("missed heartbeats: silent for ")
        assert runner.state_reason.endswith(f" s (timeout {settings.heartbeat_timeout_s:g} s)")
    # Heard from again: quarantined, and no claim until a new health check passes.
    assert client.post("/api/runners/me/heartbeat", headers=credential).json()["state"] == "quarantined"
    assert client.post(f"/api/device-jobs/{job_id}/claim", headers=credential).status_code == 423
    make_healthy(client, credential)
    assert client.post(f"/api/device-jobs/{job_id}/claim", headers=credential).status_code == 200


def test_sweep_device_classes_are_validated(client: TestClient, admin: dict[str, str]) -> None:
    for name in ("Mali G610", "mali-g610-qnn", "-vulkan"):
        response = client.post(
            "/api/sweeps", headers=admin,
            json={"policies": ["act"], "backends": ["vulkan"], "device_classes": [name]},
        )  # fmt: skip
        assert response.status_code == 422, name
        assert response.json()["detail"][0]["loc"] == ["body", "device_classes", 0]


def test_device_job_claimed_run_and_reported_only_by_its_runner(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    runner_id, credential = enrol(client, admin, "board-a")
    _, other = enrol(client, admin, "board-b")
    sweep = submit(client, admin)
    cells = {c["backend"]: c for c in sweep["cells"]}  # type: ignore[attr-defined]
    for backend in ("xnnpack", "vulkan"):
        lower_with_bundle(sessions, settings, cells[backend]["jobs"][0]["id"], "act", tmp_path)
    with sessions() as session:
        jobs_ = device_jobs(session, int(sweep["id"]))  # type: ignore[call-overload]
        # One device job, for the xnnpack cell only: the class does not run Vulkan bundles.
        assert [(j.stage, j.queue, j.cell.backend) for j in jobs_] == [
            (f"run:{CLASS}", f"device.{CLASS}", "xnnpack")
        ]
        job_id = jobs_[0].id
        swept = session.get(Sweep, sweep["id"])
        assert swept is not None
        assert grid_device_texts(session, swept) == {
            ("act", "xnnpack"): {CLASS: "⏳"},
            ("act", "vulkan"): {CLASS: "-"},
        }

    assert client.get(f"/api/sweeps/{sweep['id']}").json()["state"] == "running"
    assert [s["state"] for s in client.get("/api/sweeps").json() if s["id"] == sweep["id"]] == ["running"]
    assert client.post(f"/api/device-jobs/{job_id}/claim", headers=credential).status_code == 423
    make_healthy(client, credential)
    make_healthy(client, other)
    claim = client.post(f"/api/device-jobs/{job_id}/claim", headers=credential)
    assert claim.status_code == 200, claim.text
    assert claim.json()["attempt"] == 1
    xnn_bundle = claim.json()["bundle_sha256"]
    assert client.post(f"/api/device-jobs/{job_id}/claim", headers=other).status_code == 409

    body = {"attempt": 1, "result": device_result(xnn_bundle, 3.25)}
    unknown = {"Authorization": "Bearer 999999.nope"}
    assert client.post(f"/api/device-jobs/{job_id}/result", headers=unknown, json=body).status_code == 401
    not_claimed = client.post(f"/api/device-jobs/{job_id}/result", headers=other, json=body)
    assert not_claimed.status_code == 403 and "did not claim" in not_claimed.json()["detail"]
    assert device_run_count(sessions) == 0

    alive = client.post(f"/api/device-jobs/{job_id}/heartbeat", headers=credential, json={"attempt": 1})
    assert alive.json() == {"alive": True}
    assert client.post(f"/api/device-jobs/{job_id}/result", headers=credential, json=body).status_code == 204
    # A repeated report of the same attempt finds the job done: refused, still one row.
    assert client.post(f"/api/device-jobs/{job_id}/result", headers=credential, json=body).status_code == 409
    assert device_run_count(sessions) == 1
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status is JobStatus.OK
        swept = session.get(Sweep, sweep["id"])
        assert swept is not None
        assert grid_device_texts(session, swept)[("act", "xnnpack")] == {
            CLASS: "~3.25 ms"
        }  # no replicas: no interval
        run = session.scalars(select(DeviceRun)).one()
        assert (run.runner_id, run.source, run.attempt, run.median_ms) == (runner_id, "job", 1, 3.25)
    assert "~3.25 ms" in client.get(f"/sweeps/{sweep['id']}").text  # the grid's device column
    # Both CPU cells are done; the sweep was running while its device job was pending, and is done now.
    assert client.get(f"/api/sweeps/{sweep['id']}").json()["state"] == "done"


def test_revoked_runner_report_is_refused_and_writes_nothing(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    runner_id, credential = enrol(client, admin)
    make_healthy(client, credential)
    sweep = submit(client, admin, backends=["xnnpack"])
    lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp_path)  # type: ignore[index]
    with sessions() as session:
        job_id = device_jobs(session, int(sweep["id"]))[0].id  # type: ignore[call-overload]
    claim = client.post(f"/api/device-jobs/{job_id}/claim", headers=credential).json()
    client.post(f"/api/runners/{runner_id}/revoke", headers=admin)
    body = {"attempt": 1, "result": device_result(claim["bundle_sha256"])}
    refused = client.post(f"/api/device-jobs/{job_id}/result", headers=credential, json=body)
    assert refused.status_code == 403
    assert device_run_count(sessions) == 0
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status is JobStatus.RUNNING


def test_infra_error_requeues_the_job_and_quarantines_the_runner(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    runner_id, credential = enrol(client, admin)
    make_healthy(client, credential)
    sweep = submit(client, admin, backends=["xnnpack"])
    lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp_path)  # type: ignore[index]
    with sessions() as session:
        job_id = device_jobs(session, int(sweep["id"]))[0].id  # type: ignore[call-overload]
    client.post(f"/api/device-jobs/{job_id}/claim", headers=credential)
    response = client.post(
        f"/api/device-jobs/{job_id}/infra-error", headers=credential,
        json={"attempt": 1, "error": "bundle could not be fetched: connection reset"},
    )  # fmt: skip
    assert response.status_code == 204, response.text
    with sessions() as session:
        job = session.get(Job, job_id)
        runner = session.get(Runner, runner_id)
        assert job is not None and runner is not None
        assert (job.status, job.worker) == (JobStatus.QUEUED, None)
        assert runner.state == "quarantined"
        assert "connection reset" in (runner.state_reason or "")
    assert client.post(f"/api/device-jobs/{job_id}/claim", headers=credential).status_code == 423


def test_offline_import_verifies_signature_and_bundle(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, signing_key=public_key)
    secret = private_key
    sweep = submit(client, admin, backends=["xnnpack"], device_classes=[])
    bundle = lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp_path)  # type: ignore[index]
    signed = sign(device_result(bundle.sha256, 4.5), runner_id, secret)

    assert client.post("/api/results/import", json=signed).status_code == 401  # admin only
    changed = copy.deepcopy(signed)
    changed["latency"]["median_ms"] = 1.0
    refused = client.post("/api/results/import", headers=admin, json=changed)
    assert refused.status_code == 403 and "bad signature" in refused.json()["detail"]
    other = sign(device_result("f" * 64), runner_id, secret)
    unknown = client.post("/api/results/import", headers=admin, json=other)
    assert unknown.status_code == 422 and "not one the farm knows" in unknown.json()["detail"][0]["msg"]
    unsigned = client.post("/api/results/import", headers=admin, json=device_result(bundle.sha256))
    assert unsigned.status_code == 422
    assert device_run_count(sessions) == 0

    stored = client.post("/api/results/import", headers=admin, json=signed)
    assert stored.status_code == 201, stored.text
    assert stored.json()["cells"] == [sweep["cells"][0]["id"]]  # type: ignore[index]
    assert client.post("/api/results/import", headers=admin, json=signed).status_code == 201
    assert device_run_count(sessions) == 1  # the same (cell, class): replaced, not duplicated
    with sessions() as session:
        run = session.scalars(select(DeviceRun)).one()
        assert (run.source, run.median_ms, run.runner_id) == ("import", 4.5, runner_id)

    client.post(f"/api/runners/{runner_id}/revoke", headers=admin)
    assert client.post("/api/results/import", headers=admin, json=signed).status_code == 403


def test_an_xnnpack_cells_device_run_goes_to_runners_of_its_stack(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    """An XNNPACK bundle runs on the Python runtime of the wheel beside the runner, so a cell of another
    stack waits for a runner of that stack; a Vulkan class's runner runs its own declared runtime, one
    queue for every stack (its run is flagged when that runtime is not the cell's release)."""
    old = "et-1.4.1"
    sweep = submit(client, admin, stacks=[DEFAULT_STACK, old], device_classes=[CLASS, "h200-vulkan"])
    for cell in sweep["cells"]:  # type: ignore[attr-defined]
        lower_with_bundle(sessions, settings, cell["jobs"][0]["id"], "act", tmp_path / str(cell["id"]))
    with sessions() as session:
        queues = {(j.cell.backend, j.cell.stack, j.queue) for j in device_jobs(session, int(sweep["id"]))}  # type: ignore[call-overload]
    assert queues == {
        ("xnnpack", DEFAULT_STACK, f"device.{CLASS}"),
        ("xnnpack", old, f"device.{CLASS}@{old}"),
        ("vulkan", DEFAULT_STACK, "device.h200-vulkan"),
        ("vulkan", old, "device.h200-vulkan"),
    }
    assert device_queue(CLASS) == device_queue(CLASS, DEFAULT_STACK) == f"device.{CLASS}"
    # VGF's classes run on the wheel's runtime too (an emulated one included), so they follow the stack.
    assert device_queue("emulated-llvmpipe-vgf", old) == f"device.emulated-llvmpipe-vgf@{old}"
    assert device_queue("h200-vulkan", old) == "device.h200-vulkan"
