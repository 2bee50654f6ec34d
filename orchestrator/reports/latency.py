"""When a device latency change counts: beyond both runs' intervals, in two consecutive sweeps of one cell.

Each run's interval is the range of its replica medians (``coverfarm.latency_interval``, the interval a
cell shows): the process-to-process spread, which a change must exceed. A pair of runs differs only when
their intervals do not overlap, so run-to-run noise (thermal state, a busy core, another process's
placement) is never reported as a regression or a speed-up; a run with fewer than 2 replicas has no
interval and is never judged. And one sweep is not enough (PyTorch HUD's rule: a regression is two
consecutive violations): a change against the reference run counts (``flagged``) only when the current
sweep and the same cell's previous sweep (``orchestrator.reports.history``) both lie beyond the
reference's interval, in the same direction.
"""

from __future__ import annotations

from coverfarm.latency_interval import LatencyInterval
from orchestrator.reports.history import Timed
from orchestrator.reports.schemas import LatencyChange


def _range(judged: LatencyInterval) -> str:
    assert judged.low_ms is not None and judged.high_ms is not None
    return f"{judged.low_ms:.3g}–{judged.high_ms:.3g} ms"


def latency_change(device_class: str, a: LatencyInterval, b: LatencyInterval) -> LatencyChange:
    """Whether run ``b``'s interval lies wholly beyond run ``a``'s (one pair never counts on its own:
    ``flagged`` stays false; ``counted`` decides)."""
    change = LatencyChange(
        device_class=device_class, median_a_ms=a.figure_ms, median_b_ms=b.figure_ms, flagged=False, why=""
    )
    without = [judged for judged in (a, b) if judged.low_ms is None or judged.high_ms is None]
    if without:
        counts = f"{a.replicas} and {b.replicas} replicas"
        change.why = f"no interval to judge ({counts}; at least 2 each)"
        return change
    assert a.low_ms is not None and a.high_ms is not None and b.low_ms is not None and b.high_ms is not None
    ranges = f"replica medians {_range(a)} vs {_range(b)}"
    if b.high_ms < a.low_ms or a.high_ms < b.low_ms:
        change.beyond_spread = True
        change.direction = "faster" if b.high_ms < a.low_ms else "slower"
        change.why = f"{change.direction} beyond both runs' intervals ({ranges})"
    else:
        change.why = f"within the runs' intervals ({ranges})"
    return change


def counted(device_class: str, a: Timed, b: Timed, previous: Timed | None) -> LatencyChange:
    """``b`` against the reference ``a``, counted only when ``previous`` (the same cell's sweep before
    ``b``, when it is not ``a`` itself) lies beyond ``a``'s interval in the same direction too."""
    change = latency_change(device_class, a.interval, b.interval)
    if not change.beyond_spread:
        return change
    sweeps = [b.sweep_id]
    if previous is not None and previous.sweep_id != a.sweep_id:
        earlier = latency_change(device_class, a.interval, previous.interval)
        if earlier.beyond_spread and earlier.direction == change.direction:
            sweeps.insert(0, previous.sweep_id)
    change.sweeps, change.consecutive = sweeps, len(sweeps)
    change.flagged = len(sweeps) >= 2
    change.regression = change.flagged and change.direction == "slower"
    ranges = change.why.partition(" (")[2].rstrip(")")
    if change.flagged:
        change.why = (
            f"{change.direction} beyond both runs' intervals in sweeps {sweeps[0]} and {sweeps[1]}, "
            f"consecutive sweeps of the same cell ({ranges})"
        )
    else:
        change.why = (
            f"{change.direction} beyond both runs' intervals in sweep {b.sweep_id} only ({ranges}); it "
            "counts once the same cell's next sweep shows it too"
        )
    return change
