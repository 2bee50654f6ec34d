"""What changed in one cell from one stack to the next (an ExecuTorch release, a pull request's wheel):
column by column, from the two cells' views (``coverfarm.cell_view``), typed, for the progress view.

The one place that decides what a change is and whether it is for the better: a share that grows, an
export or a device run that now finishes. The text is ``coverfarm.tracker``'s (``change_text``) and
the page's colour follows ``direction``; no renderer compares numbers itself. No torch, no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from coverfarm.cell_view import CellView, Column, Kind


class Direction(StrEnum):
    SAME = "same"
    BETTER = "better"
    WORSE = "worse"
    CHANGED = "changed"  # different, and neither better nor worse (a program count, a latency, ⏳)


# How far a column got: a value beats a bound or a stage out of time, which beat a failure. Kinds that
# say nothing was measured (pending, not applicable, no device) have no rank: a change to or from them
# is only a change.
_RANK = {
    Kind.FAILED: 0,
    Kind.SLOW: 1,
    Kind.BOUNDED: 1,
    Kind.UNKNOWN: 1,
    Kind.NEEDS_WORKER: 1,
    Kind.UNSTABLE: 2,
    Kind.VALUE: 2,
}
_SHARE_KINDS = (Kind.VALUE, Kind.BOUNDED)


@dataclass(frozen=True)
class ColumnChange:
    before: Column
    after: Column
    direction: Direction
    part: int | None = None  # shares: the change of the part on the backend; programs: of the count
    total: int | None = None  # shares: the change of the whole
    fraction: float | None = None  # shares: the change of the share (after minus before, 0..1 scale)
    ratio: float | None = None  # device latencies: the median after over the median before


@dataclass(frozen=True)
class RowChange:
    """One cell from a stack (``before``) to the next (``after``)."""

    before: str
    after: str
    ops: ColumnChange
    heavy: ColumnChange
    programs: ColumnChange
    export: ColumnChange
    devices: dict[str, ColumnChange] = field(default_factory=dict)  # per device class shown

    @property
    def coverage(self) -> list[ColumnChange]:
        return [self.ops, self.heavy, self.programs, self.export]


def _by_kind(before: Column, after: Column) -> Direction:
    if before.kind is after.kind:
        return Direction.SAME
    rank_before, rank_after = _RANK.get(before.kind), _RANK.get(after.kind)
    if rank_before is None or rank_after is None or rank_before == rank_after:
        return Direction.CHANGED
    return Direction.BETTER if rank_after > rank_before else Direction.WORSE


def share_change(before: Column, after: Column) -> ColumnChange:
    """Ops or heavy math: the part and the whole, and the share's direction."""
    old, new = before.share, after.share
    if before.kind is not after.kind or before.kind not in _SHARE_KINDS or old is None or new is None:
        return ColumnChange(before, after, _by_kind(before, after))
    part, total = new.part - old.part, new.total - old.total
    if old.fraction is None or new.fraction is None:
        fraction = None
        direction = Direction.SAME if (part, total) == (0, 0) else Direction.CHANGED
    else:
        fraction = new.fraction - old.fraction
        if fraction:
            direction = Direction.BETTER if fraction > 0 else Direction.WORSE
        else:
            direction = Direction.SAME if (part, total) == (0, 0) else Direction.CHANGED
    return ColumnChange(before, after, direction, part=part, total=total, fraction=fraction)


def count_change(before: Column, after: Column) -> ColumnChange:
    """Programs: the count's change, neither better nor worse (fewer programs may mean fewer ops taken)."""
    if before.kind is after.kind and before.count is not None and after.count is not None:
        part = after.count - before.count
        return ColumnChange(before, after, Direction.CHANGED if part else Direction.SAME, part=part)
    return ColumnChange(before, after, _by_kind(before, after))


def device_change(before: Column, after: Column) -> ColumnChange:
    """A device run: whether it now runs (or no longer does); two latencies are a ratio, not judged here
    (whether a latency change counts is the sweep diff's, over the runs' intervals and history)."""
    old, new = (column.latency.median_ms if column.latency else None for column in (before, after))
    if before.kind is after.kind and old and new is not None:
        ratio = new / old
        return ColumnChange(before, after, Direction.SAME if ratio == 1 else Direction.CHANGED, ratio=ratio)
    if before.kind is after.kind and before.kind is Kind.FAILED and before.cause != after.cause:
        return ColumnChange(before, after, Direction.CHANGED)
    return ColumnChange(before, after, _by_kind(before, after))


def export_change(before: Column, after: Column) -> ColumnChange:
    """The export column, which carries the row's cause: a failure for another cause is a change."""
    if before.kind is after.kind and before.kind is Kind.FAILED and before.cause != after.cause:
        return ColumnChange(before, after, Direction.CHANGED)
    return ColumnChange(before, after, _by_kind(before, after))


def row_change(before: CellView, after: CellView, device_classes: list[str]) -> RowChange:
    """``device_classes``: the device columns shown (a class either view lacks reads as not applicable)."""
    missing = Column(Kind.NOT_APPLICABLE)
    return RowChange(
        before=before.stack,
        after=after.stack,
        ops=share_change(before.ops, after.ops),
        heavy=share_change(before.heavy, after.heavy),
        programs=count_change(before.programs, after.programs),
        export=export_change(before.export, after.export),
        devices={
            name: device_change(before.devices.get(name, missing), after.devices.get(name, missing))
            for name in device_classes
        },
    )
