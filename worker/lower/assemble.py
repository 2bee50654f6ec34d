"""Fold the lower stage's event log into the result document.

A policy-level number exists only when every program contributed to it: a partial sum would look like a
measurement. Heavy math is weighted by each program's runs per chunk; op counts are not (each program
counts once), as docs/metrics.md defines.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from coverfarm.result import (
    Blocker,
    ErrorInfo,
    HeavyMacs,
    Ops,
    ProgramResult,
    Programs,
    ResultDocument,
    StageResult,
    StageStatus,
)
from worker.child.bounded import StageRun


def _total(values: list[int | None]) -> int | None:
    return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)


def _merge_blockers(rows: list[tuple[dict[str, Any], int]]) -> list[Blocker]:
    merged: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row, runs in rows:
        entry = merged[(row["op"], row["reason"])]
        entry[0] += row["count"]
        entry[1] += row["macs"] * runs
    blockers = [Blocker(op=op, reason=reason, count=c, macs=m) for (op, reason), (c, m) in merged.items()]
    return sorted(blockers, key=lambda b: (-b.macs, -b.count, b.op, b.reason))


def _add_group_details(
    blockers: list[Blocker], by_program: dict[str, dict[str, dict[str, Any]]], results: list[ProgramResult]
) -> None:
    """Each group's representative node (from the program where it keeps the most heavy math) and the
    policy's program count if it were supported: the what-if count in every program it is in, the
    real count in the others."""
    for blocker in blockers:
        key = (blocker.op, blocker.reason)
        total: int | None = 0
        best_macs = -1
        for program in results:
            seen = by_program.get(program.name, {})
            rows = {(r["op"], r["reason"]): r for r in seen.get("partitioned", {}).get("blockers", [])}
            details = {(g["op"], g["reason"]): g for g in seen.get("groups", {}).get("groups", [])}
            if key not in rows:
                total = None if total is None or program.partitions is None else total + program.partitions
                continue
            detail = details.get(key, {})
            if detail.get("example") is not None and rows[key]["macs"] * program.runs_per_chunk > best_macs:
                best_macs = rows[key]["macs"] * program.runs_per_chunk
                blocker.example = detail["example"]
            count = detail.get("partitions_if_supported")
            total = None if total is None or count is None else total + count
        blocker.programs_if_supported = total


def _errors_by_phase(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Which phase each error happened in: the phase last switched to before it."""
    phase = "partition"
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["event"] == "phase":
            phase = event["phase"]
        elif event["event"] == "error":
            found[phase].append(event)
    return found


def _error_info(stage: str, event: dict[str, Any]) -> ErrorInfo:
    program = event.get("program")
    message = f"{event['message']}" + (f" (program {program})" if program else "")
    return ErrorInfo(stage=stage, type=event["type"], message=message, traceback=event.get("traceback"))


def _phase_result(
    phase: str,
    noun: str,
    errors: list[dict[str, Any]],
    run: StageRun,
    finished: bool,
    seconds: float | None,
    timeout_s: float,
) -> StageResult:
    """How one phase ended: its first error, its bound running out, every program done, or the child
    dying without a word."""
    if errors:
        return StageResult(status=StageStatus.FAILED, seconds=seconds, error=_error_info(phase, errors[0]))
    if run.timed_out_phase == phase:
        error = ErrorInfo(stage=phase, type="Timeout", message=f"{noun} took over {timeout_s:.0f} s")
        return StageResult(status=StageStatus.SLOW, seconds=seconds, error=error)
    if finished:
        return StageResult(status=StageStatus.OK, seconds=seconds)
    died = ErrorInfo(
        stage=phase,
        type="ChildProcessDied",
        message=f"the lower process exited with status {run.returncode}\n{run.log_tail}",
    )
    return StageResult(status=StageStatus.FAILED, seconds=seconds, error=died)


def fold_lower_events(
    doc: ResultDocument, manifest: dict[str, Any], trace_dir: Path, run: StageRun, timeout_s: float
) -> None:
    by_program: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for event in run.events:
        if "program" in event and event["event"] != "phase":
            by_program[event["program"]][event["event"]] = event
        elif event["event"] == "levers":
            doc.levers = dict(event["states"])

    results: list[ProgramResult] = []
    runs_of: dict[str, int] = {}
    for program in manifest["programs"]:
        name, runs = program["name"], program["runs_per_chunk"]
        runs_of[name] = runs
        seen = by_program.get(name, {})
        edge, support, parted = seen.get("edge", {}), seen.get("support", {}), seen.get("partitioned", {})
        results.append(
            ProgramResult(
                name=name,
                runs_per_chunk=runs,
                ops=edge.get("ops"),
                ops_on_backend=parted.get("ops_on_backend"),
                ops_supported=support.get("supported_ops"),
                macs=edge.get("macs"),
                macs_on_backend=parted.get("macs_on_backend"),
                macs_supported=support.get("supported_macs"),
                partitions=parted.get("partitions"),
                connected_groups=support.get("connected_groups"),
                delegates=seen.get("lowered", {}).get("delegates"),
                pt2=str(trace_dir / program["pt2"]),
                pte=seen.get("exported", {}).get("pte"),
            )
        )
    doc.program_list = results

    def weighted(attr: str) -> int | None:
        values = [getattr(p, attr) for p in results]
        if any(v is None for v in values):
            return None
        return sum(v * p.runs_per_chunk for v, p in zip(values, results, strict=True))

    doc.ops = Ops(
        total=_total([p.ops for p in results]),
        on_backend=_total([p.ops_on_backend for p in results]),
        supported=_total([p.ops_supported for p in results]),
    )
    doc.heavy_macs = HeavyMacs(
        total=weighted("macs"), on_backend=weighted("macs_on_backend"), supported=weighted("macs_supported")
    )
    doc.programs = Programs(
        count=_total([p.partitions for p in results]),
        connected_groups=_total([p.connected_groups for p in results]),
        delegates=_total([p.delegates for p in results]),
    )
    all_partitioned = all(p.partitions is not None for p in results)
    source = "partitioned" if all_partitioned else "support"
    doc.blockers = _merge_blockers(
        [
            (row, runs_of[name])
            for name, seen in by_program.items()
            for row in seen.get(source, {}).get("blockers", [])
        ]
    )
    if all_partitioned:
        _add_group_details(doc.blockers, by_program, results)

    errors = _errors_by_phase(run.events)
    partition_s = run.phase_seconds.get("partition")
    export_s = run.phase_seconds.get("export")
    doc.partition = _phase_result(
        "partition", "partitioning", errors.get("partition", []), run, all_partitioned, partition_s, timeout_s
    )
    if doc.partition.status is not StageStatus.OK and not errors.get("export"):
        doc.export = StageResult(status=StageStatus.NOT_RUN)
    else:
        all_exported = all(p.pte is not None for p in results)
        doc.export = _phase_result(
            "export", "export", errors.get("export", []), run, all_exported, export_s, timeout_s
        )

    for name, seen in by_program.items():
        if "support" in seen:
            doc.timings[f"{name}.support_and_groups_s"] = round(seen["support"]["seconds"], 3)
        if "partitioned" in seen:
            doc.timings[f"{name}.partition_s"] = round(seen["partitioned"]["seconds"], 3)
        if "groups" in seen:
            doc.timings[f"{name}.examples_and_whatif_s"] = round(seen["groups"]["seconds"], 3)
    if partition_s is not None:
        doc.timings["partition_phase_s"] = round(partition_s, 3)
    if export_s is not None:
        doc.timings["export_phase_s"] = round(export_s, 3)
