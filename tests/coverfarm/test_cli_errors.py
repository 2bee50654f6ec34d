"""Bad input to ``coverfarm analyze`` ends with one clear line and a non-zero status, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def coverfarm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--policy", "nope", "--backend", "vulkan"],
            "unknown policy 'nope'; the tracker's policies: act, diffusion, dm05",
        ),
        (
            ["--policy", "act", "--backend", "metal"],
            "unknown backend 'metal'; known: openvino, vgf, vulkan, xnnpack",
        ),
        (["--policy", "act", "--backend", "vulkan", "--timeout", "0"], "--timeout must be a positive number"),
        (
            ["--policy", "act", "--backend", "vulkan", "--timeout", "-5"],
            "--timeout must be a positive number",
        ),
        (
            ["--policy", "act", "--backend", "vulkan", "--checkpoint", "/no/such/dir"],
            "is not a readable directory",
        ),
    ],
    ids=["policy", "backend", "timeout-zero", "timeout-negative", "checkpoint"],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path) -> None:
    result = coverfarm("analyze", *args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("coverfarm: error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()


def test_unreadable_checkpoint_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"not a directory")
    result = coverfarm(
        "analyze", "--policy", "act", "--backend", "xnnpack", "--checkpoint", str(file), cwd=tmp_path
    )
    assert result.returncode == 2
    assert "is not a readable directory" in result.stderr
