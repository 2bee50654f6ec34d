"""Latency measured under time bounds, and statistics from raw samples: every sample is kept.

``timed_loop`` is how both sides of a speed-up take their samples (a device runtime's in-process chunks,
eager PyTorch's): warm-up, then chunks until the rules' minimum count and seconds are met, never past
their maximum. ``replica`` summarises one process's samples, and ``combine`` puts the replicas together:
the figure is the median of the replica medians and its interval their range
(``coverfarm.latency_interval``); the latency is stable when that interval is narrow (within
``TimingRules.interval_width`` of the figure). Each reason it is not is kept, so the cell can say why.
The per-sample CV, p90 and min are recorded as jitter and judge nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coverfarm.device_result import Isolation, LatencyStats, Replica, TimingRules
from coverfarm.latency_interval import RULES_VERSION, interval_of

MIN_REACHED, MAX_S_REACHED, MAX_CHUNKS_REACHED = (
    "min_chunks and min_s reached",
    "max_s reached",
    "max_chunks reached",
)


@dataclass
class Timed:
    """One process's timed samples and how the loop ended. A sample is the mean per chunk of
    ``chunks_per_sample`` consecutive chunks timed together (one, unless chunks are too short to time
    one at a time: ``chunks_per_sample``)."""

    samples_ms: list[float]
    warmup: int  # warm-up chunks actually run
    seconds: float  # timed seconds, warm-up excluded
    stopped: str
    chunks_per_sample: int = 1


def sample_target_ms(rules: TimingRules) -> float:
    """The shortest a sample may be: ``rules.min_sample_ms``, and long enough that ``min_s`` is reached
    within half of ``max_chunks`` samples (so the count cap never ends a measurement of short chunks
    before its minimum time)."""
    return max(rules.min_sample_ms, 2e3 * rules.min_s / rules.max_chunks)


def chunks_per_sample(warmup_ms: Sequence[float], rules: TimingRules) -> int:
    """How many consecutive chunks one sample times: enough that a sample reaches ``sample_target_ms``,
    judged from the fastest warm-up chunk (one when there was no warm-up), at most ``max_chunks``."""
    if not warmup_ms:
        return 1
    fastest = max(min(warmup_ms), 1e-6)
    return max(1, min(rules.max_chunks, math.ceil(sample_target_ms(rules) / fastest)))


def timed_loop(
    run: Callable[[int], object],
    rules: TimingRules,
    after: Callable[[int, object, float], None] | None = None,
    on_sample: Callable[[float], None] | None = None,
) -> Timed:
    """Call ``run(i)`` (chunk ``i``: warm-up chunks first, then timed ones, numbered on) under ``rules``.

    Only ``run`` is inside the timed window; ``after(i, returned, ms)`` (the output check) runs outside it
    for every timed chunk, and its time counts towards no bound, so a slow check never cuts the
    measurement short; ``on_sample(ms)`` is told each sample as it is taken. Warm-up stops after
    ``rules.warmup`` chunks or once it has taken ``rules.min_s``, whichever comes first.

    Chunks shorter than ``sample_target_ms`` are timed several at a time (``chunks_per_sample``): one
    sub-millisecond call is mostly timer and scheduling noise, and the count cap would end the loop
    before ``min_s``. The rules' counts are counts of samples."""
    index = 0
    spent = 0.0
    warm_ms: list[float] = []
    while index < rules.warmup and (index == 0 or spent < rules.min_s):
        begin = time.perf_counter()
        run(index)
        took = time.perf_counter() - begin
        spent += took
        warm_ms.append(took * 1e3)
        index += 1
    warmup = index
    group = chunks_per_sample(warm_ms, rules)
    samples: list[float] = []
    timed = 0.0
    while True:
        returned: list[object] = []
        begin = time.perf_counter_ns()
        for offset in range(group):
            returned.append(run(index + offset))
        elapsed = (time.perf_counter_ns() - begin) / 1e9
        samples.append(elapsed * 1e3 / group)
        timed += elapsed
        if after is not None:
            for offset, value in enumerate(returned):
                after(index + offset, value, samples[-1])
        if on_sample is not None:
            on_sample(samples[-1])
        index += group
        if len(samples) >= rules.min_chunks and timed >= rules.min_s:
            return Timed(samples, warmup, timed, MIN_REACHED, group)
        if timed >= rules.max_s:
            return Timed(samples, warmup, timed, MAX_S_REACHED, group)
        if len(samples) >= rules.max_chunks:
            return Timed(samples, warmup, timed, MAX_CHUNKS_REACHED, group)


