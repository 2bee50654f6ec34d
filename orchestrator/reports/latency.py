"""When a device latency change counts: beyond both runs' spread, in two consecutive sweeps of one cell.

Each run's spread is the range between its 10th and 90th percentile samples; a pair of runs differs only
when those ranges do not overlap, so run-to-run noise (thermal state, a busy core) is never reported as
a regression or a speed-up. And one sweep is not enough (PyTorch HUD's rule: a regression is two
consecutive violations): a change against the reference run counts (``flagged``) only when the current
sweep and the same cell's previous sweep (``orchestrator.reports.history``) both lie beyond the
reference's spread, in the same direction.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from orchestrator.reports.history import Timed
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
    """Whether run ``b`` lies beyond run ``a``'s spread and ``a`` beyond ``b``'s (one pair never counts
    on its own: ``flagged`` stays false; ``counted`` decides)."""
    median_a = statistics.median(a) if a else None
    median_b = statistics.median(b) if b else None
    change = LatencyChange(
        device_class=device_class, median_a_ms=median_a, median_b_ms=median_b, flagged=False, why=""
    )
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        change.why = f"too few samples to judge ({len(a)} and {len(b)}; at least {MIN_SAMPLES} each)"
        return change
    low_a, high_a = spread(a)
    low_b, high_b = spread(b)
    ranges = f"p10–p90 {low_a:.3g}–{high_a:.3g} ms vs {low_b:.3g}–{high_b:.3g} ms"
    if high_b < low_a or high_a < low_b:
        change.beyond_spread = True
        change.direction = "faster" if high_b < low_a else "slower"
        change.why = f"{change.direction} beyond both runs' spread ({ranges})"
    else:
        change.why = f"within the runs' spread ({ranges})"
    return change


def counted(device_class: str, a: Timed, b: Timed, previous: Timed | None) -> LatencyChange:
    """``b`` against the reference ``a``, counted only when ``previous`` (the same cell's sweep before
    ``b``, when it is not ``a`` itself) lies beyond ``a``'s spread in the same direction too."""
    change = latency_change(device_class, a.samples_ms, b.samples_ms)
    if not change.beyond_spread:
        return change
    sweeps = [b.sweep_id]
    if previous is not None and previous.sweep_id != a.sweep_id:
        earlier = latency_change(device_class, a.samples_ms, previous.samples_ms)
        if earlier.beyond_spread and earlier.direction == change.direction:
            sweeps.insert(0, previous.sweep_id)
    change.sweeps, change.consecutive = sweeps, len(sweeps)
    change.flagged = len(sweeps) >= 2
    change.regression = change.flagged and change.direction == "slower"
    ranges = change.why.partition(" (")[2].rstrip(")")
    if change.flagged:
        change.why = (
            f"{change.direction} beyond both runs' spread in sweeps {sweeps[0]} and {sweeps[1]}, consecutive "
            f"sweeps of the same cell ({ranges})"
        )
    else:
        change.why = (
            f"{change.direction} beyond both runs' spread in sweep {b.sweep_id} only ({ranges}); it counts "
            "once the same cell's next sweep shows it too"
        )
    return change
