"""A cell as every renderer shows it: one typed column per tracker column and per device class.

``coverfarm.cell_build`` builds it, once, from the cell's result document, what its jobs say and its
device runs and baselines; the tracker's Markdown and the CLI row (``coverfarm.tracker``), the report
(``orchestrator.reports``) and the grid (``dashboard.views``) render it. Each column says what kind of
value it holds and carries the numbers behind it, so no renderer reads another one's text: the text is
made by ``coverfarm.tracker`` alone, and the grid's colours follow the kind.

No torch, no database: dataclasses of plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from coverfarm.result import ReusedFrom
from coverfarm.stacks import DEFAULT_STACK


class Kind(StrEnum):
    VALUE = "value"  # measured; the numbers stand
    BOUNDED = "bounded"  # partitioning did not finish: the support check's count, an upper bound
    UNKNOWN = "unknown"  # partitioning did not finish: connected groups only, not a bound on programs
    SLOW = "slow"  # the stage ran out of its bound
    NEEDS_WORKER = "needs_worker"  # measured with fake weights: exporting needs a bigger worker
    FAILED = "failed"  # no value: ``cause`` says why
    PENDING = "pending"  # being measured (queued or running)
    NOT_APPLICABLE = "not_applicable"  # nothing to show: cancelled, no bundle, another backend's class
    NO_DEVICE = "no_device"  # no runner of the device class is enrolled
    NO_WORKER = "no_worker"  # queued, and no live CPU worker of the cell's stack or memory class takes it
    UNSTABLE = "unstable"  # a device latency whose interval is wide, or that has none (too few replicas)


@dataclass(frozen=True)
class Share:
    """A part of a whole: ops or heavy math on the backend (or the support check's bound on them)."""

    part: int
    total: int

    @property
    def fraction(self) -> float | None:
        return self.part / self.total if self.total else None


@dataclass(frozen=True)
class Latency:
    """A device run's figure per action chunk with its interval, and how it compares with eager PyTorch
    (``coverfarm.latency_interval``, ``coverfarm.baseline.speedup``)."""

    median_ms: float | None  # the figure (median of the replica medians); None: no timing recorded
    speedup: float | None = None  # eager figure over this one; None: the two may not be divided
    baseline_waits: bool = False  # the baseline job is still to run
    cv: float | None = None  # the samples' coefficient of variation (jitter, not uncertainty)
    low_ms: float | None = None  # the interval (smallest and largest replica median); None: none
    high_ms: float | None = None
    replicas: int = 0
    speedup_low: float | None = None  # the speed-up's interval; None: a side has no interval
    speedup_high: float | None = None
    speedup_narrow: bool = False  # its interval lies within the rules' width of it


@dataclass(frozen=True)
class OffRelease:
    """A device run whose ExecuTorch runtime is not the release of the cell's stack (the executorch its
    lower result recorded): a difference may then be the runtime's, not the release's."""

    runtime: str  # the runtime's version (the wheel's, or the one declared for a native build)
    release: str  # the stack's executorch
    note: str | None = None  # the run's own account of its runtime and export (RuntimeIdentity.note)


@dataclass(frozen=True)
class Column:
    kind: Kind
    share: Share | None = None  # ops and heavy math
    count: int | None = None  # programs, or connected groups when the kind is UNKNOWN
    latency: Latency | None = None  # device columns
    needs_worker_gb: int | None = None  # NEEDS_WORKER: the smallest worker the real weights fit
    cause: str | None = None  # one line: why the column reads as it does
    since: datetime | None = None  # when what it waits for started (None: queued, or not waiting)
    command: str | None = None  # reproduces the column's value
    off_release: OffRelease | None = None  # device columns: the run's runtime is not the stack's release
    reused: bool = False  # device columns: the run is a stored one of the same reuse key (reuse_device)
    # device columns: upstream pull requests the run's runtime was built with (a candidate fix)
    patches: tuple[str, ...] = ()
    # device columns: the workarounds (coverfarm.workarounds) the run's bundle was lowered with
    workarounds: tuple[str, ...] = ()


@dataclass(frozen=True)
class CellView:
    policy: str
    backend: str
    ops: Column
    heavy: Column
    programs: Column
    export: Column
    # The device column of a sweep that asks for no device class: whether there is a bundle to run.
    device: Column
    devices: dict[str, Column] = field(default_factory=dict)  # per device class of the sweep, in order
    cause: str | None = None  # the row's one-line cause (the report's footnote)
    pending: bool = False  # queued or running, a slow result's longer re-run included
    running: bool = False  # the latest CPU job is running
    since: datetime | None = None  # its start
    rerun: bool = False  # a slow result stands while its longer re-run is pending
    cancelled: bool = False
    measured: bool = False  # a result document is stored
    command: str = ""  # ``coverfarm analyze`` with the cell's options
    reused_from: ReusedFrom | None = None  # the stored result the cell reused (coverfarm.reuse)
    waiting: str | None = None  # why its queued CPU job waits for a worker (coverfarm.routes)
    memory_class_gb: int | None = None  # the pending CPU job's memory class: a real-weight re-run
    stack: str = DEFAULT_STACK  # the stack (coverfarm.stacks) the cell is measured with
    release: str | None = None  # that stack's executorch, as its result recorded it

    @property
    def coverage(self) -> list[Column]:
        """The tracker's columns after "Policy"."""
        return [self.ops, self.heavy, self.programs, self.export]
