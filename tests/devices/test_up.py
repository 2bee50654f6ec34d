"""``coverfarm up`` on the embedded default enrols a local CPU device runner and runs the host's XNNPACK
class, with the eager baseline of its speed-up: SQLite, the filesystem broker, a real worker and a real
runner, no servers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

from farmkit import ROOT, coverfarm_command, free_port
from runnertools import child_env_with_engine

CLASS = f"cpu-{os.uname().machine}-xnnpack"


def test_up_runs_the_xnnpack_bundle_on_a_local_runner(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # Two replicas a side (the fewest with an interval) rather than five: each is a fresh process, and
    # what is tested here is the wiring of `up`.
    env = child_env_with_engine(
        {
            "COVERFARM_HOME": str(home),
            "COVERFARM_ENGINE": "bundle_engine:analyze",
            "COVERFARM_TIMING__REPLICAS": "2",
        }
    )
    command = ["up", "--policies", "act", "--backends", "xnnpack", "--port", str(free_port()), "--once"]
    result = subprocess.run(
        coverfarm_command(*command),
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # The runner offers every CPU class its runtime has (OpenVINO's too); the sweep names the one of its
    # backends.
    [line] = [line for line in result.stderr.splitlines() if "local device runner for" in line]
    assert CLASS in line.split("local device runner for ", 1)[1].split(", ")
    assert (home / "runner.json").stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(home / "coverfarm.db") as db:
        assert db.execute("SELECT device_classes FROM sweeps").fetchall() == [(f'["{CLASS}"]',)]
        runs = db.execute("SELECT device_class, status, source, median_ms FROM device_runs").fetchall()
        baselines = db.execute("SELECT device_class, status, median_ms FROM device_baselines").fetchall()
    assert [(c, s, src) for c, s, src, _ in runs] == [(CLASS, "ok", "job")]
    assert runs[0][3] > 0
    # The local runner's host has torch and lerobot: eager act is timed beside the bundle.
    assert [(c, s) for c, s, _ in baselines] == [(CLASS, "ok")] and baselines[0][2] > 0
