"""Folding the lower stage's events into the result document: totals only when every program reported,
heavy math weighted by runs per chunk, and the right stage states for slow and failed stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coverfarm import tracker
from coverfarm.result import ResultDocument, StageResult, StageStatus
from worker.child.bounded import StageRun
from worker.lower.assemble import fold_lower_events

MANIFEST = {
    "programs": [
        {"name": "observation", "pt2": "observation.pt2", "runs_per_chunk": 1},
        {"name": "denoise_step", "pt2": "denoise_step.pt2", "runs_per_chunk": 10},
    ]
}


def blocker(op: str, count: int, macs: int) -> dict[str, Any]:
    return {"op": op, "reason": "no operator implementation", "count": count, "macs": macs, "nodes": []}


def program_events(name: str, partitioned: bool, exported: bool) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"event": "phase", "phase": "partition", "program": name},
        {"event": "edge", "program": name, "ops": 100, "macs": 1000},
        {
            "event": "support",
            "program": name,
            "supported_ops": 90,
            "supported_macs": 900,
            "connected_groups": 4,
            "blockers": [blocker("aten.elu.default", 10, 100)],
            "seconds": 0.01,
        },
    ]
    if partitioned:
        events += [
            {
                "event": "partitioned",
                "program": name,
                "seconds": 1.0,
                "partitions": 6,
                "ops_on_backend": 88,
                "macs_on_backend": 800,
                "blockers": [blocker("aten.elu.default", 10, 100), blocker("aten.mm.default", 2, 100)],
            },
            {"event": "phase", "phase": "export", "program": name},
        ]
    if exported:
        events += [
            {"event": "lowered", "program": name, "delegates": 6},
            {"event": "exported", "program": name, "pte": f"/x/{name}.pte", "bytes": 1},
        ]
    return events


def fold(events: list[dict[str, Any]], timed_out: str | None = None, returncode: int = 0) -> ResultDocument:
    doc = ResultDocument(policy="diffusion", backend="vulkan", trace=StageResult(status=StageStatus.OK))
    run = StageRun(
        events=events, returncode=returncode, timed_out_phase=timed_out, phase_seconds={"partition": 2.0}
    )
    fold_lower_events(doc, MANIFEST, Path("/trace"), run, 900)
    return doc


def test_everything_finished() -> None:
    doc = fold(program_events("observation", True, True) + program_events("denoise_step", True, True))
    assert (doc.ops.total, doc.ops.on_backend, doc.ops.supported) == (200, 176, 180)
    # heavy math weights the step program by its 10 runs; ops count each program once
    assert (doc.heavy_macs.total, doc.heavy_macs.on_backend) == (11 * 1000, 11 * 800)
    assert (doc.programs.count, doc.programs.connected_groups, doc.programs.delegates) == (12, 8, 12)
    assert doc.partition.status is StageStatus.OK and doc.export.status is StageStatus.OK
    assert [(b.op, b.count, b.macs) for b in doc.blockers] == [
        ("aten.elu.default", 20, 1100),
        ("aten.mm.default", 4, 1100),
    ]
    assert doc.program_list[1].pt2 == "/trace/denoise_step.pt2"


def test_partition_out_of_time_keeps_support_numbers_and_no_partition_count() -> None:
    events = program_events("observation", True, True) + program_events("denoise_step", False, False)
    doc = fold(events, timed_out="partition", returncode=-9)
    assert doc.partition.status is StageStatus.SLOW
    assert doc.export.status is StageStatus.NOT_RUN
    assert doc.ops.total == 200 and doc.ops.on_backend is None and doc.ops.supported == 180
    assert doc.programs.count is None and doc.programs.connected_groups == 8
    assert [(b.op, b.count) for b in doc.blockers] == [("aten.elu.default", 20)]
    assert tracker.row(doc) == ["diffusion", "≤ 180 / 200 (90%)", "≤ 90%", "? (8 groups)", "slow"]


def test_export_out_of_time_keeps_every_coverage_number() -> None:
    events = program_events("observation", True, True) + program_events("denoise_step", True, False)
    doc = fold(events, timed_out="export", returncode=-9)
    assert doc.partition.status is StageStatus.OK
    assert doc.export.status is StageStatus.SLOW
    assert tracker.row(doc)[1:] == ["176 / 200 (88%)", "80%", "12", "slow"]


def test_an_exception_in_the_partitioner_is_a_failed_partition_with_its_cause() -> None:
    events = [
        *program_events("observation", False, False),
        {
            "event": "error",
            "program": "observation",
            "type": "AttributeError",
            "message": "'list' has no shape",
        },
        *program_events("denoise_step", True, True),
    ]
    doc = fold(events, returncode=1)
    assert doc.partition.status is StageStatus.FAILED
    assert doc.partition.error is not None
    assert doc.partition.error.type == "AttributeError"
    assert "observation" in doc.partition.error.message
    assert doc.export.status is StageStatus.NOT_RUN
    assert tracker.row(doc)[3:] == ["? (8 groups)", "❌"]


def test_an_exception_while_exporting_is_a_failed_export_with_coverage_kept() -> None:
    events = [
        *program_events("observation", True, False),
        {"event": "error", "program": "observation", "type": "RuntimeError", "message": "boom"},
        *program_events("denoise_step", True, True),
    ]
    doc = fold(events, returncode=1)
    assert doc.partition.status is StageStatus.OK
    assert doc.export.status is StageStatus.FAILED
    assert doc.programs.count == 12


def test_a_child_that_dies_without_a_word_is_a_failure_not_a_result() -> None:
    doc = fold(program_events("observation", False, False), returncode=-11)
    assert doc.partition.status is StageStatus.FAILED
    assert doc.partition.error is not None and doc.partition.error.type == "ChildProcessDied"
