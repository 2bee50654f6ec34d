"""Every text a cell is shown with: the tracker issue's Coverage table, its columns and cell formats, the
device cells, shares and milliseconds, rendered from a cell's view (``coverfarm.cell_view``).

The one module that turns a cell's numbers into text: the CLI row, the report and the grid all call it,
and none of them reads text back (the grid's colours follow the column's kind).
"""

from __future__ import annotations

from collections.abc import Iterable

from coverfarm.cell_build import document_view
from coverfarm.cell_view import CellView, Column, Kind, Latency
from coverfarm.result import ResultDocument, ReusedFrom

BACKEND_TITLES = {"vulkan": "Vulkan", "xnnpack": "XNNPACK"}
DONE = "✓"
FAILED = "❌"
PENDING = "⏳"
SLOW = "slow"
BOUND = "≤"
ABOUT = "~"  # a latency whose samples are not stable
NOT_APPLICABLE = "-"
NO_DEVICE = "no device"
NO_WORKER = "no worker"
REUSED = "↺"  # the cell reused a stored result with its reuse key instead of lowering again

# What a column of each kind means, where the kind alone explains it (the grid's tooltips).
KIND_HINTS = {
    Kind.BOUNDED: "partitioning did not finish: the support check's count, an upper bound",
    Kind.UNKNOWN: "partition count unknown; connected groups are not a bound",
    Kind.NO_DEVICE: "no runner of this device class is registered",
    Kind.NO_WORKER: "no live CPU worker of the cell's stack and memory class",
    Kind.UNSTABLE: "the latency samples are not stable: no speed-up",
}
BEING_MEASURED = "being measured"
_PLAIN = {
    Kind.FAILED: FAILED,
    Kind.PENDING: PENDING,
    Kind.NOT_APPLICABLE: NOT_APPLICABLE,
    Kind.SLOW: SLOW,
    Kind.NO_WORKER: NO_WORKER,
}


def backend_title(backend: str) -> str:
    return BACKEND_TITLES.get(backend, backend)


def columns(backend: str) -> list[str]:
    title = backend_title(backend)
    return ["Policy", f"Ops on {title}", f"Heavy math on {title}", f"{title} programs", "Exports to .pte"]


def percent(part: int, whole: int) -> str:
    """The tracker's rounded share of its cells (as published there: 0% when it rounds to 0)."""
    return f"{round(100 * part / whole)}%" if whole else "-"


def share_percent(share: float | None, missing: str = NOT_APPLICABLE) -> str:
    """A share (0..1) of a blocker or a what-if: "<1%" rather than a misleading "0%"."""
    if share is None:
        return missing
    text = f"{round(100 * share)}%"
    return "<1%" if text == "0%" and share > 0 else text


def milliseconds(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"


def _share_text(column: Column, counts: bool) -> str:
    share = column.share
    if column.kind not in (Kind.VALUE, Kind.BOUNDED) or share is None:
        return _PLAIN[column.kind]
    bound = f"{BOUND} " if column.kind is Kind.BOUNDED else ""
    shown = percent(share.part, share.total)
    return f"{bound}{share.part} / {share.total} ({shown})" if counts else f"{bound}{shown}"


def ops_text(column: Column) -> str:
    return _share_text(column, counts=True)


def heavy_text(column: Column) -> str:
    return _share_text(column, counts=False)


def programs_text(column: Column) -> str:
    if column.kind is Kind.VALUE:
        return str(column.count)
    if column.kind is Kind.UNKNOWN:
        return f"? ({column.count} groups)"
    return _PLAIN[column.kind]


def export_text(column: Column) -> str:
    if column.kind is Kind.VALUE:
        return DONE
    if column.kind is Kind.NEEDS_WORKER:
        if column.needs_worker_gb is not None:
            return f"needs ≥ {column.needs_worker_gb} GB worker"
        return "needs real weights"
    return _PLAIN[column.kind]


def _latency_text(latency: Latency) -> str:
    if latency.median_ms is None:
        return DONE
    text = f"{DONE} {milliseconds(latency.median_ms)}"
    if latency.speedup is not None:
        text += f" ({latency.speedup:.1f}×)"
    elif latency.baseline_waits:
        text += f" (baseline {PENDING})"
    return text


def device_text(column: Column) -> str:
    """A device cell: "✓ 12.3 ms (4.1×)", "~25 ms" (samples not stable), "❌ cause", "⏳", "no device"."""
    if column.kind is Kind.VALUE and column.latency is not None:
        return _latency_text(column.latency)
    if column.kind is Kind.UNSTABLE and column.latency is not None and column.latency.median_ms is not None:
        return f"{ABOUT}{milliseconds(column.latency.median_ms)}"
    if column.kind is Kind.FAILED:
        return f"{FAILED} {column.cause or 'failed'}"
    if column.kind is Kind.NO_DEVICE:
        return NO_DEVICE
    return _PLAIN[column.kind]


def device_hint(device_class: str, column: Column) -> str:
    """A device column's tooltip: its class, and for a latency that is not stable its spread."""
    latency = column.latency
    if column.kind is Kind.UNSTABLE and latency is not None and latency.cv is not None:
        return f"{device_class}: samples not stable (CV {latency.cv:.0%}), no speed-up"
    return device_class


def coverage_texts(view: CellView) -> list[str]:
    """The four coverage columns' texts; a slow result whose longer re-run waits ends with ⏳."""
    texts = [
        ops_text(view.ops),
        heavy_text(view.heavy),
        programs_text(view.programs),
        export_text(view.export),
    ]
    if view.rerun:
        texts[-1] = f"{texts[-1]} {PENDING}"
    if view.reused_from is not None:
        texts[-1] = f"{texts[-1]} {REUSED}"
    return texts


def reused_label(source: ReusedFrom) -> str:
    """Where a reused cell's result came from: "↺ reused from sweep #3 (job 17)"."""
    return f"{REUSED} reused from sweep #{source.sweep_id} (job {source.job_id})"


def pending_label(view: CellView) -> str:
    """The first column of a cell with no result yet: whether its job runs or waits."""
    return f"{PENDING} {'running' if view.running else 'queued'}"


def rerun_hint(view: CellView) -> str:
    """What a measured cell's pending re-run is: why it waits, else which re-run and whether it runs."""
    if view.waiting is not None:
        return view.waiting
    state = "running" if view.running else "queued"
    if view.memory_class_gb is not None:
        return f"real-weight re-run on a ≥ {view.memory_class_gb} GB worker {state}"
    return f"longer re-run {state}"


def hint(column: Column) -> str | None:
    """One line on what the column shows: its cause, else what its kind means."""
    return column.cause or KIND_HINTS.get(column.kind)


def view_row(view: CellView) -> list[str]:
    return [view.policy, *coverage_texts(view)]


def row(doc: ResultDocument) -> list[str]:
    """The tracker's row of one result document."""
    return view_row(document_view(doc))


def export_cell(doc: ResultDocument) -> str:
    return export_text(document_view(doc).export)


def cause_line(doc: ResultDocument) -> str | None:
    """The one-line cause of the first stage that did not finish, for the row's footnote."""
    return doc.cause()


def markdown_table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def analyze_output(doc: ResultDocument) -> str:
    """What ``coverfarm analyze`` prints without ``--json``: the row, then its cause when there is one."""
    text = markdown_table(columns(doc.backend), [row(doc)])
    cause = cause_line(doc)
    return f"{text}\n\n{cause}" if cause else text
