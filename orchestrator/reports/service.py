"""A sweep's tracker Coverage table, one per backend, rendered with coverfarm.tracker's own formats."""

from __future__ import annotations

from coverfarm.result import ResultDocument
from coverfarm.tracker import FAILED, PENDING, backend_title, cause_line, columns, markdown_table, row
from orchestrator.models import Cell, JobStatus, Sweep
from orchestrator.sweeps.service import cell_state

NOT_RUN = "-"
EXPORT_COLUMN = 4


def _latest_document(cell: Cell) -> ResultDocument | None:
    for job in reversed(cell.jobs):
        if job.result is not None:
            return ResultDocument.model_validate(job.result.document)
    return None


def _cell_row(cell: Cell) -> tuple[list[str], str | None]:
    """The table row of one cell and its one-line cause (None when there is nothing to explain)."""
    state, pending = cell_state(cell)
    doc = _latest_document(cell)
    if doc is not None:
        cells = row(doc)
        if pending:
            # A slow result whose longer re-run is queued or running: its numbers stand, its export waits.
            cells[EXPORT_COLUMN] = f"{cells[EXPORT_COLUMN]} {PENDING}"
        return cells, cause_line(doc)
    width = len(columns(cell.backend)) - 1
    if pending:
        return [cell.policy, *[PENDING] * width], None
    if state is JobStatus.CANCELLED:
        return [cell.policy, *[NOT_RUN] * width], "cancelled"
    error = cell.jobs[-1].error if cell.jobs else None
    cause = error.strip().splitlines()[-1] if error and error.strip() else cell.jobs[-1].status_reason
    return [cell.policy, *[FAILED] * width], cause


def report_markdown(sweep: Sweep) -> str:
    first = sweep.cells[0].options if sweep.cells else {}
    lines = [
        f"# Sweep {sweep.id}",
        "",
        f"Options: constant propagation {'on' if sweep.constant_prop else 'off'}, "
        f"lowering {sweep.lowering}, stage bound {sweep.timeout_s:g} s (seed {first.get('seed', 0)}).",
    ]
    backends = list(dict.fromkeys(cell.backend for cell in sweep.cells))
    for backend in backends:
        cells = sorted(
            (cell for cell in sweep.cells if cell.backend == backend), key=lambda cell: cell.policy
        )
        rendered = [_cell_row(cell) for cell in cells]
        lines += ["", f"## Coverage: {backend_title(backend)}", ""]
        lines.append(markdown_table(columns(backend), (cells_ for cells_, _ in rendered)))
        causes = [(cell.policy, cause) for cell, (_, cause) in zip(cells, rendered, strict=True) if cause]
        if causes:
            lines += ["", "Causes:", ""]
            lines += [f"- {policy}: {cause}" for policy, cause in causes]
    lines += ["", f"{PENDING}: this cell is being measured (running or queued).", ""]
    return "\n".join(lines)
