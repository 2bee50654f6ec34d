"""``coverfarm up`` on the embedded default enrols a local CPU device runner and runs the host's XNNPACK
class, with the eager baseline of its speed-up: SQLite, the filesystem broker, a real worker and a real
runner, no servers."""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
from pathlib import Path

from farmkit import ROOT, coverfarm_command, free_port
from runnertools import child_env_with_engine

from coverfarm.settings import Settings
from coverfarm_cli.runner_farm import local_baseline, local_runner_env, local_timing
from gpu_runner.timing_options import add_timing_options, timing_rules

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
            # The eager baseline's wiring is tested here whatever the machine: on fewer CPUs than the
            # default 8, `up`'s runner takes no baseline jobs (test_local_runner_takes_baselines_...).
            "COVERFARM_UP_BASELINE_MIN_CPUS": "1",
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
    classes, why = line.split("local device runner for ", 1)[1].split("; ", 1)
    assert CLASS in classes.split(", ") and why.startswith("eager PyTorch timed beside it on up to ")
    assert (home / "runner.json").stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(home / "coverfarm.db") as db:
        assert db.execute("SELECT device_classes FROM sweeps").fetchall() == [(f'["{CLASS}"]',)]
        runs = db.execute("SELECT device_class, status, source, median_ms FROM device_runs").fetchall()
        baselines = db.execute("SELECT device_class, status, median_ms FROM device_baselines").fetchall()
    assert [(c, s, src) for c, s, src, _ in runs] == [(CLASS, "ok", "job")]
    assert runs[0][3] > 0
    # The local runner's host has torch and lerobot: eager act is timed beside the bundle.
    assert [(c, s) for c, s, _ in baselines] == [(CLASS, "ok")] and baselines[0][2] > 0


def test_local_runner_takes_baselines_only_with_the_cpus_a_known_speed_up_needs() -> None:
    """`up`'s runner shares its host with the lowering: under ``up_baseline_min_cpus`` CPUs it times no
    eager baseline and says why; its timing is short unless a COVERFARM_TIMING__ setting says otherwise."""
    cpus = len(os.sched_getaffinity(0))
    taken, why = local_baseline(Settings(up_baseline_min_cpus=cpus))
    assert taken and why == f"eager PyTorch timed beside it on up to {cpus} CPUs for the speed-ups"
    taken, why = local_baseline(Settings(up_baseline_min_cpus=cpus + 1))
    assert not taken and why.startswith(
        "outputs checked and timed briefly (waiting at most 60 s for the lowering to give the CPUs up), no "
        "eager baseline: this process"
    )
    assert f"fewer than the {cpus + 1} a known speed-up needs here (COVERFARM_UP_BASELINE_MIN_CPUS)" in why
    # Without speed-ups, a timing holds the lowering back for a minute at most, then times beside it.
    assert local_runner_env({}, baseline=False)["COVERFARM_TIMING_LOCK_WAIT_S"] == "60"
    assert "COVERFARM_TIMING_LOCK_WAIT_S" not in local_runner_env({}, baseline=True)
    assert (
        local_runner_env({"COVERFARM_TIMING_LOCK_WAIT_S": "5"}, baseline=False)[
            "COVERFARM_TIMING_LOCK_WAIT_S"
        ]
        == "5"
    )
    assert local_timing({})[:2] == ["--replicas", "2"]
    assert "--replicas" not in local_timing({"COVERFARM_TIMING__REPLICAS": "5"})
    parser = argparse.ArgumentParser()
    add_timing_options(parser)
    rules = timing_rules(parser.parse_args(local_timing({})), Settings())
    assert (rules.replicas, rules.warmup, rules.min_chunks, rules.max_s) == (2, 1, 3, 20.0)
