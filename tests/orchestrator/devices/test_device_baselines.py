"""Eager baselines as device jobs: created beside a bundle run only where a runner of the class can time
one, claimed and reported like a run but to their own endpoint, and the speed-up they give the grid and
the tracker report. Through the API on a real Postgres."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from devicetools import (
    CLASS,
    HOST,
    device_result,
    enrol,
    grid_device_texts,
    lower_with_bundle,
    make_healthy,
    trusted_latency,
)
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import LatencyStats
from coverfarm.result import Options
from coverfarm.settings import Settings
from orchestrator.devices.speedups import sweep_speedups
from orchestrator.models import DeviceBaseline, Job, JobKind, JobStatus, Runner, RunnerState, Sweep


def baseline_document(policy: str, median_ms: float | None, status: str = "ok") -> dict[str, Any]:
    latency = None
    if median_ms is not None:
        samples = [median_ms * 0.95, median_ms, median_ms * 1.05]
        latency = LatencyStats(
            warmup=1, iterations=3, samples_ms=samples, median_ms=median_ms, p90_ms=max(samples),
            min_ms=min(samples), mean_ms=median_ms, cv=0.05, stable=True, load_ms=900.0,
        )  # fmt: skip
    result = BaselineResult(
        policy=policy, options=Options(), frames=1, torch_version="2.14.1", threads=2, latency=latency,
        status=status, error=None if status == "ok" else "the build phase took over 900 s",  # type: ignore[arg-type]
    )  # fmt: skip
    return result.model_dump(mode="json")


def sweep_jobs(sessions: sessionmaker[Session], sweep_id: int) -> dict[str, Job]:
    with sessions() as session:
        rows = session.scalars(select(Job).join(Job.cell).where(Job.cell.has(sweep_id=sweep_id))).all()
        return {f"{job.stage}/{job.cell.backend}": job for job in rows}


def cells(sessions: sessionmaker[Session], sweep_id: int) -> dict[tuple[str, str], dict[str, str]]:
    with sessions() as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None
        return grid_device_texts(session, sweep)


def baseline_rows(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(DeviceBaseline)) or 0


def lowered_sweep(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings, tmp: Path
) -> int:
    body = {"policies": ["act"], "backends": ["xnnpack", "vulkan"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    for cell in sweep["cells"]:
        lower_with_bundle(sessions, settings, cell["jobs"][0]["id"], "act", tmp / cell["backend"])
    return int(sweep["id"])


def test_baseline_job_gives_the_device_cell_its_speedup(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    _, timer = enrol(client, admin, "board-with-torch", baseline=True)
    make_healthy(client, timer)
    sweep_id = lowered_sweep(client, admin, sessions, settings, tmp_path)
    jobs = sweep_jobs(sessions, sweep_id)
    # Beside the xnnpack bundle's run, its baseline on the same class; nothing for the vulkan cell.
    assert {key: job.queue for key, job in jobs.items() if ":" in key} == {
        f"run:{CLASS}/xnnpack": f"device.{CLASS}",
        f"baseline:{CLASS}/xnnpack": f"baseline.{CLASS}",
    }
    # Each job's kind and device class are its columns; its stage is only its name.
    assert {key: (job.kind, job.device_class) for key, job in jobs.items()} == {
        "lower/xnnpack": (JobKind.LOWER, None),
        "lower/vulkan": (JobKind.LOWER, None),
        f"run:{CLASS}/xnnpack": (JobKind.DEVICE_RUN, CLASS),
        f"baseline:{CLASS}/xnnpack": (JobKind.BASELINE, CLASS),
    }
    run_job, baseline_job = jobs[f"run:{CLASS}/xnnpack"].id, jobs[f"baseline:{CLASS}/xnnpack"].id

    claim = client.post(f"/api/device-jobs/{baseline_job}/claim", headers=timer)
    assert claim.status_code == 200, claim.text
    assert {k: claim.json()[k] for k in ("kind", "policy", "attempt")} == {
        "kind": "baseline", "policy": "act", "attempt": 1,
    }  # fmt: skip
    assert claim.json()["options"]["seed"] == 0
    # A baseline is not a device result, and a baseline of another policy is not this job's.
    wrong_kind = client.post(
        f"/api/device-jobs/{baseline_job}/result", headers=timer,
        json={"attempt": 1, "result": device_result(claim.json()["bundle_sha256"])},
    )  # fmt: skip
    assert wrong_kind.status_code == 422 and "eager baseline" in wrong_kind.json()["detail"][0]["msg"]
    other = {"attempt": 1, "baseline": baseline_document("diffusion", 13.0)}
    wrong_policy = client.post(f"/api/device-jobs/{baseline_job}/baseline", headers=timer, json=other)
    assert wrong_policy.status_code == 422 and "policy diffusion" in wrong_policy.json()["detail"][0]["msg"]
    assert baseline_rows(sessions) == 0

    body = {"attempt": 1, "baseline": baseline_document("act", 13.0)}
    report_url = f"/api/device-jobs/{baseline_job}/baseline"
    assert client.post(report_url, headers=timer, json=body).status_code == 204
    assert client.post(report_url, headers=timer, json=body).status_code == 409  # a repeat: still one row
    assert baseline_rows(sessions) == 1
    assert cells(sessions, sweep_id)[("act", "xnnpack")] == {CLASS: "⏳"}  # the bundle has not run yet
    assert client.get(f"/api/sweeps/{sweep_id}").json()["state"] == "running"

    claimed = client.post(f"/api/device-jobs/{run_job}/claim", headers=timer).json()
    assert claimed["kind"] == "run"
    assert client.get(f"/api/sweeps/{sweep_id}").json()["state"] == "running"
    baseline_body = {"attempt": 1, "baseline": baseline_document("act", 13.0)}
    misplaced = client.post(f"/api/device-jobs/{run_job}/baseline", headers=timer, json=baseline_body)
    assert misplaced.status_code == 422 and "runs a bundle" in misplaced.json()["detail"][0]["msg"]
    result = {"attempt": 1, "result": device_result(claimed["bundle_sha256"], 3.25)}
    assert client.post(f"/api/device-jobs/{run_job}/result", headers=timer, json=result).status_code == 204

    # These documents predate replicated, time-bounded timing: no replicas, so no interval (~) and no
    # speed-up from them.
    assert cells(sessions, sweep_id)[("act", "xnnpack")] == {CLASS: "~3.25 ms"}
    assert client.get(f"/api/sweeps/{sweep_id}").json()["state"] == "done"
    assert "~3.25 ms" in client.get(f"/sweeps/{sweep_id}").text
    report = client.get(f"/api/sweeps/{sweep_id}/report.md", params={"backend": "xnnpack"}).text
    assert "| ~3.25 ms |" in report
    assert f"eager baseline: PyTorch 2.14.1 on 2 CPU threads of a {CLASS} host" in report
    # These documents predate replicated, time-bounded timing: their speed-up is not to be trusted.
    with sessions() as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None
        verdict = sweep_speedups(session, sweep)[("act", "xnnpack")][CLASS]
    assert not verdict.allowed and verdict.value is None
    assert verdict.reasons[0] == (
        "the device run was timed before replicated, time-bounded timing (no rules recorded)"
    )


def speedup_after(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp: Path, device: dict[str, Any], eager: dict[str, Any],
) -> Any:  # fmt: skip
    """Store ``device`` and ``eager`` as a cell's run and baseline, reported by one runner; its verdict."""
    _, timer = enrol(client, admin, f"board-{tmp.name}", baseline=True)
    make_healthy(client, timer)
    sweep_id = lowered_sweep(client, admin, sessions, settings, tmp)
    jobs = sweep_jobs(sessions, sweep_id)
    run_job, baseline_job = jobs[f"run:{CLASS}/xnnpack"].id, jobs[f"baseline:{CLASS}/xnnpack"].id
    client.post(f"/api/device-jobs/{baseline_job}/claim", headers=timer)
    stored = client.post(f"/api/device-jobs/{baseline_job}/baseline", headers=timer,
                         json={"attempt": 1, "baseline": eager})  # fmt: skip
    assert stored.status_code == 204, stored.text
    sha = client.post(f"/api/device-jobs/{run_job}/claim", headers=timer).json()["bundle_sha256"]
    reported = client.post(f"/api/device-jobs/{run_job}/result", headers=timer,
                           json={"attempt": 1, "result": {**device, "bundle_sha256": sha}})  # fmt: skip
    assert reported.status_code == 204, reported.text
    with sessions() as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None
        return sweep_speedups(session, sweep)[("act", "xnnpack")][CLASS]


