"""The progress page's tables: the typed progress over a sweep's stacks (``orchestrator.reports.progress``)
laid out per backend, a line per stack of each policy, oldest release first, and under each stack but
the first a line with its change from the stack before. Cells are the grid's (``dashboard.views``),
changes coloured by their direction (``coverfarm.cell_change``), their words coverfarm.tracker's."""

from __future__ import annotations

from dataclasses import dataclass

from coverfarm import tracker
from coverfarm.cell_change import ColumnChange, RowChange
from coverfarm.cell_view import Column, Kind
from dashboard.views import Field, coverage_fields, device_class_field
from orchestrator.reports.progress import BackendProgress, BlockerStep, Progress

MISSING = Column(Kind.NOT_APPLICABLE)  # a device class the cell's view lacks


@dataclass(frozen=True)
class Delta:
    text: str
    direction: str  # same / better / worse / changed: the cell's CSS class


@dataclass(frozen=True)
class Line:
    """A stack's tracker row of the policy (``fields``), or its change from the stack before
    (``deltas``)."""

    stack: str
    cell_id: int | None = None
    fields: list[Field] | None = None
    deltas: list[Delta] | None = None


@dataclass(frozen=True)
class PolicyLines:
    policy: str
    lines: list[Line]


@dataclass(frozen=True)
class BackendTable:
    backend: str
    columns: list[str]  # after "Policy" and "Stack"
    policies: list[PolicyLines]
    blockers: list[BlockerStep]


def _delta(change: ColumnChange, text: str) -> Delta:
    return Delta(text, change.direction.value)


def _change_line(change: RowChange, classes: list[str]) -> Line:
    texts = tracker.coverage_change_texts(change.coverage)
    deltas = [_delta(column, text) for column, text in zip(change.coverage, texts, strict=True)]
    deltas += [
        _delta(change.devices[name], tracker.device_change_text(change.devices[name])) for name in classes
    ]
    return Line(f"{change.before} → {change.after}", deltas=deltas)


def _table(part: BackendProgress, stacks: list[str]) -> BackendTable:
    policies = []
    for row in part.rows:
        lines = []
        for index, cell in enumerate(row.cells):
            if cell is None:
                continue
            change = row.changes[index - 1] if index else None
            if change is not None:
                lines.append(_change_line(change, part.device_classes))
            view = cell.view
            devices = [
                device_class_field(name, view.devices.get(name, MISSING)) for name in part.device_classes
            ]
            lines.append(Line(stacks[index], cell.cell_id, [*coverage_fields(view), *devices]))
        policies.append(PolicyLines(row.policy, lines))
    columns = [*tracker.columns(part.backend)[1:], *part.device_classes]
    return BackendTable(part.backend, columns, policies, part.blockers)


def tables(progress: Progress) -> list[BackendTable]:
    stacks = [stack.name for stack in progress.stacks]
    return [_table(part, stacks) for part in progress.backends]
