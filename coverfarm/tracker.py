"""The tracker issue's Coverage table: its columns and cell formats, rendered from result documents."""

from __future__ import annotations

from collections.abc import Iterable

from coverfarm.result import ResultDocument, StageStatus

BACKEND_TITLES = {"vulkan": "Vulkan", "xnnpack": "XNNPACK"}
FAILED = "❌"
PENDING = "⏳"


def backend_title(backend: str) -> str:
    return BACKEND_TITLES.get(backend, backend)


def columns(backend: str) -> list[str]:
    title = backend_title(backend)
    return ["Policy", f"Ops on {title}", f"Heavy math on {title}", f"{title} programs", "Exports to .pte"]


def percent(part: int, whole: int) -> str:
    return f"{round(100 * part / whole)}%" if whole else "-"


def ops_cell(doc: ResultDocument) -> str:
    ops = doc.ops
    if ops.total is None:
        return FAILED
    if ops.on_backend is not None:
        return f"{ops.on_backend} / {ops.total} ({percent(ops.on_backend, ops.total)})"
    if ops.supported is not None:
        # Partitioning did not finish: the support check's count is an upper bound on what it tags.
        return f"≤ {ops.supported} / {ops.total} ({percent(ops.supported, ops.total)})"
    return FAILED


def heavy_math_cell(doc: ResultDocument) -> str:
    macs = doc.heavy_macs
    if macs.total is None:
        return FAILED
    if macs.on_backend is not None:
        return percent(macs.on_backend, macs.total)
    if macs.supported is not None:
        return f"≤ {percent(macs.supported, macs.total)}"
    return FAILED


def programs_cell(doc: ResultDocument) -> str:
    programs = doc.programs
    if programs.count is not None:
        return str(programs.count)
    if programs.connected_groups is not None:
        return f"? ({programs.connected_groups} groups)"
    return FAILED


def export_cell(doc: ResultDocument) -> str:
    status = doc.export.status
    if status is StageStatus.OK:
        return "✓"
    if status is StageStatus.SLOW or doc.partition.status is StageStatus.SLOW:
        return "slow"
    weights = doc.weights
    if status is StageStatus.NOT_RUN and weights is not None and weights.mode == "fake":
        # Measured with fake weights (the policy does not fit this worker): export needs a bigger one.
        if weights.needs_worker_gb is not None:
            return f"needs ≥ {weights.needs_worker_gb} GB worker"
        return "needs real weights"
    return FAILED


def row(doc: ResultDocument) -> list[str]:
    return [doc.policy, ops_cell(doc), heavy_math_cell(doc), programs_cell(doc), export_cell(doc)]


def markdown_table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def cause_line(doc: ResultDocument) -> str | None:
    """The one-line cause of the first stage that did not finish, for the row's footnote."""
    for stage in (doc.trace, doc.partition, doc.export):
        if stage.error is not None:
            return f"{stage.error.stage}: {stage.error.one_line()}"
    return None
