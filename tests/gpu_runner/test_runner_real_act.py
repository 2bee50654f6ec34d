"""The runner on a real bundle: a small act checkpoint lowered for XNNPACK by ``coverfarm analyze``, run by
``coverfarm runner run-bundle`` (both as the user types them; the trace cache is the session's). The
full-size act goes the same way through the farm in tests/orchestrator/devices/test_farm_real_act.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runnerhelp import ROOT
from small_checkpoints import SMALL_ACT, SMALL_ACT_FEATURES, save_small_checkpoint

from coverfarm.device_result import DeviceResult

COVERFARM = [sys.executable, "-m", "coverfarm_cli"]


@pytest.mark.real_policy
def test_act_xnnpack_bundle_runs_and_matches_eager(tmp_path: Path) -> None:
    checkpoint = save_small_checkpoint(tmp_path / "act", "act", SMALL_ACT_FEATURES, **SMALL_ACT)
    command = ["analyze", "--policy", "act", "--backend", "xnnpack", "--checkpoint", str(checkpoint)]
    analyze = subprocess.run(
        [*COVERFARM, *command, "--out", str(tmp_path / "out"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert analyze.returncode == 0, analyze.stderr[-3000:]
    bundle = Path(json.loads(analyze.stdout)["bundle"]["path"])
    out = tmp_path / "result.json"
    run = subprocess.run(
        [
            *COVERFARM,
            "runner",
            "run-bundle",
            str(bundle),
            "--out",
            str(out),
            "--warmup",
            "1",
            "--min-chunks",
            "3",
            "--min-seconds",
            "0",
            "--replicas",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    result = DeviceResult.model_validate_json(out.read_text())
    assert result.status == "ok", result.error
    assert result.bundle_sha256 == bundle.name
    assert [c.program for c in result.testcase] == ["forward"] and result.testcase[0].passed
    assert result.frames is not None and result.frames.passed and result.frames.frames == 16
    assert result.latency is not None and result.latency.median_ms > 0 and len(result.latency.samples_ms) == 3