def _summary(samples_ms: Sequence[float]) -> tuple[float, float, float, float, float]:
    """median, p90, min, mean and CV (sample standard deviation over the mean; 0 for one sample)."""
    if not samples_ms:
        raise ValueError("no timed samples")
    samples = np.asarray(samples_ms, dtype=np.float64)
    mean = float(samples.mean())
    std = float(samples.std(ddof=1)) if samples.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    return float(np.median(samples)), float(np.percentile(samples, 90)), float(samples.min()), mean, cv


def replica(
    samples_ms: Sequence[float], warmup: int, seconds: float, stopped: str, chunks_per_sample: int = 1
) -> Replica:
    median, p90, low, _mean, cv = _summary(samples_ms)
    return Replica(
        warmup=warmup,
        chunks_per_sample=chunks_per_sample,
        iterations=len(samples_ms),
        seconds=round(seconds, 4),
        stopped=stopped,
        median_ms=median,
        p90_ms=p90,
        min_ms=low,
        cv=cv,
    )


def latency_stats(
    samples_ms: Sequence[float],
    warmup: int,
    load_ms: float,
    rules: TimingRules | None = None,
    replicas: Sequence[Replica] | None = None,
) -> LatencyStats:
    """The summary of ``samples_ms`` (every replica's, together) and the verdict on ``replicas`` (one
    replica of all the samples when not given) under ``rules`` (the defaults when not given)."""
    rules = rules or TimingRules()
    median, p90, low, mean, cv = _summary(samples_ms)
    parts = list(replicas) if replicas else [replica(samples_ms, warmup, 0.0, "not recorded")]
    medians = [part.median_ms for part in parts]
    latency = LatencyStats(
        warmup=warmup,
        iterations=len(samples_ms),
        samples_ms=[float(s) for s in samples_ms],
        median_ms=median,
        p90_ms=p90,
        min_ms=low,
        mean_ms=mean,
        cv=cv,
        stable=False,
        load_ms=load_ms,
        rules=rules,
        replicas=parts,
        replica_spread=max(medians) / min(medians) - 1 if min(medians) > 0 else None,
        judgement=RULES_VERSION,
    )
    latency.unstable_reasons = unstable_reasons(latency, rules)
    latency.stable = not latency.unstable_reasons
    return latency


def unstable_reasons(latency: LatencyStats, rules: TimingRules) -> list[str]:
    """Why this latency is not known well enough (its replicas' interval); empty when it is."""
    reasons = []
    count = len(latency.replicas)
    if count < rules.replicas:
        reasons.append(f"{count} replica{'s' if count != 1 else ''} (the rules ask for {rules.replicas})")
    judged = interval_of(latency, rules.interval_width)
    if judged.reason is not None:
        reasons.append(judged.reason)
    return reasons


def combine(parts: Sequence[LatencyStats], rules: TimingRules) -> LatencyStats:
    """Replicas from fresh processes, each measured alone (one replica each), as one measurement."""
    if not parts:
        raise ValueError("no replicas")
    samples = [s for part in parts for s in part.samples_ms]
    replicas = [r for part in parts for r in part.replicas]
    combined = latency_stats(samples, parts[0].warmup, parts[0].load_ms, rules, replicas)
    combined.method, combined.frames = parts[0].method, parts[0].frames
    return combined


def mark_isolation(latency: LatencyStats | None, isolation: Isolation | None) -> None:
    """Record on every replica the one hold of the host's timing lock they were all timed in."""
    if latency is not None and isolation is not None:
        for part in latency.replicas:
            part.isolation = isolation
