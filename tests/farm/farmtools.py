"""Helpers for the farm's process tests (a plain module: test files must not import conftest)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

StartWorker = Callable[..., subprocess.Popen[bytes]]


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    """Poll ``predicate`` (test-side only) until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def sweep_done(api: httpx.Client, sweep_id: int) -> dict[str, Any] | None:
    sweep: dict[str, Any] = api.get(f"/api/sweeps/{sweep_id}").json()
    return sweep if sweep["state"] == "done" else None


TOKEN = "farm-test-token"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_env(farm_env: dict[str, str], **extra: str) -> dict[str, str]:
    """This environment minus any COVERFARM_ settings, plus the test's; the stand-in engine importable."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COVERFARM_")}
    env |= farm_env | extra
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)])
    return env


def coverfarm_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from coverfarm.cli import main; sys.exit(main())", *args]


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (a warm shutdown), SIGKILL it if that takes over 10 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
