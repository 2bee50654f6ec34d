"""The threads a CPU runtime gets: the CPUs of the process's affinity mask less the busy ones, capped by its
cgroup's CPU quota (``farmrun.cpu_share``), checked in real child processes under ``taskset``, under a
cgroup filesystem of files written here (``COVERFARM_CGROUP_ROOT``) and, where this host lets a test
create one, under a real cgroup with a CPU quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import CpuShare, Replica
from coverfarm.result import Options
from farmrun.cpu_share import ROOT_ENV_VAR, quota, threads_for, usable_cpus

ROOT = Path(__file__).resolve().parents[2]
SHARE = [sys.executable, "-m", "farmrun.cpu_share", "--sample-s", "0"]  # no busy sampling: exact
HOST_CPUS = len(os.sched_getaffinity(0))


def share_in_child(command: list[str], env: dict[str, str] | None = None) -> CpuShare:
    run = subprocess.run(
        command, capture_output=True, text=True, check=True, cwd=ROOT, env={**os.environ, **(env or {})}
    )
    return CpuShare.model_validate(json.loads(run.stdout))


@pytest.mark.parametrize(
    ("allowed", "quota_cpus", "busy", "threads"),
    [(16, None, 0.02, 16), (16, None, 2.6, 13), (16, 4.0, None, 4), (8, 1.5, 0.0, 1), (2, 0.5, None, 1),
     (4, None, 3.9, 1), (8, 6.0, 4.2, 4)],
)  # fmt: skip
def test_threads_are_the_free_cpus_of_the_mask_capped_by_the_quota(
    allowed: int, quota_cpus: float | None, busy: float | None, threads: int
) -> None:
    assert threads_for(allowed, quota_cpus, busy) == threads


def test_the_quota_is_the_smallest_on_the_way_up_from_the_process_cgroup(tmp_path: Path) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "a/b/cpu.max").write_text("max 100000\n")
    (tmp_path / "a/cpu.max").write_text("250000 100000\n")
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert quota(tmp_path, "0::/a/b\n") == (2.5, str(tmp_path / "a/cpu.max"))
    assert quota(tmp_path, "0::/elsewhere\n") == (4.0, str(tmp_path / "cpu.max"))  # a namespace's own root
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct/job").mkdir(parents=True)
    (v1 / "cpu,cpuacct/job/cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu,cpuacct/job/cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu,cpuacct/cpu.cfs_period_us").write_text("100000\n")
    assert quota(v1, "12:memory:/job\n4:cpu,cpuacct:/job\n0::/\n") == (
        0.5,
        str(v1 / "cpu,cpuacct/job/cpu.cfs_quota_us"),
    )
    assert quota(v1, "4:cpu,cpuacct:/\n") == (None, None)  # -1: no quota
    assert quota(tmp_path / "missing", "0::/\n") == (None, None)


def test_a_child_under_taskset_uses_one_thread() -> None:
    pinned = share_in_child(["taskset", "-c", "0", *SHARE])
    assert (pinned.affinity, pinned.threads) == (1, 1)
    free = share_in_child(SHARE)
    assert free.affinity == HOST_CPUS and free.threads == HOST_CPUS  # without it, every CPU of the host
    assert pinned.cores == free.cores == os.cpu_count()


def _fake_cgroup(root: Path, quota_us: int, period_us: int) -> None:
    """The quota written where this process's own cgroup lines point (its children share them)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, relative = line.split(":", 2)
        if number == "0" and controllers == "":
            folder = root / relative.lstrip("/")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cpu.max").write_text(f"{quota_us} {period_us}\n")


def test_a_child_under_a_cgroup_quota_uses_that_many_threads(tmp_path: Path) -> None:
    _fake_cgroup(tmp_path, 100000, 100000)
    limited = share_in_child(SHARE, {ROOT_ENV_VAR: str(tmp_path)})
    assert limited.quota_cpus == 1.0 and limited.quota_from is not None
    assert limited.quota_from.startswith(str(tmp_path)) and limited.quota_from.endswith("cpu.max")
    assert (limited.affinity, limited.threads) == (HOST_CPUS, 1)
    _fake_cgroup(tmp_path, 350000, 100000)  # above the mask: the mask decides
    assert share_in_child(SHARE, {ROOT_ENV_VAR: str(tmp_path)}).threads == HOST_CPUS


def test_usable_cpus_are_the_mask_capped_by_the_quota_busy_ones_counted_in(tmp_path: Path) -> None:
    assert usable_cpus(tmp_path / "no-cgroups") == HOST_CPUS
    _fake_cgroup(tmp_path, 100000, 100000)
    assert usable_cpus(tmp_path) == 1


@pytest.fixture
def real_cgroup() -> Iterator[Path]:
    """A real cgroup with a CPU quota of 1 CPU (v1 ``cpu`` controller or v2 ``cpu.max``), or a skip."""
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    folder = None
    try:
        if (v1 / "cpu.cfs_quota_us").is_file():
            folder = v1 / f"coverfarm-test-{os.getpid()}"
            folder.mkdir()
            (folder / "cpu.cfs_period_us").write_text("100000")
            (folder / "cpu.cfs_quota_us").write_text("100000")
        elif "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
            folder = v2 / f"coverfarm-test-{os.getpid()}"
            folder.mkdir()
            (folder / "cpu.max").write_text("100000 100000")
        else:
            pytest.skip("no cgroup cpu controller a test can use here")
    except OSError as error:
        if folder is not None and folder.is_dir():
            folder.rmdir()
        pytest.skip(f"a cgroup cannot be created here: {error}")
    assert folder is not None
    yield folder
    folder.rmdir()


def test_a_child_in_a_real_cgroup_with_a_quota_uses_that_many_threads(real_cgroup: Path) -> None:
    procs = real_cgroup / "cgroup.procs"
    command = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *SHARE]
    limited = share_in_child(command, {ROOT_ENV_VAR: ""})  # the real cgroup filesystem
    assert limited.quota_cpus == 1.0 and limited.quota_from is not None
    assert limited.quota_from.startswith(str(real_cgroup))
    assert (limited.affinity, limited.threads) == (HOST_CPUS, 1)


def test_documents_before_the_cpu_share_still_read() -> None:
    old = {"policy": "act", "options": Options().model_dump(), "frames": 16, "status": "ok", "threads": 16,
           "cores": 16, "free_cores": 16}  # fmt: skip
    assert BaselineResult.model_validate(old).cpus is None
    replica = {"warmup": 3, "iterations": 5, "seconds": 2.0, "stopped": "x", "median_ms": 1.0, "p90_ms": 1.0,
               "min_ms": 1.0, "cv": 0.0, "threads": 16}  # fmt: skip
    assert Replica.model_validate(replica).cpus is None
