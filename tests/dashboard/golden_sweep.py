"""Two stored sweeps that cover every kind of cell the grid, the report and the CLI row show, for the
golden-file tests (test_golden_views.py).

Sweep 1 (both backends, device classes cpu-x86_64-xnnpack and mali-g610-vulkan) holds, per cell:
a finished row, partitioning out of time (bounds and groups) with its re-run queued and running, an
export slow twice, failed stages with their causes, an engine that raised, a running and a queued cell,
an unavailable policy, a cancelled cell, fake weights with and without the worker size they need (the
one with a size waits for a worker of its memory class to export it with real weights), an export that
failed after coverage; and on the device side: a run with its speed-up, one without a
baseline, one whose baseline is pending, one whose baseline ran out of its bound, one with no latency,
a failed run, a device job that failed without a run, a queued and a cancelled one, and a class no
runner serves. Its blocker groups have a ready repro, one that does not reproduce and one with none, and
a share under 1%. Sweep 2 (xnnpack only, other options, no device class) leaves nothing on the CPU, has
a cell sweep 1 lacks, and another ExecuTorch version.

Everything goes through the services and the HTTP API a worker and a runner use (jobs.start/finish/fail,
enrol, health check, claim, result, baseline), then every timestamp is set to a fixed one, so that the
pages are the same bytes on every run of a freshly created database.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dashtools
from dashtools import export_failed, export_slow, fail, finished, partition_slow, start, store
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "orchestrator" / "devices"))

from devicetools import enrol, make_healthy

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import (
    Board,
    DeviceResult,
    ExecutorchInfo,
    Isolation,
    LatencyStats,
    NativeRuntimeInfo,
    ProbeReport,
    TimingRules,
)
from coverfarm.result import (
    Blocker,
    Bundle,
    ErrorInfo,
    HeavyMacs,
    Ops,
    Options,
    Programs,
    Repro,
    ResultDocument,
    StageResult,
    StageStatus,
    TraceInfo,
    WeightsInfo,
)
from coverfarm.settings import Settings
from farmrun.celery_app import make_celery
from farmrun.stats import MIN_REACHED, replica
from orchestrator.artifacts import repository as artifacts
from orchestrator.artifacts.store import Stored
from orchestrator.db import unit_of_work
from orchestrator.jobs import service as jobs
from orchestrator.jobs.transitions import lock_job
from orchestrator.models import JobStatus

XNNPACK_CLASS = "cpu-x86_64-xnnpack"
VULKAN_CLASS = "mali-g610-vulkan"  # no runner serves it: "no device"
T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=125)  # what the pages are rendered at: a running cell has run 2m 05s

CONV = ("aten.convolution.default", "op args not supported")
ELU = ("aten.elu.default", "no operator implementation")
GELU = ("aten.gelu.default", "dtype not supported")
PROBE = ProbeReport(
    board=Board(model="Radxa ROCK 5B", cores=8, arch="aarch64"),
    vulkan_status="ok",
    executorch=ExecutorchInfo(version="1.5.1", registered_backends=["XnnpackBackend", "VulkanBackend"]),
    native_runtime=NativeRuntimeInfo(path="/opt/executorch/executor_runner", status="ok"),
    device_classes=[XNNPACK_CLASS],
)


@dataclass
class Built:
    """The ids of what was stored."""

    sweeps: list[int]
    cells: dict[tuple[int, str, str], int] = field(default_factory=dict)  # (sweep, policy, backend) -> id
    documents: list[ResultDocument] = field(default_factory=list)  # in the order they were stored


def sha_of(policy: str, backend: str) -> str:
    return hashlib.sha256(f"{policy}/{backend}".encode()).hexdigest()


def with_bundle(doc: ResultDocument) -> ResultDocument:
    """The document with a bundle of its own, known to the artifact store's table (so device jobs follow)."""
    sha = sha_of(doc.policy, doc.backend)
    doc.bundle = Bundle(sha256=sha, path=f"/farm/bundles/{sha}")
    return doc


