"""The CPUs this process may use, and so how many threads a CPU runtime should run (Linux).

Three things bound it, each recorded (``coverfarm.device_result.CpuShare``):

- the process's **affinity** mask (``os.sched_getaffinity``: ``taskset``, a container's cpuset);
- its cgroup's CPU **quota**, in CPUs: cgroup v2 ``cpu.max`` (``"150000 100000"`` is 1.5 CPUs, ``"max
  ..."`` none), else v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (-1: none), the smallest on the
  way from the process's own cgroup (``/proc/self/cgroup``) up to the root of the hierarchy, under the
  cgroup filesystem at ``COVERFARM_CGROUP_ROOT`` (default ``/sys/fs/cgroup``);
- the **busy** CPUs among those of the mask: the cores other processes kept busy over ``sample_s``
  seconds of watching (``/proc/stat``'s per-CPU lines) while this process sleeps.

The threads are the mask's CPUs less the busy ones, rounded, capped by the quota rounded down, at least
one (``threads_for``). A thread pool larger than that shares cores, and PyTorch's collapses when it does
(an eager act timed on 16 threads under ``taskset -c 0-7`` took 185 ms where 8 threads take 110).

``python -m farmrun.cpu_share`` prints the document as JSON (``--sample-s 0``: no busy sampling).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from coverfarm.device_result import CpuShare
from farmrun.hostload import busy_seconds, own_seconds

ROOT_ENV_VAR = "COVERFARM_CGROUP_ROOT"
DEFAULT_ROOT = Path("/sys/fs/cgroup")
_MEMBERSHIP = Path("/proc/self/cgroup")


def affinity() -> set[int]:
    """The CPUs this process may run on (every CPU where the platform has no affinity mask)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def cgroup_root() -> Path:
    return Path(os.environ.get(ROOT_ENV_VAR) or DEFAULT_ROOT)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _upwards(base: Path, relative: str) -> Iterable[Path]:
    """``base/relative`` and each of its parents up to ``base`` itself, those that exist."""
    parts = [part for part in relative.split("/") if part]
    for depth in range(len(parts), -1, -1):
        folder = base.joinpath(*parts[:depth])
        if folder.is_dir():
            yield folder


def _v2_quota(folder: Path) -> float | None:
    text = _read(folder / "cpu.max")
    if text is None:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _v1_quota(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) < 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def quota(root: Path | None = None, membership: str | None = None) -> tuple[float | None, str | None]:
    """This process's CPU quota in CPUs and the file it was read from; (None, None) where none is set.

    ``membership`` is ``/proc/self/cgroup``'s text (read when not given); ``root`` the cgroup filesystem
    (``cgroup_root()``). A v2 line (``0::/path``) is read from ``root/path`` upwards; a v1 line naming
    the ``cpu`` controller (``4:cpu,cpuacct:/path``) from ``root/cpu,cpuacct/path`` or ``root/cpu/path``
    upwards. The smallest quota found wins: a parent's limit holds for its children."""
    root = root or cgroup_root()
    if membership is None:
        membership = _read(_MEMBERSHIP) or ""
    found: list[tuple[float, str]] = []
    for line in membership.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, relative = rest.partition(":")
        if number == "0" and controllers == "":
            folders, read, name = list(_upwards(root, relative)), _v2_quota, "cpu.max"
        elif "cpu" in controllers.split(","):
            folders, read, name = [], _v1_quota, "cpu.cfs_quota_us"
            for mount in dict.fromkeys((controllers, "cpu")):
                folders += _upwards(root / mount, relative)
        else:
            continue
        for folder in folders:
            value = read(folder)
            if value is not None:
                found.append((value, str(folder / name)))
    if not found:
        return None, None
    return min(found)


def busy(cpus: set[int], sample_s: float) -> float | None:
    """The cores of ``cpus`` other processes kept busy over ``sample_s`` seconds, this process's own
    (and its children's) CPU time taken out; None when not sampled or unreadable."""
    if sample_s <= 0:
        return None
    before, own_before, start = busy_seconds(cpus), own_seconds(), time.perf_counter()
    time.sleep(sample_s)
    after, own_after, window = busy_seconds(cpus), own_seconds(), time.perf_counter() - start
    if before is None or after is None:
        return None
    taken = (after - before) - (own_after - own_before)
    return round(min(max(taken / window, 0.0), float(len(cpus))), 3)


def threads_for(allowed: int, quota_cpus: float | None, busy_cores: float | None) -> int:
    """The mask's CPUs less the busy ones (rounded), capped by the quota rounded down; at least one."""
    free = round(allowed - (busy_cores or 0.0))
    if quota_cpus is not None:
        free = min(free, math.floor(quota_cpus))
    return max(1, free)


def cpu_share(sample_s: float = 1.0, root: Path | None = None) -> CpuShare:
    """The CPUs this process may use, what bounds them, and the threads that follow."""
    cpus = affinity()
    quota_cpus, quota_from = quota(root)
    busy_cores = busy(cpus, sample_s)
    return CpuShare(
        cores=os.cpu_count() or len(cpus),
        affinity=len(cpus),
        quota_cpus=None if quota_cpus is None else round(quota_cpus, 3),
        quota_from=quota_from,
        busy=busy_cores,
        threads=threads_for(len(cpus), quota_cpus, busy_cores),
    )


def usable_cpus(root: Path | None = None) -> int:
    """The CPUs this process may use by its bounds alone (affinity mask and quota), busy ones not
    counted: what a host can give the work it starts before that work runs (``coverfarm up``'s
    lowerings and eager baselines), each of which measures its own busy CPUs when it times."""
    share = cpu_share(sample_s=0, root=root)
    return threads_for(share.affinity, share.quota_cpus, None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m farmrun.cpu_share", description="The CPUs this process may use, as JSON."
    )
    parser.add_argument(
        "--sample-s", type=float, default=1.0, help="seconds of watching the busy CPUs (1; 0: none)"
    )
    args = parser.parse_args(argv)
    print(cpu_share(args.sample_s).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
