"""The eager-PyTorch baseline: bad input, a policy that fails or runs out of time (act is timed for real
by the farm's baseline jobs, tests/orchestrator/devices/test_farm_real_act.py and test_up.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coverfarm.baseline import BaselineResult, speedup
from coverfarm.device_result import DeviceResult, TimingRules
from coverfarm.result import Options
from coverfarm_cli import main
from farmrun.stats import latency_stats
from worker.bundle.baseline import measure_baseline

ROOT = Path(__file__).resolve().parents[2]
COVERFARM = [sys.executable, "-m", "coverfarm_cli"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--policy", "act", "--min-chunks", "0"], "--min-chunks: Input should be greater than"),
        (["--policy", "act", "--warmup", "-1"], "--warmup: Input should be greater than or equal to 0"),
        (["--policy", "act", "--frames", "17"], "--frames must be 1 to 16, got 17"),
        (["--policy", "act", "--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
        (["--policy", "act", "--checkpoint", "/no/such/dir"], "checkpoint /no/such/dir is not a readable"),
    ],
    ids=["policy", "min-chunks", "warmup", "frames", "timeout", "checkpoint"],
)
def test_baseline_mistakes_are_one_line(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["baseline", *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"coverfarm: error: {expected}"), line


QUICK = TimingRules(warmup=0, min_chunks=1, min_s=0.0, replicas=1)


def test_a_policy_the_engine_cannot_build_fails_with_its_cause() -> None:
    result = measure_baseline("no_such_policy", Options(), QUICK)
    assert result.status == "failed" and result.latency is None
    assert result.error is not None
    expected = "worker.trace.policies.registry.UnsupportedPolicyError: no adapter for policy 'no_such_policy'"
    assert result.error.startswith(expected)
    assert result.torch_version is not None and result.threads is not None  # the child got that far


def test_a_build_over_its_bound_is_slow() -> None:
    result = measure_baseline("act", Options(timeout_s=1.0), QUICK.model_copy(update={"replicas": 2}))
    assert result.status == "slow" and result.latency is None
    assert result.error == "the build phase took over 1 s"


def test_a_baseline_without_rules_gives_no_speedup() -> None:
    """Documents stored before replicated, time-bounded timing divide no medians (the rules are in
    tests/gpu_runner/test_timing.py)."""
    eager_latency = latency_stats([30.0, 50.0, 40.0], 0, 0.0)
    device_latency = latency_stats([10.0, 8.0], 0, 0.0)
    eager = BaselineResult(policy="act", options=Options(), frames=1, status="ok", latency=eager_latency)
    device = DeviceResult(bundle_sha256="0" * 64, status="ok", latency=device_latency)
    verdict = speedup(eager, device)
    assert not verdict.allowed and verdict.value is None
    assert verdict.eager_median_ms == 40.0 and verdict.device_median_ms == 9.0
    assert speedup(eager, None).reasons == ["no device latency"]
    failed = BaselineResult(policy="act", options=Options(), frames=1, status="failed")
    assert speedup(failed, device).reasons == ["the eager baseline ended failed: no figure"]


@pytest.mark.real_policy
def test_the_baseline_runs_on_the_cpus_its_process_may_use(tmp_path: Path) -> None:
    """act's eager baseline in a real child process pinned to one CPU, in a cgroup of half a CPU
    (``COVERFARM_CGROUP_ROOT``, tests/gpu_runner/test_cpu_share.py): one torch thread, and all three
    bounds recorded in the document and its replica."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, relative = line.split(":", 2)
        if number == "0" and controllers == "":
            (tmp_path / relative.lstrip("/")).mkdir(parents=True, exist_ok=True)
            (tmp_path / relative.lstrip("/") / "cpu.max").write_text("50000 100000\n")
    quick = ["--warmup", "0", "--min-chunks", "1", "--min-seconds", "0", "--replicas", "1", "--frames", "1"]
    quick += ["--timeout", "600", "--json"]
    run = subprocess.run(
        ["taskset", "-c", "0", *COVERFARM, "baseline", "--policy", "act", *quick],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COVERFARM_CGROUP_ROOT": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = BaselineResult.model_validate_json(run.stdout)
    assert result.cpus is not None and result.threads == result.cpus.threads == 1
    assert (result.cpus.affinity, result.cpus.quota_cpus) == (1, 0.5)
    assert result.cpus.busy is not None and result.cores == os.cpu_count()
    assert result.latency is not None and result.latency.replicas[0].cpus == result.cpus
    assert "timing on 1 torch threads (1 of" in run.stderr and "CPU quota 0.5" in run.stderr


@pytest.mark.real_policy
def test_a_policy_with_a_frame_history_is_timed_on_its_bundles_frame() -> None:
    """vqbet stacks a history of observations, so its bundle holds frame 0 alone (the trace's rule): its
    baseline cycles over that frame whatever ``frames`` asks, and the speed-up's sides time the same
    inputs (16 frames against the device's 1 refused every such cell's speed-up)."""
    result = measure_baseline("vqbet", Options(frames=16), QUICK)
    assert result.status == "ok", result.error
    assert result.frames == 1 and result.latency is not None and result.latency.frames == 1
    device = DeviceResult(
        bundle_sha256="0" * 64, status="ok", latency=result.latency.model_copy(), host_id=result.host_id
    )
    assert not [reason for reason in speedup(result, device).reasons if "different inputs" in reason]
