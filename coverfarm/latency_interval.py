"""How well a latency is known: its figure and interval from its fresh-process replicas.

A latency is timed in several fresh processes (``TimingRules.replicas``). Within one process its median
is known to about 1%, but processes differ by far more (another placement of memory and threads, a
shared host's CPU that moves between them), so the uncertainty is between replicas, not within one.

- The **figure** is the median of the replica medians.
- The **interval** is the range of the replica medians, smallest to largest. With n replicas it is a
  distribution-free confidence interval for the median of the process-to-process distribution, of
  coverage ``1 - 2^(1-n)`` (50% with 2 replicas, 75% with 3, 94% with 5): the chance that all n fall on
  one side of that median is ``2 × 2^-n``. It needs no model of the spread, no random resampling (a
  bootstrap over five medians gives nearly the same range, and a different one per seed), and any reader
  can check it from the replicas listed in the document.
- With fewer than 2 replicas there is no interval, and the verdict says so.

A figure is known (``narrow``) when its interval lies within ``TimingRules.interval_width`` (a fraction)
either side of it. The per-sample CV, p90 and min describe jitter within a process and judge nothing.

Documents are judged when they are read, from the replicas they store; one measured under rules version
1 (which gated on each replica's CV and the replicas' agreement) says so in ``note``. No numpy.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel

from coverfarm.device_result import LatencyStats, TimingRules

RULES_VERSION = 2  # 1: stable meant every replica's CV ≤ max_cv and medians within replica_tolerance
METHOD = "range of the replica medians"
OLD_RULES = "rules 1 (each replica's CV at most max_cv and the replicas' medians within replica_tolerance)"
DEFAULT_WIDTH = TimingRules().interval_width


class LatencyInterval(BaseModel):
    """A latency's figure and interval, judged under rules ``judged_under`` from its replicas."""

    figure_ms: float  # the median of the replica medians (the pooled median without replicas)
    low_ms: float | None = None  # the smallest replica median; None: no interval
    high_ms: float | None = None  # the largest
    replicas: int  # replica medians the interval comes from
    coverage: float | None = None  # 1 - 2^(1-n): the interval's distribution-free confidence
    width: float = DEFAULT_WIDTH  # the ± fraction of the figure within which it is narrow
    reason: str | None = None  # why there is no interval, or why it is wide
    measured_under: int = RULES_VERSION  # the rules version of the document's own verdict
    judged_under: int = RULES_VERSION
    note: str | None = None  # how a document of older rules was judged

    @property
    def half_width(self) -> float | None:
        """The interval's larger distance from the figure, as a fraction of the figure."""
        if self.low_ms is None or self.high_ms is None or self.figure_ms <= 0:
            return None
        return max(self.high_ms / self.figure_ms - 1, 1 - self.low_ms / self.figure_ms)

    @property
    def narrow(self) -> bool:
        half = self.half_width
        return half is not None and half <= self.width + 1e-12


def width_of(latency: LatencyStats) -> float:
    return latency.rules.interval_width if latency.rules is not None else DEFAULT_WIDTH


def milliseconds_range(low: float, high: float) -> str:
    return f"{low:.4g}–{high:.4g} ms"


def interval_of(latency: LatencyStats, width: float | None = None) -> LatencyInterval:
    """``latency`` judged from its replicas: within ``width`` (default: its own rules') is narrow."""
    width = width_of(latency) if width is None else width
    measured_under = latency.judgement or 1
    medians = [part.median_ms for part in latency.replicas]
    note = None
    if measured_under < RULES_VERSION:
        if medians:
            note = f"measured under {OLD_RULES}; judged from its {len(medians)} replica medians"
        else:
            note = "measured before replicated timing: it records no replicas, so it has no interval"
    if len(medians) < 2:
        figure = statistics.median(medians) if medians else latency.median_ms
        count = len(medians)
        reason = f"{count} replica{'' if count == 1 else 's'}: no interval (needs at least 2)"
        return LatencyInterval(
            figure_ms=figure, replicas=count, width=width, reason=reason, measured_under=measured_under,
            note=note,
        )  # fmt: skip
    figure = statistics.median(medians)
    low, high = min(medians), max(medians)
    found = LatencyInterval(
        figure_ms=figure, low_ms=low, high_ms=high, replicas=len(medians), width=width,
        coverage=1 - 2.0 ** (1 - len(medians)), measured_under=measured_under, note=note,
    )  # fmt: skip
    if not found.narrow:
        half = found.half_width
        shown = f"±{half:.0%}" if half is not None else "unknown"
        found.reason = (
            f"replica medians {milliseconds_range(low, high)} ({shown} of {figure:.4g} ms), wider than "
            f"±{width:.0%}"
        )
    return found
