"""A device run never overlaps a CPU stage on one host: real ``coverfarm runner run-bundle`` processes
against a real bounded stage child (the stand-in ``sleepy_stage``, run the way the engine runs trace and
lower: ``run_bounded(..., host_lock=...)``), both on one lock file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from runnerhelp import ROOT

from coverfarm.device_result import DeviceResult
from farmrun.hostlock import HostLock
from worker.child.bounded import StageRun, run_bounded

SLEEPY = str(ROOT / "tests" / "worker")


def stage(lock: Path, tmp: Path, seconds: float) -> StageRun:
    return run_bounded(
        "sleepy_stage",
        ["--partition-s", str(seconds)],
        events_path=tmp / "events.jsonl",
        bounds={"partition": 60, "export": 60},
        first_phase="partition",
        log_path=tmp / "stage.log",
        env={"PYTHONPATH": os.pathsep.join([SLEEPY, os.environ.get("PYTHONPATH", "")])},
        host_lock=HostLock(lock),
    )


def stage_window(run: StageRun) -> tuple[datetime, datetime]:
    times = [event["t"] for event in run.events]
    return datetime.fromtimestamp(min(times), UTC), datetime.fromtimestamp(max(times), UTC)


def run_bundle(
    bundle: Path, lock: Path, out: Path, *extra: str, wait_s: float = 120
) -> subprocess.Popen[str]:
    env = {**os.environ, "COVERFARM_TIMING_LOCK": str(lock), "COVERFARM_TIMING_LOCK_WAIT_S": str(wait_s)}
    args = ["runner", "run-bundle", str(bundle), "--out", str(out), "--unsigned", "--warmup", "1",
            "--min-chunks", "5", "--replicas", "2", *extra]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "coverfarm_cli", *args], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def timing_window(out: Path) -> tuple[DeviceResult, datetime, datetime]:
    result = DeviceResult.model_validate_json(out.read_text())
    assert result.latency is not None, result.error
    isolation = result.latency.replicas[0].isolation
    assert isolation is not None and isolation.held_from and isolation.held_to
    return result, isolation.held_from, isolation.held_to


def test_a_device_run_waits_for_the_stage_that_runs(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    lock = tmp_path / "timing.lock"
    done: list[StageRun] = []
    lowering = threading.Thread(target=lambda: done.append(stage(lock, tmp_path, 6.0)))
    lowering.start()
    while not (tmp_path / "events.jsonl").exists():  # the stage child has started, lock held
        time.sleep(0.05)
    device = run_bundle(tiny_bundles["xnnpack"], lock, tmp_path / "result.json", "--min-seconds", "0.5")
    device.communicate(timeout=300)
    lowering.join()
    result, held_from, _held_to = timing_window(tmp_path / "result.json")
    assert result.status == "ok", result.error
    _, stage_end = stage_window(done[0])
    assert held_from >= stage_end  # it timed only after the stage ended
    assert result.latency is not None and len(result.latency.replicas) == 2
    for part in result.latency.replicas:  # both replicas inside one hold: no stage between them
        assert part.isolation is not None and part.isolation.acquired and part.isolation.waited_s > 1


def test_a_stage_waits_for_the_device_run_that_times(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    lock = tmp_path / "timing.lock"
    device = run_bundle(tiny_bundles["xnnpack"], lock, tmp_path / "result.json", "--min-seconds", "3")
    probe = HostLock(lock)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the device run holds the lock
        with probe.timing(0.0) as isolation:
            if not isolation.acquired:
                break
        time.sleep(0.05)
    run = stage(lock, tmp_path, 0.5)  # started while the device run times: it must wait
    device.communicate(timeout=300)
    _result, _held_from, held_to = timing_window(tmp_path / "result.json")
    stage_start, _ = stage_window(run)
    assert stage_start >= held_to
    assert run.returncode == 0 and run.timed_out_phase is None  # waiting did not eat its bound


def test_a_timing_that_cannot_wait_longer_says_it_was_not_isolated(
    tiny_bundles: dict[str, Path], tmp_path: Path
) -> None:
    lock = tmp_path / "timing.lock"
    lowering = threading.Thread(target=lambda: stage(lock, tmp_path, 8.0))
    lowering.start()
    while not (tmp_path / "events.jsonl").exists():
        time.sleep(0.05)
    out = tmp_path / "result.json"
    device = run_bundle(tiny_bundles["xnnpack"], lock, out, "--min-seconds", "0", wait_s=1)
    printed, err = device.communicate(timeout=300)
    lowering.join()
    result, _, _ = timing_window(tmp_path / "result.json")
    assert result.latency is not None
    isolation = result.latency.replicas[0].isolation
    assert isolation is not None and not isolation.acquired and 1 <= isolation.waited_s < 5
    summary = json.loads(printed)
    assert summary["status"] == "ok", err
