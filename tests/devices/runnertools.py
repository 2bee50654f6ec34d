"""Helpers for the device runner process tests (a plain module: test files must not import conftest)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from farmtools import ROOT, child_env, coverfarm_command

HERE = Path(__file__).resolve().parent
StartRunner = Callable[..., subprocess.Popen[bytes]]


def child_env_with_engine(farm_env: dict[str, str], **extra: str) -> dict[str, str]:
    env = child_env(farm_env, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])  # bundle_engine importable
    return env


def run_cli(farm_env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        coverfarm_command(*args),
        env=child_env_with_engine(farm_env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
