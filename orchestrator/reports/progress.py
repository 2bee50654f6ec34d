"""A sweep's progress over its stacks: per policy and backend, each stack's tracker row (ops, heavy math,
programs, export, the device cells) and its change from each stack to the next, oldest release first;
per backend, the blocker groups each release fixed and introduced.

Built once (``build``) from the cells' views (``coverfarm.cell_view``) and their result documents;
the page (``dashboard``), the Markdown (``progress_markdown``) and the JSON (``public``) render it.
Stacks are ordered by the ExecuTorch release their results recorded
(``orchestrator.sweeps.cell_views.release_order``), so that "the next stack" is the next release.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

from sqlalchemy.orm import Session

from coverfarm import tracker
from coverfarm.cell_change import ColumnChange, RowChange, row_change
from coverfarm.cell_view import CellView, Column
from coverfarm.result import ResultDocument
from orchestrator.models import Cell, Sweep
from orchestrator.reports.coverage_table import device_classes_shown
from orchestrator.reports.diff import group_changes
from orchestrator.reports.schemas import (
    BlockerStepPublic,
    ChangePublic,
    ColumnValue,
    GroupKey,
    ProgressReport,
    ProgressRowPublic,
    StackCellPublic,
    StackPublic,
    StepPublic,
)
from orchestrator.sweeps.cell_views import latest_document, release_order, sweep_stacks, sweep_views

COVERAGE = ("ops", "heavy", "programs", "export")  # the JSON's names of the tracker's columns


@dataclass(frozen=True)
class StackInfo:
    name: str
    executorch: str | None  # the release its results recorded (most of them), None when none did
    torch: str | None


@dataclass(frozen=True)
class StackCell:
    cell_id: int
    view: CellView


@dataclass(frozen=True)
class Row:
    policy: str
    backend: str
    cells: list[StackCell | None]  # per stack of ``Progress.stacks`` (None: the sweep has no such cell)
    changes: list[RowChange | None]  # per step (None: a side has no cell)


@dataclass(frozen=True)
class BlockerStep:
    """The blocker groups of one backend that a release fixed and introduced, over the policies both
    stacks measured in full (``ResultDocument.blockers_known``): a policy that failed on one stack
    neither fixes nor introduces anything."""

    before: str
    after: str
    policies: list[str]
    fixed: list[GroupKey]  # in ``before``'s cells, not in ``after``'s
    introduced: list[GroupKey]


@dataclass(frozen=True)
class BackendProgress:
    backend: str
    device_classes: list[str]  # the device columns shown (reports.coverage_table.device_classes_shown)
    rows: list[Row]  # one per policy, in name order
    blockers: list[BlockerStep]  # one per step


@dataclass(frozen=True)
class Progress:
    sweep_id: int
    stacks: list[StackInfo]  # oldest release first
    backends: list[BackendProgress]


Docs = dict[int, ResultDocument | None]  # cell id -> its latest result document


def _most_recorded(docs: list[ResultDocument], package: str) -> str | None:
    found = Counter(doc.versions[package] for doc in docs if package in doc.versions)
    return found.most_common(1)[0][0] if found else None


def stacks_of(sweep: Sweep, views: dict[int, CellView], docs: Docs) -> list[StackInfo]:
    """The sweep's stacks, oldest release first (``release_order``), with the versions their results
    recorded."""
    stacks = []
    for name in release_order(sweep_stacks(sweep), sweep.cells, views):
        recorded = [doc for cell in sweep.cells if cell.stack == name and (doc := docs[cell.id]) is not None]
        executorch, torch = (_most_recorded(recorded, package) for package in ("executorch", "torch"))
        stacks.append(StackInfo(name, executorch, torch))
    return stacks


def _blocker_step(
    cells: dict[tuple[str, str], Cell], policies: list[str], docs: Docs, step: tuple[str, str]
) -> BlockerStep:
    pairs = []
    for policy in policies:
        old, new = (docs[cell.id] if (cell := cells.get((policy, stack))) else None for stack in step)
        if old is not None and new is not None and old.blockers_known and new.blockers_known:
            pairs.append((policy, old, new))
    introduced, fixed = group_changes(
        ((old, None) for _, old, _ in pairs), ((new, None) for *_, new in pairs)
    )
    return BlockerStep(step[0], step[1], [policy for policy, _, _ in pairs], fixed, introduced)


def build(sweep: Sweep, views: dict[int, CellView], docs: Docs) -> Progress:
    """``views``: the cells' views with their device columns; ``docs``: each cell's latest document."""
    stacks = stacks_of(sweep, views, docs)
    names = [stack.name for stack in stacks]
    backends = []
    for backend in dict.fromkeys(cell.backend for cell in sweep.cells):
        cells = {(cell.policy, cell.stack): cell for cell in sweep.cells if cell.backend == backend}
        policies = sorted({policy for policy, _ in cells})
        classes = device_classes_shown([views[cell.id] for cell in cells.values()])
        rows = []
        for policy in policies:
            found = [cells.get((policy, name)) for name in names]
            row = [StackCell(cell.id, views[cell.id]) if cell is not None else None for cell in found]
            changes = [
                row_change(old.view, new.view, classes) if old is not None and new is not None else None
                for old, new in pairwise(row)
            ]
            rows.append(Row(policy, backend, row, changes))
        blockers = [_blocker_step(cells, policies, docs, step) for step in pairwise(names)]
        backends.append(BackendProgress(backend, classes, rows, blockers))
    return Progress(sweep.id, stacks, backends)


def progress(session: Session, sweep: Sweep) -> Progress:
    docs = {cell.id: latest_document(cell) for cell in sweep.cells}
    return build(sweep, sweep_views(session, sweep), docs)


# --- the JSON -------------------------------------------------------------------------------------


def _pair(low: float | None, high: float | None) -> list[float] | None:
    return [low, high] if low is not None and high is not None else None


def _value(column: Column, text: str) -> ColumnValue:
    share, latency, flag = column.share, column.latency, column.off_release
    return ColumnValue(
        kind=column.kind.value,
        text=text,
        part=share.part if share is not None else None,
        total=share.total if share is not None else None,
        share=share.fraction if share is not None else None,
        count=column.count,
        median_ms=latency.median_ms if latency is not None else None,
        interval_ms=_pair(latency.low_ms, latency.high_ms) if latency is not None else None,
        speedup=latency.speedup if latency is not None else None,
        speedup_interval=_pair(latency.speedup_low, latency.speedup_high) if latency is not None else None,
        speedup_narrow=latency.speedup_narrow
        if latency is not None and latency.speedup is not None
        else None,
        off_release=flag.runtime if flag is not None else None,
        cause=column.cause,
    )


def _change(change: ColumnChange, text: str) -> ChangePublic:
    return ChangePublic(
        direction=change.direction.value,
        text=text,
        part=change.part,
        total=change.total,
        fraction=change.fraction,
        ratio=change.ratio,
    )


def _stack_cell(stack: str, cell: StackCell, classes: list[str]) -> StackCellPublic:
    view = cell.view
    texts = tracker.coverage_texts(view)
    columns = {name: _value(c, t) for name, c, t in zip(COVERAGE, view.coverage, texts, strict=True)}
    for name in classes:
        if name in view.devices:
            columns[name] = _value(view.devices[name], tracker.device_text(view.devices[name]))
    return StackCellPublic(
        stack=stack, cell_id=cell.cell_id, url=f"/api/cells/{cell.cell_id}", columns=columns
    )


def _step(change: RowChange) -> StepPublic:
    texts = tracker.coverage_change_texts(change.coverage)
    columns = {name: _change(c, t) for name, c, t in zip(COVERAGE, change.coverage, texts, strict=True)}
    for name, device in change.devices.items():
        columns[name] = _change(device, tracker.device_change_text(device))
    return StepPublic(before=change.before, after=change.after, columns=columns)


def public(report: Progress) -> ProgressReport:
    names = [stack.name for stack in report.stacks]
    rows = []
    blockers = []
    for part in report.backends:
        for row in part.rows:
            rows.append(
                ProgressRowPublic(
                    policy=row.policy,
                    backend=row.backend,
                    stacks=[
                        _stack_cell(name, cell, part.device_classes)
                        for name, cell in zip(names, row.cells, strict=True)
                        if cell is not None
                    ],
                    changes=[_step(change) for change in row.changes if change is not None],
                )
            )
        blockers += [
            BlockerStepPublic(
                backend=part.backend, before=step.before, after=step.after, policies=step.policies,
                fixed=step.fixed, introduced=step.introduced,
            )
            for step in part.blockers
        ]  # fmt: skip
    return ProgressReport(
        sweep_id=report.sweep_id,
        stacks=[StackPublic(name=s.name, executorch=s.executorch, torch=s.torch) for s in report.stacks],
        rows=rows,
        blockers=blockers,
    )
