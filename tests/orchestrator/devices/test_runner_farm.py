"""A runner enrolled with a real token serves cpu-x86_64-xnnpack through the farm: real ``coverfarm serve``,
a real Celery CPU worker (the bundle-making stand-in engine) and real ``coverfarm runner`` processes."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from devicetools import grid_device_texts
from farmkit import TOKEN, sweep_done, wait_for
from runnertools import StartRunner, run_cli
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.models import Cell, DeviceRun, Job, JobAttempt, JobStatus, Sweep, utcnow

CLASS = f"cpu-{os.uname().machine}-xnnpack"


def runner_state(api: httpx.Client, name: str) -> str | None:
    states = [r["state"] for r in api.get("/api/runners").json() if r["name"] == name]
    return states[-1] if states else None


def healthy(api: httpx.Client, name: str) -> Callable[[], bool]:
    return lambda: runner_state(api, name) == "healthy"


def submit(api: httpx.Client, policies: list[str], device_classes: list[str]) -> int:
    body = {"policies": policies, "backends": ["xnnpack", "vulkan"], "device_classes": device_classes}
    response = api.post("/api/sweeps", json=body)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def cells_text(sessions: sessionmaker[Session], sweep_id: int) -> dict[tuple[str, str], dict[str, str]]:
    with sessions() as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None
        return grid_device_texts(session, sweep)


def timed(text: str) -> bool:
    """A run that passed with its figure: "✓ 2.5 ms", or "~2.5 ms" when its replicas' interval is wide or
    missing (these tiny bundles on a shared host often are)."""
    return re.fullmatch(r"(✓ |~)[0-9.]+ ms", text) is not None


def libtorch_mapped(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def test_enrolled_runner_serves_its_class_and_refuses_a_tampered_bundle(
    api: httpx.Client, cpu_worker: None, register_runner: Callable[[str], Path],
    start_runner: StartRunner, farm_sessions: sessionmaker[Session],
) -> None:  # fmt: skip
    config = register_runner("board-1")
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["device_classes"] == [CLASS]
    # Enrolled quarantined; offline already when it stays silent past the (8 s) heartbeat timeout.
    assert runner_state(api, "board-1") in ("quarantined", "offline")
    runner = start_runner(config)
    wait_for(healthy(api, "board-1"), 180, "the runner to pass its health check")

    sweep_id = submit(api, ["act", "diffusion"], [CLASS])
    sweep = wait_for(lambda: sweep_done(api, sweep_id), 300, "the sweep and its device runs")
    texts = cells_text(farm_sessions, sweep_id)
    assert texts[("act", "vulkan")] == {CLASS: "-"}
    assert timed(texts[("act", "xnnpack")][CLASS])
    tampered = texts[("diffusion", "xnnpack")][CLASS]
    assert tampered.startswith("❌ ") and "is refused: its content hashes to" in tampered
    with farm_sessions() as session:
        rows = session.execute(
            select(Cell.policy, DeviceRun).join(Cell).where(Cell.sweep_id == sweep_id)
        ).all()
        runs = {policy: run for policy, run in rows}
        assert sorted(runs) == ["act", "diffusion"]  # the xnnpack cells; the vulkan ones have no class
        act = runs["act"]
        assert act.status == "ok" and act.source == "job"
        assert act.document["testcase"][0]["passed"] and act.document["frames"]["passed"]
        assert act.median_ms is not None and act.median_ms > 0
        refused = runs["diffusion"]  # the runner reports the refusal as the run's result
        assert refused.status == "failed" and refused.median_ms is None
        assert refused.error is not None and "is refused: its content hashes to" in refused.error
    cells = {(c["policy"], c["backend"]): c for c in sweep["cells"]}
    assert cells[("act", "xnnpack")]["state"] == "ok"  # the CPU state is the lower stage's
    # The runner's own processes (supervisor, consumer) never map libtorch; only run-bundle does.
    children = Path(f"/proc/{runner.pid}/task/{runner.pid}/children").read_text().split()
    assert not libtorch_mapped(runner.pid)
    assert children and not any(libtorch_mapped(int(pid)) for pid in children)


def test_sigkilled_runner_job_is_requeued_and_completes_once(
    api: httpx.Client, cpu_worker: None, register_runner: Callable[[str], Path],
    start_runner: StartRunner, farm_sessions: sessionmaker[Session], farm_env: dict[str, str],
) -> None:  # fmt: skip
    config = register_runner("board-kill")
    # A day of timed chunks: the first attempt is certainly still running when it is killed.
    slow = start_runner(config, "--min-seconds", "86400", "--max-seconds", "86400")
    wait_for(healthy(api, "board-kill"), 180, "the runner to pass its health check")
    sweep_id = submit(api, ["tdmpc"], [CLASS])

    def running_job() -> Job | None:
        with farm_sessions() as session:
            job = session.scalars(
                select(Job).join(Job.cell).where(Job.stage == f"run:{CLASS}", Job.cell.has(sweep_id=sweep_id))
            ).one_or_none()
            return job if job is not None and job.status is JobStatus.RUNNING else None

    job = wait_for(running_job, 180, "the device job to start")
    time.sleep(1)
    os.killpg(slow.pid, signal.SIGKILL)
    slow.wait()
    killed = utcnow()
    start_runner(config)  # the same board, restarted: health check again, then the re-queued job
    wait_for(lambda: sweep_done(api, sweep_id), 300, "the re-queued device job")
    with farm_sessions() as session:
        attempts = session.scalars(
            select(JobAttempt).where(JobAttempt.job_id == job.id).order_by(JobAttempt.attempt)
        ).all()
        assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lost"), (2, "ok")]
        assert "stopped heartbeating" in (attempts[0].error or "")
        # Lost no sooner than the heartbeat timeout after the job's last beat, which came at most one
        # heartbeat interval before the kill.
        lost = attempts[0].finished_at
        silent = float(farm_env["COVERFARM_HEARTBEAT_TIMEOUT_S"]) - float(
            farm_env["COVERFARM_HEARTBEAT_INTERVAL_S"]
        )
        assert lost is not None and (lost - killed).total_seconds() >= silent, (lost, killed)
        runs = session.scalars(select(DeviceRun).where(DeviceRun.job_id == job.id)).all()
        assert [(r.status, r.attempt) for r in runs] == [("ok", 2)]
    assert timed(cells_text(farm_sessions, sweep_id)[("tdmpc", "xnnpack")][CLASS])


def test_offline_run_bundle_import_and_a_changed_number_refused(
    api: httpx.Client, cpu_worker: None, register_runner: Callable[[str], Path], farm_env: dict[str, str],
    server: str, farm_sessions: sessionmaker[Session], tmp_path: Path,
) -> None:  # fmt: skip
    config = register_runner("air-gapped")
    sweep_id = submit(api, ["vqbet"], [])  # no device class: nothing is queued for a runner
    sweep = wait_for(lambda: sweep_done(api, sweep_id), 300, "the CPU cells")
    # vqbet is slow on its first bound in the stand-in and gets its bundle from the long re-run.
    cell = next(c for c in sweep["cells"] if c["backend"] == "xnnpack")
    sha = cell["result"]["document"]["bundle"]["sha256"]
    bundle = Path(farm_env["COVERFARM_HOME"]) / "artifacts" / sha
    out = tmp_path / "result.json"
    ran = run_cli(farm_env, "runner", "run-bundle", str(bundle), "--out", str(out), "--config", str(config),
                  "--min-chunks", "5", "--min-seconds", "0")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    signed: dict[str, Any] = json.loads(out.read_text())
    assert signed["signature"]["runner_id"] == json.loads(config.read_text())["runner_id"]

    changed = dict(signed, latency=dict(signed["latency"], median_ms=signed["latency"]["median_ms"] / 2))
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(changed))
    refused = run_cli(farm_env, "results", "import", str(forged), "--url", server, "--token", TOKEN)
    assert refused.returncode == 2 and "bad signature" in refused.stderr
    with farm_sessions() as session:
        assert session.scalars(select(DeviceRun).where(DeviceRun.cell_id == cell["id"])).all() == []

    imported = run_cli(farm_env, "results", "import", str(out), "--url", server, "--token", TOKEN)
    assert imported.returncode == 0, imported.stderr
    with farm_sessions() as session:
        run = session.scalars(select(DeviceRun).where(DeviceRun.cell_id == cell["id"])).one()
        # The row keeps the figure: the median of the replica medians (coverfarm.latency_interval).
        figure = statistics.median(part["median_ms"] for part in signed["latency"]["replicas"])
        assert (run.source, run.device_class, run.median_ms) == ("import", CLASS, figure)
        swept = session.get(Sweep, sweep_id)
        assert swept is not None
        swept.device_classes = [CLASS]  # shown in the columns once the sweep names the class
        text = grid_device_texts(session, swept)[("vqbet", "xnnpack")][CLASS]
        session.rollback()
    assert timed(text)
