"""A sweep's progress over its stacks as Markdown (``GET /api/sweeps/{id}/progress.md``, ``coverfarm
sweep progress``): per backend, each policy's tracker row on each stack, oldest release first, between
two stacks' rows the change from one to the next, then the blocker groups each release fixed and
introduced.
Every cell's text is coverfarm.tracker's, from the typed progress (``orchestrator.reports.progress``)."""

from __future__ import annotations

from coverfarm import tracker
from coverfarm.cell_view import CellView
from orchestrator.reports.progress import BackendProgress, BlockerStep, Progress, StackInfo
from orchestrator.reports.schemas import GroupKey


def stack_label(stack: StackInfo) -> str:
    """ "et-1.4.1 (ExecuTorch 1.4.1, torch 2.13.0)", with what its results recorded."""
    versions = [f"ExecuTorch {stack.executorch}" if stack.executorch else None]
    versions.append(f"torch {stack.torch}" if stack.torch else None)
    known = [text for text in versions if text]
    return f"{stack.name} ({', '.join(known)})" if known else f"{stack.name} (no result recorded)"


def _device_texts(view: CellView, classes: list[str]) -> list[str]:
    return [
        tracker.device_text(view.devices[name]) if name in view.devices else tracker.NOT_APPLICABLE
        for name in classes
    ]


def _group(group: GroupKey) -> str:
    return f"- `{group.op}`: {group.reason} ({', '.join(group.policies)})"


def _blockers(step: BlockerStep) -> list[str]:
    lines = [f"#### Blocker groups from {step.before} to {step.after}", ""]
    if not step.policies:
        return [*lines, "No policy was measured in full on both stacks: nothing to compare."]
    lines.append(f"Over the policies both stacks measured in full: {', '.join(step.policies)}.")
    for label, groups in (("Fixed", step.fixed), ("Introduced", step.introduced)):
        lines += ["", f"{label}:" if groups else f"{label}: none."]
        lines += [_group(group) for group in groups]
    return lines


def _backend(part: BackendProgress, stacks: list[str]) -> list[str]:
    title = tracker.backend_title(part.backend)
    header = ["Policy", "Stack", *tracker.columns(part.backend)[1:], *part.device_classes]
    rows = []
    for row in part.rows:
        for index, cell in enumerate(row.cells):
            if cell is None:
                continue
            change = row.changes[index - 1] if index else None
            if change is not None:
                devices = [tracker.device_change_text(change.devices[name]) for name in part.device_classes]
                between = f"{change.before} → {change.after}"
                rows.append(["", between, *tracker.coverage_change_texts(change.coverage), *devices])
            texts = [*tracker.coverage_texts(cell.view), *_device_texts(cell.view, part.device_classes)]
            rows.append([row.policy, stacks[index], *texts])
    lines = [f"## {title}", "", tracker.markdown_table(header, rows)]
    lines += [
        "",
        f'A row "A → B", between the rows of stacks A and B, is the change from A to B: ops on {title} '
        "(/ all ops, when they changed), heavy math in percentage points, programs, or what the column was "
        f"and is; {tracker.SAME} unchanged.",
    ]
    for step in part.blockers:
        lines += ["", *_blockers(step)]
    return lines


def progress_markdown(report: Progress) -> str:
    lines = [f"# Sweep {report.sweep_id}: progress over its stacks", ""]
    labels = [stack_label(stack) for stack in report.stacks]
    if len(labels) > 1:
        lines.append(f"Stacks, oldest ExecuTorch release first: {' → '.join(labels)}.")
    else:
        lines.append(f"One stack, {', '.join(labels) or 'none'}: nothing to compare it with.")
    names = [stack.name for stack in report.stacks]
    for part in report.backends:
        lines += ["", *_backend(part, names)]
    lines.append("")
    return "\n".join(lines)
