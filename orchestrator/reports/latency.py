"""When a device latency change between two runs counts: only beyond the two runs' own spread.

Each run's spread is the range between its 10th and 90th percentile samples; a change is flagged only
when those ranges do not overlap, so run-to-run noise (thermal state, a busy core) is never reported as
a regression or a speed-up.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from orchestrator.reports.schemas import LatencyChange

MIN_SAMPLES = 3


def _percentile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(sorted_samples) - 1) * q
    low = int(position)
    high = min(low + 1, len(sorted_samples) - 1)
    return sorted_samples[low] + (sorted_samples[high] - sorted_samples[low]) * (position - low)


def spread(samples: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return _percentile(ordered, 0.1), _percentile(ordered, 0.9)


def latency_change(device_class: str, a: Sequence[float], b: Sequence[float]) -> LatencyChange:
    median_a = statistics.median(a) if a else None
    median_b = statistics.median(b) if b else None
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        why = f"too few samples to judge ({len(a)} and {len(b)}; at least {MIN_SAMPLES} each)"
        return LatencyChange(
            device_class=device_class, median_a_ms=median_a, median_b_ms=median_b, flagged=False, why=why
        )
    low_a, high_a = spread(a)
    low_b, high_b = spread(b)
    flagged = high_b < low_a or high_a < low_b
    ranges = f"p10–p90 {low_a:.3g}–{high_a:.3g} ms vs {low_b:.3g}–{high_b:.3g} ms"
    if flagged:
        direction = "faster" if high_b < low_a else "slower"
        why = f"{direction} beyond both runs' spread ({ranges})"
    else:
        why = f"within the runs' spread ({ranges})"
    return LatencyChange(
        device_class=device_class, median_a_ms=median_a, median_b_ms=median_b, flagged=flagged, why=why
    )
