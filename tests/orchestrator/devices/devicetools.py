"""Helpers for the device API tests (a plain module: test files must not import conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from bundle_engine import make_bundle
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.device_result import (
    Board,
    DeviceResult,
    EagerBaseline,
    ExecutorchInfo,
    LatencyStats,
    ProbeReport,
)
from coverfarm.result import Blocker, Bundle, Options, ResultDocument, StageResult, StageStatus
from coverfarm.settings import Settings
from dashboard.endpoints import grid_of, grid_summary
from orchestrator.artifacts import repository as artifacts
from orchestrator.artifacts.store import ArtifactStore
from orchestrator.jobs import service as jobs
from orchestrator.models import Job, Sweep
from orchestrator.sweeps import pages

CLASS = "cpu-x86_64-xnnpack"


def grid_device_texts(session: Session, sweep: Sweep) -> dict[tuple[str, str], dict[str, str]]:
    """(policy, backend) → {device class: its device column's text}, as the grid renders the sweep's
    cells (of its first stack) on its pages: ``dashboard.endpoints.grid_summary`` and ``grid_of``, the
    path every grid page and live update takes."""
    summary = grid_summary(session, sweep.id)
    cells = pages.cells_of_rows(session, summary, 0, len(summary.policies))
    grid = grid_of(session, summary, cells, [])
    return {
        (cell.policy, cell.backend): {name: field.text for name, field in cell.devices.items()}
        for cell in grid.cells
    }


def probe(classes: list[str] | None = None, baseline: bool = False) -> dict[str, Any]:
    report = ProbeReport(
        board=Board(cores=2, arch="x86_64"),
        vulkan_status="vulkaninfo not installed",
        executorch=ExecutorchInfo(version="1.5.1", registered_backends=["XnnpackBackend"]),
        baseline=EagerBaseline(torch="2.14.1", lerobot="0.6.1", status="ok") if baseline else None,
        device_classes=[CLASS] if classes is None else classes,
    )
    return report.model_dump(mode="json")


def enrol(
    client: httpx.Client,
    admin: dict[str, str],
    name: str = "board",
    baseline: bool = False,
    classes: list[str] | None = None,
    signing_key: str | None = None,
) -> tuple[int, dict[str, str]]:
    """Enrol a runner; ``signing_key``: the public key of its offline signatures."""
    token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
    body = {
        "token": token,
        "name": name,
        "probe": probe(classes, baseline=baseline),
        "signing_key": signing_key,
    }
    response = client.post("/api/runners/enrol", json=body)
    assert response.status_code == 201, response.text
    enrolled = response.json()
    return enrolled["runner_id"], {"Authorization": f"Bearer {enrolled['credential']}"}


def device_result(sha: str, median_ms: float = 2.5, status: str = "ok") -> dict[str, Any]:
    samples = [median_ms, median_ms * 1.1, median_ms * 0.9]
    latency = LatencyStats(
        warmup=1, iterations=3, samples_ms=samples, median_ms=median_ms, p90_ms=max(samples),
        min_ms=min(samples), mean_ms=sum(samples) / 3, cv=0.08, stable=True, load_ms=1.0,
    )  # fmt: skip
    result = DeviceResult(
        bundle_sha256=sha, policy="act", backend="xnnpack", device_class=CLASS, status=status,
        latency=latency if status == "ok" else None, error=None if status == "ok" else "output wrong",
    )  # fmt: skip
    return result.model_dump(mode="json")


def make_healthy(client: httpx.Client, credential: dict[str, str]) -> None:
    checks = client.get("/api/runners/me/health-check", headers=credential).json()
    assert [check["device_class"] for check in checks] == [CLASS]
    sha = checks[0]["sha256"]
    body = {"device_class": CLASS, "sha256": sha, "result": device_result(sha, 0.05)}
    response = client.post("/api/runners/me/health-check", headers=credential, json=body)
    assert response.json()["state"] == "healthy", response.text


def lower_with_bundle(
    sessions: sessionmaker[Session], settings: Settings, job_id: int, policy: str, tmp: Path,
    blockers: list[Blocker] | None = None,
) -> Bundle:  # fmt: skip
    """What the CPU worker does for a lower job that made a bundle: store it, then finish the job (its
    result with ``blockers``, when given)."""
    bundle = make_bundle(policy, tmp)
    stored = ArtifactStore(settings.artifacts_dir).put(Path(bundle.path), bundle.sha256)
    with sessions() as session:
        started = jobs.start(session, job_id, "cpu@test", settings)
        assert started is not None
        ok = StageResult(status=StageStatus.OK)
        doc = ResultDocument(
            policy=policy, backend=started.backend, options=Options(), trace=ok, partition=ok, export=ok,
            bundle=bundle, blockers=blockers or [],
        )  # fmt: skip
        artifacts.record(session, stored)
        jobs.finish(session, job_id, started.attempt, doc, settings)
        session.commit()
    return bundle


def device_jobs(session: Session, sweep_id: int) -> list[Job]:
    return [
        job
        for job in session.query(Job).order_by(Job.id)
        if job.stage.startswith("run:") and job.cell.sweep_id == sweep_id
    ]


HOST = "machine-id/board"


def trusted_latency(
    median_ms: float, cv_spread: float = 0.01, replica_spread: float = 0.01
) -> dict[str, Any]:
    """Two replicas under the default rules, timed under the host lock: their samples spread
    ``cv_spread`` about their medians, which lie ``replica_spread`` either side of ``median_ms``."""
    from coverfarm.device_result import Isolation, TimingRules
    from farmrun.stats import MIN_REACHED, latency_stats, replica

    samples = [median_ms * (1 + cv_spread * k) for k in (-1, 0, 1, 0, 0)]
    parts = [
        replica([s * (1 + replica_spread * side) for s in samples], 1, 1.0, MIN_REACHED) for side in (-1, 1)
    ]
    for part in parts:
        part.isolation = Isolation(lock="/tmp/timing.lock", acquired=True, waited_s=0.0)
    latency = latency_stats(samples * 2, 1, 1.0, TimingRules(), parts)
    latency.frames = 16
    return latency.model_dump(mode="json")
