"""A worker's memory: ``COVERFARM_WORKER_MEMORY_GB``, else this machine's MemTotal, and how many jobs at
once it allows (no torch).

A CPU worker registers this figure (each job's share of it) and the orchestrator routes by it
(``coverfarm.routes``); the engine weighs real weights against it (``worker.trace.weights``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

GB = 1024**3
MEMORY_ENV = "COVERFARM_WORKER_MEMORY_GB"
# The least memory a worker gives each of the jobs it runs at once. Two real lowerings at once have run
# a 24 GiB worker out of memory, so one can take more than 12 GB: a worker runs several only where each
# keeps this much.
JOB_MEMORY_FLOOR_GB = 16.0
# The least a job of the light policies (``catalog.LIGHT_POLICIES``) keeps: their lowerings peaked at
# 1.2–4.9 GB (``coverfarm up``'s default sweep on a 24 GiB machine, real weights, every stage).
LIGHT_JOB_MEMORY_GB = 6.0


def machine_memory_bytes() -> int | None:
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def worker_memory_gb() -> float:
    """``COVERFARM_WORKER_MEMORY_GB``, else this machine's MemTotal. ``coverfarm worker`` sets it to
    each job's share (``concurrency_for``) for its own processes."""
    configured = os.environ.get(MEMORY_ENV)
    if configured:
        try:
            value = float(configured)
        except ValueError:
            raise ValueError(
                f"COVERFARM_WORKER_MEMORY_GB must be a number of GB, got {configured!r}"
            ) from None
        if value <= 0:
            raise ValueError(f"COVERFARM_WORKER_MEMORY_GB must be positive, got {configured!r}")
        return value
    total = machine_memory_bytes()
    if total is None:
        raise ValueError(
            "this machine's memory is unknown (no /proc/meminfo): set COVERFARM_WORKER_MEMORY_GB"
        )
    return total / GB


def concurrency_for(memory_gb: float, asked: int, floor_gb: float = JOB_MEMORY_FLOOR_GB) -> int:
    """How many jobs at once a worker with ``memory_gb`` runs when ``asked`` for that many: fewer where
    each would keep less than ``floor_gb`` (``JOB_MEMORY_FLOOR_GB`` unless its jobs are known to need
    less), and never none."""
    return max(1, min(asked, int(memory_gb // floor_gb)))


def light_concurrency(policies: Iterable[str], cpus: int, memory_gb: float) -> int:
    """How many lowerings at once ``coverfarm up``'s worker runs for a sweep of ``policies`` on a host
    whose process may use ``cpus`` CPUs: one per CPU where every policy is a light one
    (``catalog.LIGHT_POLICIES``) and each keeps ``LIGHT_JOB_MEMORY_GB``; otherwise one. One lowering at a
    time kept 2 cores at a load of 1.0–1.6; two at once, about 3 (each slower, the sweep 10% shorter)."""
    from coverfarm.catalog import LIGHT_POLICIES

    if not set(policies) <= LIGHT_POLICIES:
        return 1
    return concurrency_for(memory_gb, cpus, LIGHT_JOB_MEMORY_GB)
