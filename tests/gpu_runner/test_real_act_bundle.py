"""The runner on a real bundle: a small act checkpoint lowered for XNNPACK by ``coverfarm analyze
--etrecord`` (as the user types it; the trace cache is the session's), once for the module, then

- run by ``coverfarm runner run-bundle``: verified, its test case and 16 frames checked, its chunk timed;
- run by ``run-bundle --numerics always`` with the stand-in profiling runtime (the executorch wheel's
  pybindings with a debug buffer). Its output is right, so no op departs; the run still compares every
  output the wheel's runtime logs (each XNNPACK call's and each CPU-left op's) with eager's from the
  ETRecord, and says the largest error.

The full-size act goes the same way through the farm in tests/orchestrator/devices/test_farm_real_act.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runnerhelp import ROOT
from small_checkpoints import SMALL_ACT, SMALL_ACT_FEATURES, save_small_checkpoint

from coverfarm.device_result import DeviceResult
from coverfarm.numerics import CPU

COVERFARM = [sys.executable, "-m", "coverfarm_cli"]


@pytest.fixture(scope="module")
def act_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small act's XNNPACK bundle with its ETRecords, lowered by ``coverfarm analyze``."""
    tmp_path = tmp_path_factory.mktemp("act-bundle")
    checkpoint = save_small_checkpoint(tmp_path / "act", "act", SMALL_ACT_FEATURES, **SMALL_ACT)
    command = ["analyze", "--policy", "act", "--backend", "xnnpack", "--checkpoint", str(checkpoint)]
    analyze = subprocess.run(
        [*COVERFARM, *command, "--etrecord", "--out", str(tmp_path / "out"), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert analyze.returncode == 0, analyze.stderr[-3000:]
    return Path(json.loads(analyze.stdout)["bundle"]["path"])


def _run_bundle(bundle: Path, out: Path, *args: str) -> DeviceResult:
    run = subprocess.run(
        [*COVERFARM, "runner", "run-bundle", str(bundle), "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    return DeviceResult.model_validate_json(out.read_text())


@pytest.mark.real_policy
def test_act_xnnpack_bundle_runs_and_matches_eager(act_bundle: Path, tmp_path: Path) -> None:
    timing = ["--warmup", "1", "--min-chunks", "3", "--min-seconds", "0", "--replicas", "1"]
    result = _run_bundle(act_bundle, tmp_path / "result.json", *timing)
    assert result.status == "ok", result.error
    assert result.bundle_sha256 == act_bundle.name
    assert [c.program for c in result.testcase] == ["forward"] and result.testcase[0].passed
    assert result.frames is not None and result.frames.passed and result.frames.frames == 16
    assert result.latency is not None and result.latency.median_ms > 0 and len(result.latency.samples_ms) == 3


@pytest.mark.real_policy
def test_act_numerics_run_compares_every_logged_output_with_eager(act_bundle: Path, tmp_path: Path) -> None:
    args = [
        "--unsigned", "--runtime", "python", "--profiling-executor-runner", "wheel-etdump",
        "--numerics", "always", "--warmup", "0", "--min-chunks", "1", "--min-seconds", "0", "--replicas", "1",
    ]  # fmt: skip
    result = _run_bundle(act_bundle, tmp_path / "result.json", *args)
    numerics = result.numerics
    assert numerics is not None and numerics.trigger == "requested" and numerics.status == "ok", numerics
    summary = numerics.summary
    assert summary is not None, numerics.summary_note
    assert summary.first is None  # the bundle's output is right
    delegated = [op for op in summary.ops if op.where == "XnnpackBackend"]
    assert delegated and all(op.span >= 1 for op in delegated)
    assert all(not op.departs for op in summary.ops)
    assert summary.largest is not None and summary.largest.max_abs_error < summary.largest.bound
    print(
        f"act xnnpack: {len(summary.ops)} outputs compared ({len(delegated)} XNNPACK calls, "
        f"{sum(op.where == CPU for op in summary.ops)} CPU ops), largest error "
        f"{summary.largest.max_abs_error:.3g} at {summary.largest.op}"
    )
