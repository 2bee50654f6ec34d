"""A STAND-IN for worker.engine.analyze, for the farm's own tests only (never torch, never ExecuTorch).

It has the engine's signature and returns a valid result document after sleeping
``$STANDIN_SECONDS`` (default 0.2; ``$STANDIN_FIRST_ATTEMPT_SECONDS``, when set, for a job's first
attempt, of the policies in ``$STANDIN_FIRST_ATTEMPT_POLICIES`` when that is set), so the farm's
queueing, storage, re-queue and crash handling can be exercised in seconds. The one end-to-end test
marked ``real_policy`` uses the real engine. With ``$STANDIN_IGNORES_SIGTERM`` set, the process running
it ignores SIGTERM (a job a warm shutdown waits for, whatever it is told).

Per policy: ``vqbet`` exports ``slow`` unless its bound is the long one (>= 1000 s), ``pi05`` raises.

Memory: ``$STANDIN_NEEDS_GB`` (``diffusion=40,act=100``) says what a policy's real weights need; with
``weights: auto`` on a worker with less (``COVERFARM_WORKER_MEMORY_GB``, as the engine reads it) the
cell is measured with fake weights and not exported, as the engine does (``worker.trace.weights``).

Result reuse (``coverfarm.reuse``): with ``$STANDIN_REUSE`` set, ``reuse_fields`` names the stand-in's
"versions" and "engine digest" from ``$STANDIN_VERSIONS`` and ``$STANDIN_ENGINE_DIGEST``, so a test can
change either; without it every job's key is its own, so the farm's other tests measure every cell.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from coverfarm.result import (
    ErrorInfo,
    HeavyMacs,
    Ops,
    Options,
    Programs,
    ResultDocument,
    StageResult,
    StageStatus,
    WeightsInfo,
)
from coverfarm.worker_memory import worker_memory_gb
from worker.trace.weights import export_not_run

LONG_BOUND_S = 1000.0


def reuse_fields(policy: str, options: Options) -> dict[str, object]:
    if not os.environ.get("STANDIN_REUSE"):
        return {"run": uuid.uuid4().hex}
    return {
        "versions": os.environ.get("STANDIN_VERSIONS", "stand-in 1"),
        "engine": os.environ.get("STANDIN_ENGINE_DIGEST", "stand-in"),
    }


def _weights(policy: str, options: Options) -> WeightsInfo | None:
    needs = dict(item.split("=") for item in os.environ.get("STANDIN_NEEDS_GB", "").split(",") if item)
    if policy not in needs:
        return None
    need, memory = int(needs[policy]), worker_memory_gb()
    fake = options.weights == "fake" or (options.weights == "auto" and need > memory)
    return WeightsInfo(
        mode="fake" if fake else "real",
        requested=options.weights,
        reason=f"stand-in: needs {need} GB, the worker has {memory:g} GB",
        worker_memory_gb=memory,
        needs_worker_gb=need,
    )


def analyze(
    policy: str,
    backend: str,
    options: Options,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> ResultDocument:
    if os.environ.get("STANDIN_IGNORES_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    seconds = os.environ.get("STANDIN_SECONDS", "0.2")
    only = os.environ.get("STANDIN_FIRST_ATTEMPT_POLICIES")
    # orchestrator.jobs.tasks names the attempt's folder
    if out_dir.name == "attempt-1" and (not only or policy in only.split(",")):
        seconds = os.environ.get("STANDIN_FIRST_ATTEMPT_SECONDS", seconds)
    deadline = time.monotonic() + float(seconds)
    # Short sleeps, so a SIGKILL lands mid-job; the last one ends at the deadline, so the job takes its
    # seconds and no more (benchmarks/farm_overhead.py counts what the farm adds to them).
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.05, left))
    if policy == "pi05":
        raise RuntimeError("stand-in engine: pi05 cannot be traced")
    (out_dir / "standin.txt").write_text(f"{policy} {backend} pid {os.getpid()}\n")
    ok = StageResult(status=StageStatus.OK, seconds=0.1)
    export = ok
    if policy == "vqbet" and options.timeout_s < LONG_BOUND_S:
        error = ErrorInfo(stage="export", type="Timeout", message=f"export exceeded {options.timeout_s:g} s")
        export = StageResult(status=StageStatus.SLOW, seconds=options.timeout_s, error=error)
    weights = _weights(policy, options)
    if weights is not None and weights.mode == "fake":
        export = export_not_run(weights)
    return ResultDocument(
        policy=policy,
        backend=backend,
        options=options,
        trace=ok,
        partition=ok,
        export=export,
        ops=Ops(total=100, on_backend=90, supported=95),
        heavy_macs=HeavyMacs(total=1000, on_backend=800, supported=900),
        programs=Programs(count=3, connected_groups=4, delegates=3 if export is ok else None),
        versions={"engine": "stand-in", "pid": str(os.getpid())},
        weights=weights,
    )
