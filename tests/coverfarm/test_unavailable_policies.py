"""The six tracker policies no released LeRobot has keep their row: a precise ❌, not an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from coverfarm import catalog, tracker
from coverfarm.result import ResultDocument, StageStatus


def coverfarm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_the_help_lists_every_tracker_policy(tmp_path: Path) -> None:
    result = coverfarm("analyze", "--help", cwd=tmp_path)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for name in catalog.POLICIES:
        assert name in text


def test_analyze_gives_an_unavailable_policy_its_row_with_the_cause(tmp_path: Path) -> None:
    # Each of the six goes through the engine in tests/worker/test_unavailable_rows.py.
    policy = "dm05"
    result = coverfarm("analyze", "--policy", policy, "--backend", "vulkan", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = ResultDocument.model_validate(json.loads(result.stdout))
    assert (doc.policy, doc.backend) == (policy, "vulkan")
    assert doc.trace.status is StageStatus.FAILED
    assert doc.trace.error is not None
    assert doc.trace.error.message == "policy not available in lerobot 0.6.1"
    assert doc.status is StageStatus.FAILED
    assert tracker.row(doc) == [policy, "❌", "❌", "❌", "❌"]
    assert tracker.cause_line(doc) == "trace: PolicyNotAvailable: policy not available in lerobot 0.6.1"
    row = coverfarm("analyze", "--policy", policy, "--backend", "xnnpack", cwd=tmp_path)
    assert row.returncode == 0, row.stderr
    assert f"| {policy} | ❌ | ❌ | ❌ | ❌ |" in row.stdout
    assert "policy not available in lerobot 0.6.1" in row.stdout