def repro(op: str, reason: str, ready: bool, error: str | None = None) -> Repro:
    seen = reason if ready else "input dtype torch.int64 not in {torch.float32}"
    return Repro(
        text=f"OP_NAME = {op!r}\nprint('verdict')\n",
        output=f"{op}: support check refuses it: {seen}\nverdict: left on the CPU",
        reproduced=ready,
        reason_seen=None if error else seen,
        delegated=False,
        error=error,
    )


def act_vulkan() -> ResultDocument:
    doc = finished(
        "act",
        "vulkan",
        (1556, 1561),
        (999_000, 1_000_000),
        3,
        blockers=[
            Blocker(op=CONV[0], reason=CONV[1], count=3, macs=900, programs_if_supported=2,
                    repro=repro(*CONV, ready=True)),
            Blocker(op=ELU[0], reason=ELU[1], count=2, macs=0, programs_if_supported=3,
                    repro=repro(*ELU, ready=False)),
        ],
    )  # fmt: skip
    doc.trace_info = TraceInfo(seed=0, substitutions=["einops.rearrange → a static reshape"])
    return with_bundle(doc)


def vqbet_xnnpack_blockers() -> list[Blocker]:
    return [
        Blocker(op=GELU[0], reason=GELU[1], count=5, macs=0, repro_note="op not expressible as one call"),
        Blocker(op=CONV[0], reason=CONV[1], count=1, macs=10, programs_if_supported=1,
                repro=repro(*CONV, ready=False, error="the repro timed out after 60 s")),
    ]  # fmt: skip


def fake_weights(policy: str, backend: str, needs_gb: int | None) -> ResultDocument:
    """Measured with fake weights: every coverage column, no export."""
    doc = finished(policy, backend, (700, 1000), (60, 100), 4)
    doc.export = StageResult(status=StageStatus.NOT_RUN)
    doc.bundle = None
    doc.weights = WeightsInfo(
        mode="fake", requested="auto", reason="estimated peak 31.0 GB exceeds this worker's 16.0 GB",
        parameter_bytes=12_000_000_000, estimated_peak_gb=31.0, worker_memory_gb=16.0,
        needs_worker_gb=needs_gb,
    )  # fmt: skip
    return doc


def export_failed_after_coverage(policy: str, backend: str) -> ResultDocument:
    failed = StageResult(
        status=StageStatus.FAILED,
        seconds=3.0,
        error=ErrorInfo(
            stage="export",
            type="RuntimeError",
            message="Missing out variants: {'aten::_native_batch_norm_legit'}\nsee the operator list",
        ),
    )
    doc = ResultDocument(
        policy=policy,
        backend=backend,
        trace=dashtools.OK,
        trace_info=TraceInfo(seed=0, weights="checkpoint", checkpoint="/ckpt/gaussian_actor"),
        partition=dashtools.OK,
        export=failed,
        ops=Ops(total=10, on_backend=5, supported=5),
        heavy_macs=HeavyMacs(total=0, on_backend=0, supported=0),
        programs=Programs(count=2, connected_groups=2),
        versions={"executorch": "1.5.0", "torch": "2.15.0"},
    )
    return doc


def unavailable(policy: str, backend: str) -> ResultDocument:
    reason = "policy not available in lerobot 0.6.1"
    error = ErrorInfo(stage="trace", type="PolicyNotAvailable", message=reason)
    return ResultDocument(
        policy=policy, backend=backend, trace=StageResult(status=StageStatus.FAILED, error=error)
    )


HOST = "golden-host"


