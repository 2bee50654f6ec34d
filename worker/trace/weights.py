"""Real or fake weights for one cell: the option, or the estimate against this worker's memory.

``weights: real`` and ``weights: fake`` are taken as asked. ``auto`` (the default) measures real weights
when their estimated peak (``estimated_peak_gb``) fits this worker's memory (``coverfarm.worker_memory``),
and fake weights otherwise, so a policy too big for the worker still gets its coverage columns, and its
export cell says which worker it needs instead of failing. The parameter bytes come from the checkpoint's
weight files when there is one, else from a fake-weight trace, which costs the graph's memory, not the
weights'.

The estimate of a real-weight stage's peak is ``BASE_BYTES + PEAK_FACTOR x parameter bytes``: a
process that has imported torch, ExecuTorch and LeRobot holds about 1 GB before any weight, and tracing
(eager references, ``torch.export``'s copies) and lowering (``to_edge``, constant propagation, which
folds transposed copies of the linear weights, and serialization into the ``.pte``) hold several
copies of the weights at once. ``benchmarks/stage_memory.py`` prints the measured ratios these
constants come from.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from coverfarm.result import ErrorInfo, StageResult, StageStatus, WeightsInfo
from coverfarm.worker_memory import GB

BASE_BYTES = 1.5 * GB
PEAK_FACTOR = 4.0
WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def estimated_peak_gb(parameter_bytes: int) -> float:
    """Estimated peak memory of the trace or lower stage of a policy with real weights."""
    return (BASE_BYTES + PEAK_FACTOR * parameter_bytes) / GB


def needs_worker_gb(parameter_bytes: int) -> int:
    """The smallest worker (whole GB) the real-weight stages are estimated to fit."""
    return math.ceil(estimated_peak_gb(parameter_bytes))


def checkpoint_bytes(checkpoint: str) -> int:
    """Bytes of a checkpoint directory's weight files (what its parameters occupy as stored)."""
    return sum(
        path.stat().st_size
        for path in Path(checkpoint).rglob("*")
        if path.is_file() and path.name.endswith(WEIGHT_FILE_SUFFIXES)
    )


def decide(
    requested: Literal["auto", "real", "fake"], parameter_bytes: int | None, worker_gb: float
) -> WeightsInfo:
    """The weights a cell is measured with. ``parameter_bytes`` may be None only when asked for real
    or fake explicitly."""
    estimate = None if parameter_bytes is None else round(estimated_peak_gb(parameter_bytes), 2)
    needs = None if parameter_bytes is None else needs_worker_gb(parameter_bytes)
    common = {
        "requested": requested,
        "parameter_bytes": parameter_bytes,
        "estimated_peak_gb": estimate,
        "worker_memory_gb": round(worker_gb, 2),
        "needs_worker_gb": needs,
    }
    if requested != "auto":
        return WeightsInfo(mode=requested, reason="asked for", **common)
    if parameter_bytes is None or estimate is None:
        raise ValueError("auto weights need the parameter bytes")
    if estimate <= worker_gb:
        reason = f"estimated real-weight peak {estimate:.1f} GB fits this worker's {worker_gb:.1f} GB"
        return WeightsInfo(mode="real", reason=reason, **common)
    reason = f"estimated real-weight peak {estimate:.1f} GB exceeds this worker's {worker_gb:.1f} GB"
    return WeightsInfo(mode="fake", reason=reason, **common)


def export_not_run(weights: WeightsInfo) -> StageResult:
    """The export stage of a fake-weight cell: not run, and what it would take."""
    needs = (
        f"≥ {weights.needs_worker_gb} GB worker" if weights.needs_worker_gb is not None else "real weights"
    )
    return StageResult(
        status=StageStatus.NOT_RUN,
        error=ErrorInfo(
            stage="export",
            type="FakeWeights",
            message=f"fake weights: export needs real weights ({needs})",
        ),
    )
