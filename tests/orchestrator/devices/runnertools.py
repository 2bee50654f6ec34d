"""Helpers for the device runner process tests (a plain module: test files must not import conftest)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from farmkit import ROOT, child_env, coverfarm_command

HERE = Path(__file__).resolve().parent  # the bundle-making stand-in engine (bundle_engine.py)
StartRunner = Callable[..., subprocess.Popen[bytes]]


def child_env_with_engine(farm_env: dict[str, str], **extra: str) -> dict[str, str]:
    return child_env(farm_env, [HERE], **extra)


def run_cli(farm_env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        coverfarm_command(*args),
        env=child_env_with_engine(farm_env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