def latency(median_ms: float, cv: float = 0.02) -> LatencyStats:
    """Timed under the timing rules in two replicas, under the host's lock, over 16 frames: a speed-up
    may come of it."""
    samples = [median_ms * 0.98, median_ms, median_ms * 1.02, median_ms * 1.01, median_ms * 0.99]
    isolated = Isolation(lock="/tmp/timing.lock", acquired=True, waited_s=0.0)
    # Two replicas whose medians lie 2% either side of median_ms: the interval a cell shows.
    parts = [
        replica([s * scale for s in samples], 1, 1.0, MIN_REACHED).model_copy(update={"isolation": isolated})
        for scale in (0.98, 1.02)
    ]
    return LatencyStats(
        warmup=1, iterations=5, samples_ms=samples, median_ms=median_ms, p90_ms=max(samples),
        min_ms=min(samples), mean_ms=median_ms, cv=cv, stable=True, load_ms=12.0, rules=TimingRules(),
        replicas=parts, frames=16, judgement=2,
    )  # fmt: skip


def device_result(sha: str, median_ms: float | None, error: str | None = None) -> dict[str, Any]:
    result = DeviceResult(
        bundle_sha256=sha, device_class=XNNPACK_CLASS, backend="xnnpack", probe=PROBE, runtime="native",
        latency=latency(median_ms) if median_ms is not None else None,
        status="failed" if error else "ok", error=error, host_id=HOST,
    )  # fmt: skip
    return result.model_dump(mode="json")


def baseline_document(policy: str, median_ms: float, status: str = "ok") -> dict[str, Any]:
    result = BaselineResult(
        policy=policy, options=Options(), frames=16, torch_version="2.14.1", threads=8,
        latency=latency(median_ms, 0.03), status=status, host_id=HOST,  # type: ignore[arg-type]
        error=None if status == "ok" else "the timing phase took over 900 s",
    )  # fmt: skip
    return result.model_dump(mode="json")


