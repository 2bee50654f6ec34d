"""Every text a cell is shown with: the tracker issue's Coverage table, its columns and cell formats, the
device cells, shares and milliseconds, rendered from a cell's view (``coverfarm.cell_view``).

The one module that turns a cell's numbers into text: the CLI row, the report and the grid all call it,
and none of them reads text back (the grid's colours follow the column's kind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from coverfarm.cell_build import document_view
from coverfarm.cell_change import ColumnChange, Direction
from coverfarm.cell_view import CellView, Column, Kind, Latency, OffRelease
from coverfarm.device_result import UPSTREAM
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
SAME = "="  # a column that did not change from one stack to the next
MINUS = "−"  # a negative change (a plain "-" reads as "not applicable")
OFF_RELEASE = "⚠"  # a device run whose runtime is not the release of the cell's stack
CANDIDATE_FIX = "⚗"  # a device run whose runtime was built with upstream pull requests applied

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


def _device_text(column: Column) -> str:
    if column.kind is Kind.VALUE and column.latency is not None:
        return _latency_text(column.latency)
    if column.kind is Kind.UNSTABLE and column.latency is not None and column.latency.median_ms is not None:
        return f"{ABOUT}{milliseconds(column.latency.median_ms)}"
    if column.kind is Kind.FAILED:
        return f"{FAILED} {column.cause or 'failed'}"
    if column.kind is Kind.NO_DEVICE:
        return NO_DEVICE
    return _PLAIN[column.kind]


def device_text(column: Column) -> str:
    """A device cell: "✓ 12.3 ms (4.1×)", "~25 ms" (samples not stable), "❌ cause", "⏳", "no device";
    "⚠ runtime 1.5.0" after it when the run's runtime is not the stack's release, "⚗ with #22786" when
    it was built with a candidate fix, "↺" when the run is a stored one of the cell's reuse key."""
    text = _device_text(column)
    if column.off_release is not None:
        text += f" {off_release_label(column.off_release)}"
    if column.patches:
        text += f" {candidate_fix_label(column.patches)}"
    if column.reused:
        text += f" {REUSED}"
    return text


def off_release_label(flag: OffRelease) -> str:
    return f"{OFF_RELEASE} runtime {flag.runtime}"


def short_pull(pull: str) -> str:
    """``pytorch/executorch#22786`` as ``#22786``; another repository's in full."""
    repo, _, number = pull.rpartition("#")
    return f"#{number}" if repo == UPSTREAM else pull


def candidate_fix_label(patches: Sequence[str]) -> str:
    """``⚗ with #22786`` (pytorch/executorch's pull requests by number, another repository's in full)."""
    return f"{CANDIDATE_FIX} with {', '.join(short_pull(pull) for pull in patches)}"


def candidate_fix_hint(patches: Sequence[str]) -> str:
    return f"runtime built with {', '.join(patches)} applied (a candidate fix, not a release)"


def off_release_hint(flag: OffRelease) -> str:
    """Why a device cell is flagged: "ExecuTorch runtime 1.5.0, not the stack's release 1.5.1"."""
    return f"ExecuTorch runtime {flag.runtime}, not the stack's release {flag.release}"


def device_hint(device_class: str, column: Column) -> str:
    """A device column's tooltip: its class, for a latency that is not stable its spread, and a
    runtime that is not the stack's release."""
    latency = column.latency
    hint = device_class
    if column.kind is Kind.UNSTABLE and latency is not None and latency.cv is not None:
        hint = f"{device_class}: samples not stable (CV {latency.cv:.0%}), no speed-up"
    flag = column.off_release
    if flag is not None:
        hint = f"{hint}: {off_release_hint(flag)}" + (f" ({flag.note})" if flag.note else "")
    if column.patches:
        hint = f"{hint}: {candidate_fix_hint(column.patches)}"
    if column.reused:
        hint = f"{hint}: {REUSED} the stored run of an earlier cell of the same reuse key and bundle"
    return hint


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


# --- a cell's change from one stack to the next (coverfarm.cell_change) ---------------------------


def signed(number: int) -> str:
    return f"+{number}" if number > 0 else f"{MINUS}{-number}" if number < 0 else "0"


def points(fraction: float) -> str:
    """A share's change in percentage points: "+3 pp", "−<1 pp" (never a misleading "0 pp")."""
    rounded = round(100 * fraction)
    if rounded == 0 and fraction:
        return f"{'+' if fraction > 0 else MINUS}<1 pp"
    return f"{signed(rounded)} pp"


def _moved(change: ColumnChange, text: Callable[[Column], str]) -> str:
    return f"{text(change.before)} → {text(change.after)}"


def ops_change_text(change: ColumnChange) -> str:
    """The change of the ops on the backend and of all ops, "+7 / +8" ("+7" when all ops are as many),
    else what the column was and is."""
    if change.direction is Direction.SAME:
        return SAME
    if change.part is not None and change.total is not None:
        return signed(change.part) if change.total == 0 else f"{signed(change.part)} / {signed(change.total)}"
    return _moved(change, ops_text)


def heavy_change_text(change: ColumnChange) -> str:
    if change.direction is Direction.SAME:
        return SAME
    if change.fraction is not None:
        return points(change.fraction)
    return _moved(change, heavy_text)


def programs_change_text(change: ColumnChange) -> str:
    if change.direction is Direction.SAME:
        return SAME
    if change.part is not None:
        return signed(change.part)
    return _moved(change, programs_text)


def export_change_text(change: ColumnChange) -> str:
    return SAME if change.direction is Direction.SAME else _moved(change, export_text)


def device_change_text(change: ColumnChange) -> str:
    """ "25 ms → 21 ms" between two latencies, else what the device cell was and is."""
    if change.direction is Direction.SAME:
        return SAME
    old, new = (
        column.latency.median_ms if column.latency else None for column in (change.before, change.after)
    )
    if change.ratio is not None and old is not None and new is not None:
        return f"{milliseconds(old)} → {milliseconds(new)}"
    return _moved(change, device_text)


def coverage_change_texts(changes: list[ColumnChange]) -> list[str]:
    """The four coverage columns' changes (``RowChange.coverage``), in the tracker's column order."""
    ops, heavy, programs, export = changes
    return [
        ops_change_text(ops),
        heavy_change_text(heavy),
        programs_change_text(programs),
        export_change_text(export),
    ]
