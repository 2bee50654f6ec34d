"""What is left when the orchestrator goes: ``coverfarm up`` stopped by a signal (or killed) takes its
worker and its runner down with it, and a runner whose orchestrator does not answer says so, stops
taking jobs and waits longer and longer instead of retrying at a fixed pace."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farmkit import ROOT, coverfarm_command, free_port, wait_for
from runnertools import child_env_with_engine

from coverfarm_cli.processes import STOP_GRACE_S
from farmrun import periodic
from farmrun.periodic import Outage
from gpu_runner.agent import REQUEUE, Timing, run_job
from gpu_runner.client import FarmClient
from gpu_runner.config import RunnerConfig


def children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rpartition(")")[2].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def start_up(tmp_path: Path, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``coverfarm up`` on the embedded default (in ``tmp_path/home``), serving until stopped (no --once);
    ``extra``: more of its environment (the stand-in engine's ``STANDIN_SECONDS``, say)."""
    home = tmp_path / "home"
    env = child_env_with_engine(
        {"COVERFARM_HOME": str(home), "COVERFARM_ENGINE": "bundle_engine:analyze"}, **extra
    )
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            coverfarm_command("up", "--policies", "act", "--backends", "xnnpack", "--port", str(free_port())),
            env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process, log


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``coverfarm up`` on the embedded default, serving until stopped (no --once)."""
    process, log = start_up(tmp_path)
    yield process, log
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture
def up_mid_job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], set[int]]]:
    """``coverfarm up`` whose worker runs the sweep's lower job, which lasts ten minutes and ignores
    SIGTERM: (``up``, every process it started). Whatever of them is still alive at the end is
    SIGKILLed."""
    process, log = start_up(tmp_path, STANDIN_SECONDS="600", STANDIN_IGNORES_SIGTERM="1")
    started: set[int] = set()
    try:
        started_worker_and_runner(process, log)

        def lower_running() -> bool:
            with sqlite3.connect(tmp_path / "home" / "coverfarm.db") as db:
                row = db.execute("SELECT count(*) FROM jobs WHERE stage = 'lower' AND status = 'running'")
                return bool(row.fetchone()[0])

        wait_for(lower_running, 120, "up's worker to start the sweep's lower job")
        started = children(process.pid)  # the worker's pool child, busy with the job, among them
        yield process, started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def started_worker_and_runner(process: subprocess.Popen[bytes], log: Path) -> set[int]:
    def both() -> set[int] | None:
        assert process.poll() is None, log.read_text()[-3000:]
        found = children(process.pid)
        lines = {pid: command_line(pid) for pid in found}
        has_worker = any(" worker " in f"{line} " for line in lines.values())  # `worker --quiet` too
        has_runner = any(" runner start " in line for line in lines.values())
        return found if has_worker and has_runner else None

    found: set[int] = wait_for(both, 120, "up to start its worker and its runner")
    return found


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_up_stopped_by_a_signal_stops_its_worker_and_runner(
    up: tuple[subprocess.Popen[bytes], Path], stop: signal.Signals
) -> None:
    process, log = up
    started = started_worker_and_runner(process, log)
    process.send_signal(stop)
    assert process.wait(timeout=90) == 128 + stop, log.read_text()[-3000:]
    wait_for(lambda: not any(alive(pid) for pid in started), 30, "the worker and the runner to stop")


def test_up_killed_outright_still_takes_its_worker_and_runner_down(
    up: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, log = up
    started = started_worker_and_runner(process, log)
    process.kill()  # no handler runs: the kernel's parent-death signal reaches the children
    process.wait()
    wait_for(lambda: not any(alive(pid) for pid in started), 60, "the orphaned worker and runner to stop")


def test_up_killed_outright_mid_job_stops_its_worker_within_a_bound(
    up_mid_job: tuple[subprocess.Popen[bytes], set[int]],
) -> None:
    """The kernel's SIGTERM starts the worker's warm shutdown, which would let the ten-minute job run
    out; the worker SIGKILLs its own group once it has had ``STOP_GRACE_S``."""
    process, started = up_mid_job
    process.kill()
    process.wait()
    killed = time.monotonic()
    bound = STOP_GRACE_S + 12
    wait_for(lambda: not any(alive(pid) for pid in started), bound, "the orphaned worker and runner to stop")
    print(f"\nup killed mid-job: its {len(started)} processes gone after {time.monotonic() - killed:.1f} s")


def test_up_stopped_mid_job_exits_within_a_bound(
    up_mid_job: tuple[subprocess.Popen[bytes], set[int]],
) -> None:
    process, started = up_mid_job
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    assert process.wait(timeout=STOP_GRACE_S + 15) == 128 + signal.SIGTERM
    assert not any(alive(pid) for pid in started)
    print(f"\nup stopped mid-job: exited after {time.monotonic() - sent:.1f} s")


def unreachable_client() -> FarmClient:
    config = RunnerConfig(url=f"http://127.0.0.1:{free_port()}", runner_id=1, credential="1.secret",
                          name="board", device_classes=["cpu-x86_64-xnnpack"])  # fmt: skip
    return FarmClient(config)


def test_a_claim_the_orchestrator_does_not_answer_puts_the_message_back(tmp_path: Path) -> None:
    client = unreachable_client()
    try:
        assert run_job(client, 7, Timing(0, 1), tmp_path) == REQUEUE
    finally:
        client.close()


def test_an_orchestrator_gone_for_long_is_said_once_and_tried_less_often(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(periodic.time, "monotonic", lambda: clock[0])
    outage = Outage("the orchestrator at http://farm", patience_s=90, log=logging.getLogger("test.outage"))
    tries = 0
    with caplog.at_level(logging.WARNING, logger="test.outage"):
        for _ in range(3600):  # an hour, one beat a second
            if outage.due():
                tries += 1
                outage.failed("ConnectError")
            clock[0] += 1
    assert outage.gone
    # A try every beat for the first 90 s, then 5, 10, 20 … 300 s apart: about 100 in the hour, not 3600.
    assert 95 <= tries <= 120, tries
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "has not answered for 90 s" in errors[0].getMessage()
    assert outage.wait_s == 300
    outage.succeeded()
    assert outage.due() and not outage.gone
    assert "answers again after" in caplog.records[-1].getMessage()
    assert os.environ.get("COVERFARM_STOP_WITH_PARENT") is None
