"""The eager-PyTorch baseline document: one policy's action chunk timed on a host's CPU, and the speed-up.

``worker.bundle.baseline.measure_baseline`` produces it. A device result's speed-up is the baseline's median
over the device's median, and only where both numbers can be trusted side by side (``speedup``): both
stable under their rules, timed by the same runner on the same host, each under the host's timing lock,
over the same inputs. Otherwise there is none, and ``Speedup.reasons`` says why. Pydantic only (no
torch), so the orchestrator and runners can read it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from coverfarm.device_result import Board, CpuShare, DeviceResult, LatencyStats
from coverfarm.result import Options

BASELINE_FORMAT = 1


class BaselineResult(BaseModel):
    format: int = BASELINE_FORMAT
    policy: str
    options: Options  # seed and checkpoint decide the weights; timeout_s bounds each phase
    frames: int  # the timed chunks cycle over frames 0..frames-1, the bundle's frames of those indices
    host: Board | None = None
    torch_version: str | None = None
    threads: int | None = None  # torch.get_num_threads() in the measuring process: cpus.threads
    interop_threads: int | None = None
    cores: int | None = None  # the host's cores
    # the CPUs of its affinity mask no other process was using just before the timing (before the quota)
    free_cores: int | None = None
    cpus: CpuShare | None = None  # affinity, cgroup quota, busy CPUs and the threads; None in older documents
    build_s: float | None = None  # building the policy with the engine's adapter (which also exports it)
    latency: LatencyStats | None = None
    status: Literal["ok", "slow", "failed"]
    error: str | None = None
    finished_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    runner_id: int | None = None  # the enrolled runner that timed it (a speed-up needs the device's own)
    host_id: str | None = None  # gpu_runner.hostload.host_id()


class Speedup(BaseModel):
    """Eager median over device median, or why there is none (``reasons``, each a sentence)."""

    value: float | None = None  # set only when allowed
    allowed: bool
    reasons: list[str] = Field(default_factory=list)
    eager_median_ms: float | None = None
    device_median_ms: float | None = None


def _trust(side: str, latency: LatencyStats) -> list[str]:
    if latency.rules is None:
        return [f"the {side} was timed before replicated, time-bounded timing (no rules recorded)"]
    reasons = [f"the {side} is unstable: {reason}" for reason in latency.unstable_reasons]
    if not latency.stable and not latency.unstable_reasons:
        reasons.append(f"the {side} is unstable")
    for number, part in enumerate(latency.replicas, 1):
        if part.isolation is None:
            reasons.append(f"the {side}'s replica {number} was not timed under the host's timing lock")
        elif not part.isolation.acquired:
            waited = part.isolation.waited_s
            reasons.append(
                f"the {side}'s replica {number} timed beside a CPU stage (waited {waited:g} s for the host's "
                "timing lock)"
            )
    return reasons


def speedup(
    baseline: BaselineResult | None,
    device: DeviceResult | None,
    baseline_runner_id: int | None = None,
    device_runner_id: int | None = None,
) -> Speedup:
    """The speed-up of ``device`` over ``baseline``, allowed only from two trusted measurements.

    The runner ids are the documents' own, or the ones the farm stored with them (the rows' ``runner_id``)
    for documents that do not carry one."""
    eager = baseline.latency if baseline is not None and baseline.status == "ok" else None
    timed = device.latency if device is not None and device.status == "ok" else None
    verdict = Speedup(
        allowed=False,
        eager_median_ms=eager.median_ms if eager else None,
        device_median_ms=timed.median_ms if timed else None,
    )
    if eager is None or timed is None or timed.median_ms <= 0:
        verdict.reasons.append("no eager baseline" if eager is None else "no device latency")
        return verdict
    assert baseline is not None and device is not None
    reasons = _trust("device run", timed) + _trust("eager baseline", eager)
    runners = (
        device.runner_id if device.runner_id is not None else device_runner_id,
        baseline.runner_id if baseline.runner_id is not None else baseline_runner_id,
    )
    if None in runners or runners[0] != runners[1]:
        reasons.append(f"timed by different or unknown runners (device {runners[0]}, baseline {runners[1]})")
    if device.host_id is None or device.host_id != baseline.host_id:
        reasons.append(f"timed on different or unknown hosts ({device.host_id} and {baseline.host_id})")
    inputs = (timed.rules.inputs if timed.rules else None, eager.rules.inputs if eager.rules else None)
    if inputs[0] != inputs[1] or timed.frames != eager.frames:
        reasons.append(
            f"the two sides timed different inputs (device {timed.frames} frames, baseline {eager.frames})"
        )
    verdict.reasons = reasons
    if not reasons:
        verdict.allowed, verdict.value = True, eager.median_ms / timed.median_ms
    return verdict
