"""The eager-PyTorch baseline document: one policy's action chunk timed on a host's CPU.

``worker.baseline.measure_baseline`` produces it; a device result's speed-up is the baseline's median
over the device's median. Pydantic only (no torch), so the orchestrator and runners can read it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from coverfarm.result import Options
from gpu_runner.result import Board, LatencyStats

BASELINE_FORMAT = 1


class BaselineResult(BaseModel):
    format: int = BASELINE_FORMAT
    policy: str
    options: Options  # seed and checkpoint decide the weights; timeout_s bounds each phase
    frames: int  # the timed chunks cycle over frames 0..frames-1, the bundle's frames of those indices
    host: Board | None = None
    torch_version: str | None = None
    threads: int | None = None  # torch.get_num_threads() in the measuring process
    interop_threads: int | None = None
    build_s: float | None = None  # building the policy with the engine's adapter (which also exports it)
    latency: LatencyStats | None = None
    status: Literal["ok", "slow", "failed"]
    error: str | None = None
    finished_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


def speedup(baseline: BaselineResult, device: LatencyStats | None) -> float | None:
    """How many times faster the device's median chunk is than eager PyTorch's; None when unknown."""
    if baseline.latency is None or device is None or device.median_ms <= 0:
        return None
    return baseline.latency.median_ms / device.median_ms
