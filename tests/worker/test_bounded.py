"""Per-phase time bounds of stage child processes: a phase that runs out is killed, what it logged stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker.child.bounded import run_bounded

HERE = str(Path(__file__).parent)


def run(tmp_path: Path, *args: str, partition: float = 30, export: float = 30):  # type: ignore[no-untyped-def]
    return run_bounded(
        "sleepy_stage",
        list(args),
        events_path=tmp_path / "events.jsonl",
        bounds={"partition": partition, "export": export},
        first_phase="partition",
        log_path=tmp_path / "log.txt",
        env={"PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])},
    )


def test_a_stage_within_its_bounds_finishes(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 0
    assert result.timed_out_phase is None
    assert [e["event"] for e in result.events] == ["phase", "edge", "phase", "done"]


def test_partition_out_of_time_is_killed_and_keeps_what_it_logged(tmp_path: Path) -> None:
    start = time.monotonic()
    result = run(tmp_path, "--partition-s", "60", partition=2)
    assert time.monotonic() - start < 30
    assert result.timed_out_phase == "partition"
    assert result.returncode is not None and result.returncode < 0
    assert [e["event"] for e in result.events] == ["phase", "edge"]
    assert result.events[1]["ops"] == 10


def test_each_phase_has_its_own_bound(tmp_path: Path) -> None:
    # 1.5 s of partitioning fits a 3 s partition bound; 60 s of export does not fit a 3 s export bound.
    result = run(tmp_path, "--partition-s", "1.5", "--export-s", "60", partition=3, export=3)
    assert result.timed_out_phase == "export"
    assert result.phase_seconds["partition"] >= 1.5
    assert 3 <= result.phase_seconds["export"] < 20


def test_a_crashing_child_is_reported_not_raised(tmp_path: Path) -> None:
    result = run(tmp_path, "--crash")
    assert result.timed_out_phase is None
    assert result.returncode == -11
    assert [e["event"] for e in result.events] == ["phase", "edge"]


PARENT = """
import sys
from pathlib import Path
from worker.child.bounded import run_bounded
tmp = Path(sys.argv[1])
run_bounded("sleepy_stage", ["--partition-s", "60"], events_path=tmp / "events.jsonl",
            bounds={"partition": 120}, first_phase="partition", log_path=tmp / "log.txt")
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_sigkilled_parent_leaves_no_stage_child_behind(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, root, os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], env=env)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not children or not (tmp_path / "events.jsonl").exists():
            assert parent.poll() is None and time.monotonic() < deadline, "the stage child did not start"
            path = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
            children = [int(pid) for pid in path.read_text().split()]
            time.sleep(0.1)
        [child] = children
        # The child has its own session: a kill of the parent's group would not reach it either.
        assert os.getsid(child) == child
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _running(child):
            assert time.monotonic() < deadline, f"stage child {child} outlived its SIGKILLed parent"
            time.sleep(0.1)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
