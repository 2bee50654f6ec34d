"""Memory: a stage child's peak resident memory, this worker's memory, what real weights would need, and
how many jobs at once a worker's memory allows.

Peaks come from Linux: ``VmHWM`` in ``/proc/<pid>/status`` (the high-water mark of the resident set),
sampled by the parent while the child runs, and the exact ``ru_maxrss`` that ``wait4`` returns when the
child is reaped. Elsewhere there are no per-phase figures.

The estimate of a real-weight stage's peak is ``BASE_BYTES + PEAK_FACTOR x parameter bytes``: a
process that has imported torch, ExecuTorch and LeRobot holds about 1 GB before any weight, and tracing
(eager references, ``torch.export``'s copies) and lowering (``to_edge``, constant propagation, which
folds transposed copies of the linear weights, and serialization into the ``.pte``) hold several
copies of the weights at once. ``benchmarks/stage_memory.py`` prints the measured ratios these
constants come from.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

GB = 1024**3
MB = 1024**2
BASE_BYTES = 1.5 * GB
PEAK_FACTOR = 4.0
MEMORY_ENV = "COVERFARM_WORKER_MEMORY_GB"
# The least memory a worker gives each of the jobs it runs at once. Two real lowerings at once have run
# a 24 GiB worker out of memory, so one can take more than 12 GB: a worker runs several only where each
# keeps this much.
JOB_MEMORY_FLOOR_GB = 16.0


def peak_rss_bytes(pid: int) -> int | None:
    """The process's resident-set high-water mark so far (None when it is gone or not on Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    return None  # a zombie has no memory lines


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


def estimated_peak_gb(parameter_bytes: int) -> float:
    """Estimated peak memory of the trace or lower stage of a policy with real weights."""
    return (BASE_BYTES + PEAK_FACTOR * parameter_bytes) / GB


def needs_worker_gb(parameter_bytes: int) -> int:
    """The smallest worker (whole GB) the real-weight stages are estimated to fit."""
    return math.ceil(estimated_peak_gb(parameter_bytes))


def concurrency_for(memory_gb: float, asked: int) -> int:
    """How many jobs at once a worker with ``memory_gb`` runs when ``asked`` for that many: fewer where
    each would keep less than ``JOB_MEMORY_FLOOR_GB``, and never none."""
    return max(1, min(asked, int(memory_gb // JOB_MEMORY_FLOOR_GB)))
