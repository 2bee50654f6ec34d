"""What the reports API returns: blocker groups with their what-if estimates, and sweep diffs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class BlockerHit(BaseModel):
    """One blocker group in one policy, and that policy's numbers if the group were supported."""

    policy: str
    nodes: int
    macs: int  # heavy math kept on the CPU, weighted by runs per chunk
    macs_share: float | None  # of the policy's weighted multiply-adds
    extra_programs: int | None  # backend programs now minus programs if this group were supported
    ops_total: int | None
    ops_on_backend: int | None
    ops_if_supported: int | None
    heavy_share: float | None
    heavy_share_if_supported: float | None
    repro_status: str  # "ready", "not reproduced", "no repro"


class ReproView(BaseModel):
    policy: str  # whose representative node the repro was written from
    status: str
    text: str | None
    output: str | None
    reason_seen: str | None
    error: str | None
    note: str | None  # why there is no repro


class BlockerGroup(BaseModel):
    backend: str
    op: str
    reason: str
    nodes: int
    macs: int
    extra_programs: int | None
    repro_status: str
    repro: ReproView
    policies: list[BlockerHit]


class ReasonWhatIf(BaseModel):
    """One policy with every blocker group of one reason supported."""

    backend: str
    reason: str
    policy: str
    ops: list[str]
    nodes: int
    macs: int
    ops_total: int | None
    ops_on_backend: int | None
    ops_if_supported: int | None
    heavy_share: float | None
    heavy_share_if_supported: float | None


class BlockersReport(BaseModel):
    sweep_id: int
    backend: str | None
    stack: str | None = None  # the stack whose cells it reads (None: every stack of the sweep)
    policies: list[str]
    groups: list[BlockerGroup]
    by_reason: list[ReasonWhatIf]


class LatencyChange(BaseModel):
    """A device latency change of one cell and class, and whether it counts (``flagged``): beyond both
    runs' intervals (the ranges of their replica medians), and so in two consecutive sweeps of the same
    cell (policy, backend, options, device class and stack). One sweep beyond them is ``beyond_spread``
    with ``consecutive`` 1: noted, not counted until the next sweep of the same cell shows it too."""

    device_class: str
    median_a_ms: float | None
    median_b_ms: float | None
    flagged: bool
    why: str
    beyond_spread: bool = False  # this pair of runs: their intervals (replica medians' ranges) do not overlap
    direction: Literal["slower", "faster"] | None = None  # of b against a, when beyond the spread
    consecutive: int = 0  # consecutive sweeps of the same cell beyond a's spread, in the same direction
    sweeps: list[int] = []  # those sweeps, oldest first
    regression: bool = False  # flagged and slower


class CellChange(BaseModel):
    policy: str
    backend: str
    stack: str | None = None  # the stack of both cells; None when the diff chose one stack on each side
    changes: dict[str, list[str | None]]  # column or state -> [in a, in b]
    latency: list[LatencyChange] = []


class GroupKey(BaseModel):
    backend: str
    op: str
    reason: str
    stack: str | None = None  # the stack whose cells have it; None when the diff chose one on each side
    policies: list[str]
    nodes: int
    macs: int


class SweepDiff(BaseModel):
    """Sweep ``b`` against sweep ``a`` (perhaps the same sweep), of one stack each (``stack_a``,
    ``stack_b``) or pairing cells of the same stack (``stacks``, the stacks paired)."""

    a: int
    b: int
    stack_a: str | None = None
    stack_b: str | None = None
    stacks: list[str] = []
    changed: list[CellChange]
    # "policy/backend" cells the other side does not have ("policy/backend (stack)" when cells of more
    # than one stack are paired)
    only_in_a: list[str]
    only_in_b: list[str]
    blockers_appeared: list[GroupKey]
    blockers_vanished: list[GroupKey]


# --- progress over a sweep's stacks (orchestrator.reports.progress) --------------------------------


class ColumnValue(BaseModel):
    """One column of one stack's tracker row: its kind (coverfarm.cell_view.Kind), the tracker's text
    and the numbers behind it."""

    kind: str
    text: str
    part: int | None = None  # ops or multiply-adds on the backend
    total: int | None = None
    share: float | None = None  # part / total
    count: int | None = None  # programs (connected groups when the kind is "unknown")
    median_ms: float | None = None  # device columns: the figure (median of the replica medians)
    interval_ms: list[float] | None = None  # its interval, the replica medians' range; None: none
    speedup: float | None = None
    speedup_interval: list[float] | None = None  # the speed-up's interval; None: none
    speedup_narrow: bool | None = None  # that interval lies within the rules' width of it
    off_release: str | None = None  # the run's runtime, when it is not the stack's release
    cause: str | None = None


class StackCellPublic(BaseModel):
    stack: str
    cell_id: int
    url: str  # the cell with its jobs and whole document
    columns: dict[str, ColumnValue]  # "ops", "heavy", "programs", "export", then each device class


class ChangePublic(BaseModel):
    """One column's change from a stack to the next (coverfarm.cell_change)."""

    direction: Literal["same", "better", "worse", "changed"]
    text: str
    part: int | None = None  # shares: of the part on the backend; programs: of the count
    total: int | None = None
    fraction: float | None = None  # shares: of the share (0..1 scale)
    ratio: float | None = None  # device latencies: the later median over the earlier


class StepPublic(BaseModel):
    before: str  # a stack, and the next one in release order
    after: str
    columns: dict[str, ChangePublic]


class ProgressRowPublic(BaseModel):
    policy: str
    backend: str
    stacks: list[StackCellPublic]  # the stacks that have the cell, oldest release first
    changes: list[StepPublic]  # between consecutive stacks that both have it


class BlockerStepPublic(BaseModel):
    backend: str
    before: str
    after: str
    policies: list[str]  # those both stacks measured in full, whose blocker groups are compared
    fixed: list[GroupKey]  # in before's cells, not in after's
    introduced: list[GroupKey]


class StackPublic(BaseModel):
    name: str
    executorch: str | None  # the release its results recorded
    torch: str | None


class ProgressReport(BaseModel):
    """A sweep's tracker rows per stack, the changes from each stack to the next (oldest ExecuTorch
    release first) and the blocker groups each release fixed and introduced."""

    sweep_id: int
    stacks: list[StackPublic]
    rows: list[ProgressRowPublic]
    blockers: list[BlockerStepPublic]
