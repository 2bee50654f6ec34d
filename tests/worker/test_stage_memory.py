"""Each stage child's peak memory is recorded per phase: sampled while it runs, exact when it exits."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from worker.child.bounded import run_bounded

HERE = str(Path(__file__).parent)
MB = 2**20

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="peaks come from /proc and wait4"
)


def run(tmp_path: Path, *args: str) -> dict[str, int]:
    result = run_bounded(
        "hungry_stage",
        list(args),
        events_path=tmp_path / "events.jsonl",
        bounds={"partition": 60, "export": 60},
        first_phase="partition",
        log_path=tmp_path / "log.txt",
        env={"PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 0, result.log_tail
    return result.phase_peak_bytes


def test_each_phase_gets_the_peak_reached_by_its_end(tmp_path: Path) -> None:
    peaks = run(tmp_path, "--partition-mb", "64", "--export-mb", "256", "--hold-s", "1")
    # The child's interpreter holds about 14 MB before its buffers: the partition phase is 64 MB above
    # that, and none of the export phase's 256 MB, even when the sample after the phase event catches
    # the export buffer half allocated.
    assert 64 * MB < peaks["partition"] < 128 * MB
    assert peaks["export"] > peaks["partition"] + 150 * MB


def test_a_sample_taken_after_a_phase_event_counts_for_the_next_phase(tmp_path: Path) -> None:
    # The export event reaches the log 0.6 s (three samples) after the export buffer is in place: the
    # samples taken in between hold the export phase's memory, and the event's time places them there.
    peaks = run(tmp_path, "--partition-mb", "64", "--export-mb", "256", "--hold-s", "1", "--late-s", "0.6")
    assert 64 * MB < peaks["partition"] < 128 * MB
    assert peaks["export"] > 256 * MB


def test_a_child_that_exits_at_once_still_reports_its_exact_peak(tmp_path: Path) -> None:
    # No time to sample: the figure comes from wait4's ru_maxrss when the child is reaped.
    peaks = run(tmp_path, "--export-mb", "200")
    assert peaks["export"] > 200 * MB
