"""Per-phase time bounds of stage child processes: a phase that runs out is killed, what it logged stays."""

from __future__ import annotations

import os
import time
from pathlib import Path

from worker.stages.bounded import run_bounded

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
