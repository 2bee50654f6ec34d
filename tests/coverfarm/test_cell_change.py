"""A cell's change from one stack to the next (coverfarm.cell_change) and its words (coverfarm.tracker),
for the cases the golden files of the progress view do not reach; and the runtime flag of a device run
whose runtime is not the stack's release (coverfarm.cell_build.off_release)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coverfarm import tracker
from coverfarm.cell_build import off_release
from coverfarm.cell_change import Direction, count_change, device_change, export_change, share_change
from coverfarm.cell_view import Column, Kind, Latency, Share
from coverfarm.device_result import DeviceResult, RuntimeIdentity


def share(kind: Kind, part: int, total: int) -> Column:
    return Column(kind, share=Share(part, total))


@pytest.mark.parametrize(
    ("before", "after", "direction", "ops", "heavy"),
    [
        (share(Kind.VALUE, 90, 100), share(Kind.VALUE, 95, 100), Direction.BETTER, "+5", "+5 pp"),
        (share(Kind.VALUE, 95, 100), share(Kind.VALUE, 90, 100), Direction.WORSE, "−5", "−5 pp"),
        # More ops on the backend, and more ops in all: the share is what decides.
        (share(Kind.VALUE, 1549, 1553), share(Kind.VALUE, 1556, 1561), Direction.WORSE, "+7 / +8", "−<1 pp"),
        (share(Kind.VALUE, 1000, 2000), share(Kind.VALUE, 1001, 2000), Direction.BETTER, "+1", "+<1 pp"),
        (share(Kind.VALUE, 5, 10), share(Kind.VALUE, 5, 10), Direction.SAME, "=", "="),
        (Column(Kind.FAILED), share(Kind.VALUE, 5, 10), Direction.BETTER, "❌ → 5 / 10 (50%)", "❌ → 50%"),
        (
            share(Kind.BOUNDED, 5, 10),
            Column(Kind.FAILED),
            Direction.WORSE,
            "≤ 5 / 10 (50%) → ❌",
            "≤ 50% → ❌",
        ),
        # Nothing measured yet on one side: a change, neither better nor worse.
        (Column(Kind.PENDING), share(Kind.VALUE, 5, 10), Direction.CHANGED, "⏳ → 5 / 10 (50%)", "⏳ → 50%"),
    ],
)
def test_a_share_changes_for_the_better_when_it_grows(
    before: Column, after: Column, direction: Direction, ops: str, heavy: str
) -> None:
    change = share_change(before, after)
    assert change.direction is direction
    assert (tracker.ops_change_text(change), tracker.heavy_change_text(change)) == (ops, heavy)


def test_programs_change_is_neither_better_nor_worse() -> None:
    fewer = count_change(Column(Kind.VALUE, count=15), Column(Kind.VALUE, count=13))
    assert (fewer.direction, fewer.part, tracker.programs_change_text(fewer)) == (Direction.CHANGED, -2, "−2")
    groups = count_change(Column(Kind.UNKNOWN, count=41), Column(Kind.VALUE, count=50))
    assert (groups.direction, tracker.programs_change_text(groups)) == (
        Direction.BETTER,
        "? (41 groups) → 50",
    )


def test_an_export_or_a_device_run_that_now_finishes_is_better() -> None:
    assert export_change(Column(Kind.FAILED, cause="a"), Column(Kind.VALUE)).direction is Direction.BETTER
    assert export_change(Column(Kind.VALUE), Column(Kind.SLOW)).direction is Direction.WORSE
    other = export_change(Column(Kind.FAILED, cause="a"), Column(Kind.FAILED, cause="b"))
    assert other.direction is Direction.CHANGED and tracker.export_change_text(other) == "❌ → ❌"
    fixed = device_change(
        Column(Kind.FAILED, cause="output wrong"), Column(Kind.VALUE, latency=Latency(40.0))
    )
    assert (fixed.direction, tracker.device_change_text(fixed)) == (
        Direction.BETTER,
        "❌ output wrong → ✓ 40 ms",
    )
    faster = device_change(
        Column(Kind.VALUE, latency=Latency(30.0)), Column(Kind.VALUE, latency=Latency(25.0))
    )
    # Whether a latency change counts is the sweep diff's (the runs' spread, two sweeps): not judged here.
    assert (faster.direction, faster.ratio, tracker.device_change_text(faster)) == (
        Direction.CHANGED, pytest.approx(25 / 30), "30 ms → 25 ms"
    )  # fmt: skip


def run(version: str | None) -> DeviceResult:
    identity = RuntimeIdentity(kind="native", version=version, commit="cff6f4dd32", export_version="1.5.1")
    return DeviceResult(bundle_sha256="0" * 64, status="ok", runtime_identity=identity)


def test_a_run_is_flagged_only_when_its_runtime_is_known_and_not_the_stacks_release() -> None:
    flag = off_release(run("1.5.0"), "1.5.1")
    assert flag is not None and (flag.runtime, flag.release) == ("1.5.0", "1.5.1")
    assert off_release(run("1.5.1"), "1.5.1") is None
    assert off_release(run(None), "1.5.1") is None  # a native build whose owner declared no version
    assert off_release(run("1.5.0"), None) is None  # the cell's result recorded no executorch
    assert off_release(DeviceResult(bundle_sha256="0" * 64, status="ok"), "1.5.1") is None
    latency = Latency(25.0, 2.0, low_ms=24.0, high_ms=26.0, replicas=3, speedup_low=1.9, speedup_high=2.1)
    column = Column(Kind.VALUE, latency=replace(latency, speedup_narrow=True), off_release=flag)
    assert tracker.device_text(column) == "✓ 25 ms (2.0×, 1.9–2.1) ⚠ runtime 1.5.0"
    assert tracker.device_hint("h200-vulkan", column) == (
        "h200-vulkan: replica medians 24–26 ms (3 replicas); ExecuTorch runtime 1.5.0, not the stack's "
        "release 1.5.1"
    )
