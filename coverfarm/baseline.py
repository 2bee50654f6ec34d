"""The eager-PyTorch baseline document: one policy's action chunk timed on a host's CPU, and the speed-up.

``worker.bundle.baseline.measure_baseline`` produces it. A device result's speed-up is the baseline's
figure over the device's figure (each the median of its replica medians), with the interval that follows
from both intervals (``coverfarm.latency_interval``): ``[eager low / device high, eager high / device
low]``. It is computed only where the two figures may be divided (``speedup``): both timed, by the same
runner on the same host, each under the host's timing lock, over the same inputs; otherwise
``Speedup.reasons`` says why there is none. A speed-up is ``narrow`` (shown as known) when its interval
lies within the device run's ``interval_width`` of the ratio; otherwise it is wide, or has no interval
(a side with fewer than 2 replicas), and ``reasons`` says which. Pydantic only (no torch), so the
orchestrator and runners can read it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from coverfarm.device_result import Board, CpuShare, DeviceResult, LatencyStats
from coverfarm.latency_interval import RULES_VERSION, LatencyInterval, interval_of, width_of
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
    host_id: str | None = None  # farmrun.hostload.host_id()


class Speedup(BaseModel):
    """Eager figure over device figure with its interval, or why there is none (``reasons``, each a
    sentence). ``allowed``: a ratio is given (``value``); ``narrow``: its interval is known within
    ``width`` of it. A ratio that is not narrow says why in ``reasons`` (wide, or no interval)."""

    value: float | None = None  # eager figure / device figure, set only when allowed
    low: float | None = None  # eager low / device high
    high: float | None = None  # eager high / device low
    narrow: bool = False
    width: float | None = None  # the ± fraction of the ratio within which its interval is narrow
    allowed: bool
    reasons: list[str] = Field(default_factory=list)
    eager_median_ms: float | None = None  # the eager figure (median of its replica medians)
    device_median_ms: float | None = None  # the device figure
    eager: LatencyInterval | None = None
    device: LatencyInterval | None = None
    rules_version: int = RULES_VERSION
    notes: list[str] = Field(default_factory=list)  # how documents of older rules were judged


def _trust(side: str, latency: LatencyStats) -> list[str]:
    """What keeps the figure of ``side`` from being divided: no rules recorded (its inputs and isolation
    unknown), or replicas timed beside a CPU stage."""
    if latency.rules is None:
        return [f"the {side} was timed before replicated, time-bounded timing (no rules recorded)"]
    reasons = []
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


def _ratio_interval(verdict: Speedup, eager: LatencyInterval, device: LatencyInterval) -> None:
    """The ratio's interval from both sides' intervals, and whether it is narrow."""
    assert verdict.value is not None and verdict.width is not None
    missing = [(side, judged) for side, judged in (("eager baseline", eager), ("device run", device))
               if judged.low_ms is None or judged.high_ms is None]  # fmt: skip
    if missing:
        verdict.reasons += [f"no interval: the {side} has {judged.reason}" for side, judged in missing]
        return
    assert eager.low_ms and eager.high_ms and device.low_ms and device.high_ms
    verdict.low, verdict.high = eager.low_ms / device.high_ms, eager.high_ms / device.low_ms
    half = max(verdict.high / verdict.value - 1, 1 - verdict.low / verdict.value)
    verdict.narrow = half <= verdict.width + 1e-12
    if not verdict.narrow:
        verdict.reasons.append(
            f"the speed-up's interval {verdict.low:.3g}–{verdict.high:.3g} (±{half:.0%} of "
            f"{verdict.value:.3g}) is wider than ±{verdict.width:.0%}"
        )


def speedup(
    baseline: BaselineResult | None,
    device: DeviceResult | None,
    baseline_runner_id: int | None = None,
    device_runner_id: int | None = None,
) -> Speedup:
    """The speed-up of ``device`` over ``baseline`` and its interval, judged now from both documents'
    replicas; none when the two figures may not be divided.

    The runner ids are the documents' own, or the ones the farm stored with them (the rows' ``runner_id``)
    for documents that do not carry one."""
    eager = baseline.latency if baseline is not None and baseline.status == "ok" else None
    timed = device.latency if device is not None and device.status == "ok" else None
    verdict = Speedup(allowed=False)
    if timed is not None:
        verdict.device = interval_of(timed)
        verdict.device_median_ms, verdict.width = verdict.device.figure_ms, width_of(timed)
    if eager is not None:
        verdict.eager = interval_of(eager, verdict.width)
        verdict.eager_median_ms = verdict.eager.figure_ms
    verdict.notes = [f"the {side}: {judged.note}" for side, judged in (("eager baseline", verdict.eager),
                     ("device run", verdict.device)) if judged is not None and judged.note]  # fmt: skip
    if device is not None and device.status != "ok":
        verdict.reasons.append(f"the device run {device.status}")
        return verdict
    if baseline is not None and baseline.status != "ok":
        verdict.reasons.append(f"the eager baseline ended {baseline.status}: {baseline.error or 'no figure'}")
        return verdict
    if eager is None or timed is None or verdict.device_median_ms in (None, 0):
        verdict.reasons.append("no eager baseline" if eager is None else "no device latency")
        return verdict
    assert baseline is not None and device is not None
    assert verdict.eager is not None and verdict.device is not None
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
    if reasons:
        return verdict
    verdict.allowed = True
    verdict.value = verdict.eager.figure_ms / verdict.device.figure_ms
    _ratio_interval(verdict, verdict.eager, verdict.device)
    return verdict