def test_a_speedup_known_from_agreeing_replicas_whatever_their_jitter_and_wide_from_spread_ones(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    eager = {**baseline_document("act", 13.0), "latency": trusted_latency(13.0), "host_id": HOST}
    device = {**device_result("0" * 64, 3.25), "latency": trusted_latency(3.25), "host_id": HOST}
    allowed = speedup_after(client, admin, sessions, settings, tmp_path / "a", device, eager)
    assert allowed.allowed and allowed.narrow and allowed.value == pytest.approx(4.0), allowed.reasons
    with sessions() as session:  # the grid and the report show the same verdict
        latest = max(session.scalars(select(Sweep)).all(), key=lambda sweep: sweep.id)
        assert grid_device_texts(session, latest)[("act", "xnnpack")] == {CLASS: "✓ 3.25 ms (4.0×, 3.9–4.1)"}
    # Per-sample jitter of 30% is jitter: the replicas agree, so the speed-up is known.
    jittery = {**device, "latency": trusted_latency(3.25, cv_spread=0.3)}
    known = speedup_after(client, admin, sessions, settings, tmp_path / "b", jittery, eager)
    assert known.allowed and known.narrow, known.reasons
    # Replicas 30% either side of the figure: the speed-up is given, marked wide, with why.
    spread = {**device, "latency": trusted_latency(3.25, replica_spread=0.3)}
    wide = speedup_after(client, admin, sessions, settings, tmp_path / "c", spread, eager)
    assert wide.allowed and not wide.narrow and wide.value == pytest.approx(4.0)
    assert wide.reasons[0].startswith("the speed-up's interval 3.05–5.77 (±44% of 4) is wider than ±10%")


def test_a_failed_baseline_keeps_the_milliseconds_and_says_why(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    _, timer = enrol(client, admin, "slow-host", baseline=True)
    make_healthy(client, timer)
    sweep_id = lowered_sweep(client, admin, sessions, settings, tmp_path)
    jobs = sweep_jobs(sessions, sweep_id)
    run_job, baseline_job = jobs[f"run:{CLASS}/xnnpack"].id, jobs[f"baseline:{CLASS}/xnnpack"].id
    claimed = client.post(f"/api/device-jobs/{run_job}/claim", headers=timer).json()
    result = {"attempt": 1, "result": device_result(claimed["bundle_sha256"], 3.25)}
    client.post(f"/api/device-jobs/{run_job}/result", headers=timer, json=result)
    # The bundle has run; its baseline is still pending, and keeps the sweep running in both views.
    assert cells(sessions, sweep_id)[("act", "xnnpack")] == {CLASS: "~3.25 ms (baseline ⏳)"}
    assert client.get(f"/api/sweeps/{sweep_id}").json()["state"] == "running"
    assert [s["state"] for s in client.get("/api/sweeps").json() if s["id"] == sweep_id] == ["running"]
    client.post(f"/api/device-jobs/{baseline_job}/claim", headers=timer)
    body = {"attempt": 1, "baseline": baseline_document("act", 40.0, status="slow")}
    response = client.post(f"/api/device-jobs/{baseline_job}/baseline", headers=timer, json=body)
    assert response.status_code == 204
    # A baseline cut at its bound has samples, but not a steady state to divide: no speed-up shown.
    assert cells(sessions, sweep_id)[("act", "xnnpack")] == {CLASS: "~3.25 ms"}
    with sessions() as session:
        job = session.get(Job, baseline_job)
        assert job is not None and job.status is JobStatus.SLOW
        assert job.error == "the build phase took over 900 s"
    assert client.get(f"/api/sweeps/{sweep_id}").json()["state"] == "done"
    assert [s["state"] for s in client.get("/api/sweeps").json() if s["id"] == sweep_id] == ["done"]


def test_no_baseline_job_without_a_live_runner_that_can_time_one(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    enrol(client, admin, "board-without-torch")
    gone, _ = enrol(client, admin, "offline-host-with-torch", baseline=True)
    revoked, _ = enrol(client, admin, "revoked-host-with-torch", baseline=True)
    with sessions() as session:
        runner = session.get(Runner, gone)
        assert runner is not None
        runner.state = RunnerState.OFFLINE.value
        session.commit()
    assert client.post(f"/api/runners/{revoked}/revoke", headers=admin).status_code == 200
    sweep_id = lowered_sweep(client, admin, sessions, settings, tmp_path)
    assert [key for key in sweep_jobs(sessions, sweep_id) if ":" in key] == [f"run:{CLASS}/xnnpack"]
