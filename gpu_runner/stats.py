"""Latency statistics from raw samples: every sample is kept, the summary is computed from them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu_runner.result import LatencyStats

# A coefficient of variation above this means the host was too noisy for the median to be trusted
# (shared cores, thermal throttling); the numbers are still reported, flagged unstable.
STABLE_CV = 0.05


def latency_stats(samples_ms: Sequence[float], warmup: int, load_ms: float) -> LatencyStats:
    if not samples_ms:
        raise ValueError("no timed samples")
    samples = np.asarray(samples_ms, dtype=np.float64)
    mean = float(samples.mean())
    # Sample standard deviation (ddof=1); a single sample has no spread to speak of.
    std = float(samples.std(ddof=1)) if samples.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    return LatencyStats(
        warmup=warmup,
        iterations=int(samples.size),
        samples_ms=[float(s) for s in samples],
        median_ms=float(np.median(samples)),
        p90_ms=float(np.percentile(samples, 90)),
        min_ms=float(samples.min()),
        mean_ms=mean,
        cv=cv,
        stable=samples.size > 1 and cv <= STABLE_CV,
        load_ms=load_ms,
    )