class Farm:
    """The API client and the database, with the steps a worker and a runner take."""

    def __init__(self, client: TestClient, sessions: sessionmaker[Session], settings: Settings) -> None:
        self.client = client
        self.sessions = sessions
        self.settings = settings
        self.admin = {"Authorization": f"Bearer {settings.read_admin_token()}"}
        self.built = Built(sweeps=[])
        self.jobs: dict[tuple[int, str, str, str], int] = {}  # (sweep, policy, backend, stage) -> job id

    def submit(self, policies: list[str], backends: list[str], **body: Any) -> int:
        response = self.client.post(
            "/api/sweeps", headers=self.admin, json={"policies": policies, "backends": backends, **body}
        )
        assert response.status_code == 201, response.text
        sweep = response.json()
        self.built.sweeps.append(sweep["id"])
        for cell in sweep["cells"]:
            self.built.cells[(sweep["id"], cell["policy"], cell["backend"])] = cell["id"]
        return int(sweep["id"])

    def job(self, sweep: int, policy: str, backend: str, stage: str = "lower") -> int:
        cell_id = self.built.cells[(sweep, policy, backend)]
        with self.sessions() as session:
            found = session.execute(
                text("SELECT id FROM jobs WHERE cell_id = :cell AND stage = :stage"),
                {"cell": cell_id, "stage": stage},
            ).scalar_one()
        return int(found)

    def store(self, sweep: int, doc: ResultDocument, stage: str = "lower") -> None:
        if doc.bundle is not None:
            with unit_of_work(self.sessions, make_celery(self.settings)) as session:
                stored = Stored(sha256=doc.bundle.sha256, path=Path(doc.bundle.path), size_bytes=1, files=1)
                artifacts.record(session, stored)
        store(self.sessions, self.settings, self.job(sweep, doc.policy, doc.backend, stage), doc)
        self.built.documents.append(doc)

    def claim(self, credential: dict[str, str], job_id: int) -> dict[str, Any]:
        response = self.client.post(f"/api/device-jobs/{job_id}/claim", headers=credential)
        assert response.status_code == 200, response.text
        claimed: dict[str, Any] = response.json()
        return claimed

    def device_job(self, sweep: int, policy: str, kind: str = "run") -> int:
        """The job id of the xnnpack cell's bundle run (``run``) or eager baseline (``baseline``)."""
        return self.job(sweep, policy, "xnnpack", f"{kind}:{XNNPACK_CLASS}")

    def report(
        self, credential: dict[str, str], job_id: int, kind: str, document: Callable[[dict[str, Any]], Any]
    ) -> None:
        """Claim a device job and report what it measured (``kind``: result or baseline), as a runner does."""
        claimed = self.claim(credential, job_id)
        body = {"attempt": claimed["attempt"], kind: document(claimed)}
        response = self.client.post(f"/api/device-jobs/{job_id}/{kind}", headers=credential, json=body)
        assert response.status_code == 204, response.text

    def run(
        self, credential: dict[str, str], job_id: int, median_ms: float | None, error: str | None = None
    ) -> None:
        self.report(
            credential, job_id, "result", lambda c: device_result(c["bundle_sha256"], median_ms, error)
        )

    def time_baseline(
        self, credential: dict[str, str], job_id: int, median_ms: float, status: str = "ok"
    ) -> None:
        self.report(
            credential, job_id, "baseline", lambda c: baseline_document(c["policy"], median_ms, status)
        )

    def fail_device_job(self, job_id: int, error: str) -> None:
        """A device job that ended failed without a run: its runner was lost on every attempt."""
        with unit_of_work(self.sessions, make_celery(self.settings)) as session:
            assert jobs.start(session, job_id, "runner-1", self.settings) is not None
            job = lock_job(session, job_id)
            assert job is not None
            jobs.end(session, job, JobStatus.FAILED, error, error)

    def cancel(self, job_id: int) -> None:
        with unit_of_work(self.sessions, make_celery(self.settings)) as session:
            jobs.cancel(session, job_id, "cancelled by the operator")

    def fix_times(self) -> None:
        """Every stored time set to T0 (started) or T0 + 90 s (ended), so that the pages do not change."""
        statements = [
            "UPDATE sweeps SET created_at = :t0, "
            "cancelled_at = CASE WHEN cancelled_at IS NULL THEN NULL ELSE :t1 END",
            "UPDATE jobs SET created_at = :t0, sent_at = CASE WHEN sent_at IS NULL THEN NULL ELSE :t0 END, "
            "started_at = CASE WHEN started_at IS NULL THEN NULL ELSE :t0 END, "
            "heartbeat_at = CASE WHEN heartbeat_at IS NULL THEN NULL ELSE :t1 END, "
            "finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE :t1 END",
            "UPDATE job_attempts SET started_at = :t0, "
            "finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE :t1 END",
            "UPDATE results SET created_at = :t1, updated_at = :t1",
        ]  # fmt: skip
        with self.sessions() as session:
            for statement in statements:
                session.execute(text(statement), {"t0": T0, "t1": T0 + timedelta(seconds=90)})
            session.commit()


SWEEP_1_POLICIES = [
    "act", "diffusion", "dm05", "eo1", "evo1", "fastwam", "gaussian_actor", "groot", "lingbot_va",
    "multi_task_dit", "pi0", "pi05", "pi0_fast", "smolvla", "tdmpc", "vqbet", "wall_x", "xvla",
]  # fmt: skip


