"""Helpers for the farm's process tests (a plain module: test files must not import conftest)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from coverfarm.processes import stop_group

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


# Not a farm setting: the engine's session-wide trace cache (tests/conftest.py), which the workers'
# stage child processes must share with the test session so that each policy is traced once.
INHERITED = ("COVERFARM_TRACE_CACHE",)


def child_env(farm_env: dict[str, str], **extra: str) -> dict[str, str]:
    """This environment minus any COVERFARM_ settings (but the trace cache), plus the test's; the
    stand-in engine importable."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("COVERFARM_") or key in INHERITED
    }
    env |= farm_env | extra
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)])
    return env


def coverfarm_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from coverfarm.cli import main; sys.exit(main())", *args]


def start_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``coverfarm serve`` on a free port as a child process (its own group); (process, base URL)."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            coverfarm_command("serve", "--port", str(port)),
            env=child_env(env),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/api/sweeps", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise RuntimeError(f"coverfarm serve did not start:\n{log.read_text()}")
        time.sleep(0.2)


def start_redis(port: int, folder: Path) -> subprocess.Popen[bytes]:
    """A throw-away redis-server on loopback ``port`` that keeps nothing on disk (a restart loses
    every message, the worst case for the farm)."""
    process = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(folder), "--logfile", str(folder / f"redis-{port}.log")],
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return process
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (a warm shutdown), SIGKILL it if that takes over 10 s."""
    stop_group(process, grace_s=10)
