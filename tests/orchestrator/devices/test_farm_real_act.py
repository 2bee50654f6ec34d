"""End to end with the real engine: act on XNNPACK submitted through the API and lowered by a real worker,
reported as the tracker's Markdown with the engine's numbers; and its bundle taken on to a device ✓ with
its latency, correctness figures and eager PyTorch timed by a baseline job on the same host, run by a
runner enrolled with a real token. Both sides follow the timing rules, and the
speed-up exists only when both are stable; on a loaded machine they may not be, and then none is given.
Its own redis-server and orchestrator (on the session's database), so only the real-engine worker takes
its lower jobs. act's Vulkan row is pinned by tests/worker/test_engine_real.py and a Vulkan cell's path
through the farm by the stand-in farm tests: lowering act for Vulkan here again would add minutes and
check nothing new.

The sweep's options are those of the engine's own real-policy tests (tests/worker/enginedocs.py:
real weights, seed 0, 16 frames), so the worker finds act's trace in the session's trace cache when
those tests ran first, and traces it for them otherwise."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from devicetools import grid_device_texts
from farmkit import (
    ROOT,
    TOKEN,
    coverfarm_command,
    free_port,
    start_redis,
    start_server,
    start_worker,
    stop,
    sweep_done,
    wait_for,
)
from runnertools import child_env_with_engine, run_cli
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import DeviceResult
from coverfarm.latency_interval import interval_of
from coverfarm.tracker import backend_title
from orchestrator.devices.speedups import speedup_of
from orchestrator.models import Cell, DeviceBaseline, DeviceRun, Sweep

CLASS = f"cpu-{os.uname().machine}-xnnpack"
# The whole sweep: act traced (or found in the cache), lowered for XNNPACK, its bundle run and its eager
# baseline timed, one after another on this 2-core machine.
SWEEP_BOUND_S = 1500


@pytest.fixture
def real_farm(farm_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    port = free_port()
    redis_process = start_redis(port, tmp_path)
    env = {
        **farm_env,
        "COVERFARM_BROKER_URL": f"redis://127.0.0.1:{port}/0",
        "COVERFARM_ENGINE": "worker.engine:analyze",
        "COVERFARM_STAGE_TIMEOUT_S": "900",
        "COVERFARM_LONG_TIMEOUT_S": "1800",
        "COVERFARM_DEVICE_TIMEOUT_S": "600",
        "COVERFARM_HEARTBEAT_TIMEOUT_S": "60",
    }
    processes = [redis_process]
    try:
        server, url = start_server(env, tmp_path / "serve.log")
        processes.append(server)
        processes.append(start_worker(env, tmp_path / "worker.log", "cpu-real"))
        yield env, url
    finally:
        for process in reversed(processes):
            stop(process)


@pytest.mark.real_policy
@pytest.mark.timeout(SWEEP_BOUND_S + 300)
def test_act_through_the_farm_to_tracker_rows_and_a_device_tick(
    real_farm: tuple[dict[str, str], str], farm_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    env, url = real_farm
    token = run_cli(env, "token", "create", "--url", url, "--token", TOKEN).stdout.strip()
    config = tmp_path / "runner.json"
    registered = run_cli(env, "runner", "register", "--url", url, "--token", token, "--name", "real-board",
                         "--config", str(config))  # fmt: skip
    assert registered.returncode == 0, registered.stderr
    with (tmp_path / "runner.log").open("wb") as out:
        runner = subprocess.Popen(
            coverfarm_command("runner", "start", "--config", str(config)), env=child_env_with_engine(env),
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as api:
            body = {
                "policies": ["act"],
                "backends": ["xnnpack"],
                "device_classes": [CLASS],
                "options": {"lowering": "fast", "weights": "real"},  # the session's act trace
                "timeout_s": 900,
            }
            response = api.post("/api/sweeps", json=body)
            assert response.status_code == 201, response.text
            sweep_id = response.json()["id"]
            sweep = wait_for(lambda: sweep_done(api, sweep_id), SWEEP_BOUND_S, "act on XNNPACK")
            reports = {
                backend: api.get(f"/api/sweeps/{sweep_id}/report.md", params={"backend": backend}).text
                for backend in ("xnnpack",)
            }
    finally:
        stop(runner)
        # Revoked: the session's database outlives this farm, and a live baseline-capable runner of
        # this class would give later sweeps baseline jobs nobody takes.
        run_cli(env, "runner", "revoke", registered.stdout.strip(), "--url", url, "--token", TOKEN)
    cells = {cell["backend"]: cell for cell in sweep["cells"]}
    assert set(cells) == {"xnnpack"}
    for backend, cell in cells.items():
        assert cell["state"] == "ok", cell["jobs"]
        result = cell["result"]
        assert result["export_status"] == "ok"
        assert result["ops_total"] > 1000  # act has ~1.5k edge ops (tracker)
        assert 0 < result["ops_on_backend"] <= result["ops_total"]
        document = result["document"]
        assert (document["policy"], document["backend"]) == ("act", backend)
        assert document["options"]["constant_prop"] is True
        assert document["options"]["lowering"] == "fast"
        # The row of this backend's tracker body carries the engine's own numbers and its export ✓.
        assert f"## {backend_title(backend)}: " in reports[backend]
        rows = [line for line in reports[backend].splitlines() if line.startswith("| act |")]
        assert len(rows) == 1, reports[backend]
        assert f"| act | {result['ops_on_backend']} / {result['ops_total']} (" in rows[0]
        assert [part.strip() for part in rows[0].split("|")][5] == "✓", rows[0]

    with farm_sessions() as session:
        swept = session.get(Sweep, sweep_id)
        assert swept is not None
        xnnpack = next(cell for cell in swept.cells if cell.backend == "xnnpack")
        text = grid_device_texts(session, swept)[("act", "xnnpack")][CLASS]
        runs = session.scalars(select(DeviceRun).join(Cell).where(Cell.sweep_id == sweep_id)).all()
        baseline = session.scalars(select(DeviceBaseline).where(DeviceBaseline.cell_id == xnnpack.id)).one()
    assert [run.cell_id for run in runs] == [xnnpack.id]
    run = runs[0]
    assert baseline.status == "ok" and baseline.median_ms is not None, baseline.error
    assert baseline.device_class == CLASS and baseline.document["policy"] == "act"
    eager = BaselineResult.model_validate(baseline.document)
    assert eager.torch_version == torch.__version__ and eager.threads is not None and eager.threads >= 1
    assert eager.threads == eager.free_cores and eager.cores is not None  # the free cores, recorded
    assert eager.build_s is not None and eager.build_s > 0
    device = DeviceResult.model_validate(run.document)
    for side in (eager.latency, device.latency):
        # Both sides follow the farm's rules: time-bounded replicas in fresh processes, under the
        # host's timing lock (the worker lowered the Vulkan cell beside them), cycling over 16 frames.
        assert side is not None and side.rules is not None and side.frames == 16
        assert len(side.replicas) == side.rules.replicas >= 2
        for part in side.replicas:
            assert part.iterations >= side.rules.min_chunks or part.stopped == "max_s reached"
            assert part.seconds >= side.rules.min_s or part.stopped != "min_chunks and min_s reached"
            assert part.isolation is not None and part.isolation.acquired
            assert part.host_load is not None and part.host_load.other_cores is not None
    assert eager.latency is not None and eager.latency.method is not None and "eager" in eager.latency.method
    assert device.latency is not None
    (checked,) = {part.outputs.differing for part in device.latency.replicas if part.outputs}
    assert checked == 0  # every timed chunk's outputs matched the reference
    verdict = speedup_of(run, baseline)
    eager_figure, device_figure = interval_of(eager.latency), interval_of(device.latency)
    if verdict.allowed:  # the figures' ratio, with an interval, narrow or marked wide (with why)
        assert verdict.value == pytest.approx(eager_figure.figure_ms / device_figure.figure_ms)
        assert verdict.narrow or verdict.reasons
    else:  # timed beside a CPU stage, say: no speed-up, and why
        assert verdict.value is None and verdict.reasons
    # The cell shows the run as the rules judge it: ✓ with milliseconds when its own interval is narrow,
    # ~milliseconds when not; the speed-up after it whenever one is given.
    assert text.startswith("✓ " if device_figure.narrow else "~"), (text, reports["xnnpack"])
    assert ("×" in text) == verdict.allowed, text
    assert "eager baseline: PyTorch" in reports["xnnpack"]
    document = run.document
    assert run.status == "ok" and run.median_ms is not None and run.median_ms > 0
    assert all(check["passed"] for check in document["testcase"])
    assert document["frames"]["frames"] == 16 and document["frames"]["passed"]
    assert all(output["max_abs_error"] < 1e-2 for output in document["frames"]["outputs"])
    latency = document["latency"]
    loads = [part.host_load.other_cores for part in device.latency.replicas if part.host_load]
    shown = f"{verdict.value:.1f}×" if verdict.value is not None else "none: " + "; ".join(verdict.reasons)
    print(
        f"act/xnnpack on {CLASS}: median {latency['median_ms']:.2f} ms, p90 {latency['p90_ms']:.2f} ms, "
        f"cv {latency['cv']:.3f}, replica medians {[r['median_ms'] for r in latency['replicas']]}, other "
        f"processes {loads} cores; eager median {eager.latency.median_ms:.2f} ms (cv {eager.latency.cv:.3f}, "
        f"{eager.threads} threads); speed-up {shown}; "
        f"frames max abs error {max(o['max_abs_error'] for o in document['frames']['outputs']):.3g}"
    )
