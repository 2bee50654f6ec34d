"""The tracker's cell formats, rendered from result documents."""

from __future__ import annotations

from coverfarm import tracker
from coverfarm.result import ErrorInfo, HeavyMacs, Ops, Programs, ResultDocument, StageResult, StageStatus

OK = StageResult(status=StageStatus.OK)


def doc(**fields: object) -> ResultDocument:
    return ResultDocument.model_validate({"policy": "act", "backend": "vulkan", "trace": OK, **fields})


def test_finished_row_matches_the_trackers_formats() -> None:
    row = tracker.row(
        doc(
            partition=OK,
            export=OK,
            ops=Ops(total=1561, on_backend=1556, supported=1557),
            heavy_macs=HeavyMacs(total=1000, on_backend=999, supported=1000),
            programs=Programs(count=3, connected_groups=24),
        )
    )
    assert row == ["act", "1556 / 1561 (100%)", "100%", "3", "✓"]


def test_partitioning_out_of_time_shows_groups_and_upper_bounds_never_a_count() -> None:
    slow = StageResult(
        status=StageStatus.SLOW, error=ErrorInfo(stage="partition", type="Timeout", message="x")
    )
    d = doc(
        partition=slow,
        ops=Ops(total=5895, supported=5477),
        heavy_macs=HeavyMacs(total=100, supported=100),
        programs=Programs(connected_groups=41),
    )
    assert tracker.row(d) == ["act", "≤ 5477 / 5895 (93%)", "≤ 100%", "? (41 groups)", "slow"]
    assert d.status is StageStatus.SLOW


def test_failed_trace_is_all_crosses_with_its_cause() -> None:
    failed = StageResult(
        status=StageStatus.FAILED, error=ErrorInfo(stage="trace", type="ValueError", message="no\nmore")
    )
    d = ResultDocument(policy="pi05", backend="vulkan", trace=failed)
    assert tracker.row(d) == ["pi05", "❌", "❌", "❌", "❌"]
    assert tracker.cause_line(d) == "trace: ValueError: no"


def test_export_failure_keeps_coverage_columns() -> None:
    failed = StageResult(status=StageStatus.FAILED, error=ErrorInfo(stage="export", type="E", message="m"))
    d = doc(
        partition=OK,
        export=failed,
        ops=Ops(total=10, on_backend=5),
        heavy_macs=HeavyMacs(total=0, on_backend=0),
        programs=Programs(count=2, connected_groups=2),
    )
    assert tracker.row(d) == ["act", "5 / 10 (50%)", "-", "2", "❌"]