def build(client: TestClient, sessions: sessionmaker[Session], settings: Settings) -> Built:
    farm = Farm(client, sessions, settings)
    dashtools.worker_online(sessions, settings)
    one = farm.submit(
        SWEEP_1_POLICIES, ["vulkan", "xnnpack"], device_classes=[XNNPACK_CLASS, VULKAN_CLASS], timeout_s=60
    )
    # A runner of the xnnpack class that cannot time baselines: cells finished now get no baseline job.
    _, board = enrol(client, farm.admin, "board")
    make_healthy(client, board)

    # --- the CPU columns ------------------------------------------------------------------------
    farm.store(one, act_vulkan())
    farm.store(one, partition_slow("diffusion", "vulkan", (5477, 5895), (100, 100), 41))  # re-run queued
    farm.store(one, partition_slow("diffusion", "xnnpack", (300, 400), (3, 1000), 7))
    start(sessions, settings, farm.job(one, "diffusion", "xnnpack", "lower.long"))  # re-run running
    farm.store(one, unavailable("dm05", "vulkan"))
    farm.store(one, unavailable("dm05", "xnnpack"))
    farm.store(one, export_slow("evo1", "vulkan", (13904, 16601), (26, 100), 61))
    farm.store(one, export_slow("evo1", "vulkan", (13904, 16601), (26, 100), 61), "lower.long")  # slow again
    farm.store(one, export_failed_after_coverage("gaussian_actor", "vulkan"))
    farm.store(one, fake_weights("groot", "vulkan", 24))
    farm.store(one, fake_weights("groot", "xnnpack", None))
    farm.store(one, export_failed("pi05", "vulkan"))
    fail(sessions, settings, farm.job(one, "vqbet", "vulkan"), "Traceback ...\nRuntimeError: engine crashed")
    start(sessions, settings, farm.job(one, "smolvla", "vulkan"))  # running, nothing stored yet
    farm.cancel(farm.job(one, "tdmpc", "vulkan"))
    vqbet = finished("vqbet", "xnnpack", (180, 200), (990, 1000), 20, vqbet_xnnpack_blockers())
    farm.store(one, with_bundle(vqbet))

    # --- the device columns ---------------------------------------------------------------------
    farm.store(one, with_bundle(finished("eo1", "xnnpack", (95, 100), (1000, 1000), 1, [])))
    farm.run(board, farm.device_job(one, "eo1"), 12.5)  # no baseline job
    # From here on a runner that times eager baselines serves the class too.
    _, timer = enrol(client, farm.admin, "timer", baseline=True)
    make_healthy(client, timer)
    for policy in ("act", "fastwam", "lingbot_va", "multi_task_dit", "pi0", "pi0_fast", "wall_x", "xvla"):
        farm.store(one, with_bundle(finished(policy, "xnnpack", (97, 100), (5000, 10000), 2)))
    farm.run(timer, farm.device_job(one, "act"), 3.25)
    farm.time_baseline(timer, farm.device_job(one, "act", "baseline"), 13.0)
    farm.run(timer, farm.device_job(one, "fastwam"), 250.4)  # baseline pending
    farm.run(board, farm.device_job(one, "lingbot_va"), None, "output wrong\nframe 3")
    # multi_task_dit: its run is queued.
    farm.fail_device_job(
        farm.device_job(one, "pi0"),
        "worker lost on each of 3 attempts; last: runner-1 stopped heartbeating",
    )
    farm.run(timer, farm.device_job(one, "pi0_fast"), 41.7)
    farm.time_baseline(timer, farm.device_job(one, "pi0_fast", "baseline"), 900.0, "slow")
    farm.run(timer, farm.device_job(one, "wall_x"), None)  # no latency recorded
    farm.cancel(farm.device_job(one, "xvla"))

    # --- sweep 2: other options, nothing left on the CPU, a cell sweep 1 lacks --------------------
    two = farm.submit(
        ["act", "eo1", "wall_oss_05"], ["xnnpack"],
        options={"constant_prop": False, "lowering": "stock", "weights": "real"}, timeout_s=120,
    )  # fmt: skip
    act = finished("act", "xnnpack", (100, 100), (10000, 10000), 1, [])
    act.versions = {"executorch": "1.6.0", "torch": "2.15.0", "transformers": "4.57.1", "lerobot": "0.6.1"}
    farm.store(two, act)
    farm.store(two, finished("eo1", "xnnpack", (95, 100), (1000, 1000), 1, []))
    farm.store(two, unavailable("wall_oss_05", "xnnpack"))

    farm.fix_times()
    return farm.built
