"""Every text a cell is shown with: the tracker issue's Coverage table, its columns and cell formats, the
device cells, shares and milliseconds, rendered from a cell's view (``coverfarm.cell_view``), a device
cell's profile (where the time goes, ``coverfarm.profile``) and its numerics run (which op goes wrong,
``coverfarm.numerics``).

The one module that turns a cell's numbers into text: the CLI row, the report and the grid all call it,
and none of them reads text back (the grid's colours follow the column's kind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from coverfarm import backends, device_words, workarounds
from coverfarm.cell_build import document_view
from coverfarm.cell_change import ColumnChange, Direction
from coverfarm.cell_view import CellView, Column, Kind, Latency, OffRelease
from coverfarm.device_result import UPSTREAM
from coverfarm.latency_interval import milliseconds_range
from coverfarm.numerics import NumericsSummary, growth, op_words
from coverfarm.profile import CPU, ProfileSummary, blockers_of
from coverfarm.result import Blocker, ResultDocument, ReusedFrom

DONE = "✓"
FAILED = "❌"
PENDING = "⏳"
SLOW = "slow"
BOUND = "≤"
ABOUT = "~"  # a latency or speed-up whose interval is wide or unknown
NOT_APPLICABLE = "-"
NO_DEVICE = "no device"
NO_WORKER = "no worker"
REUSED = "↺"  # the cell reused a stored result with its reuse key instead of lowering again
SAME = "="  # a column that did not change from one stack to the next
MINUS = "−"  # a negative change (a plain "-" reads as "not applicable")
OFF_RELEASE = "⚠"  # a device run whose runtime is not the release of the cell's stack
CANDIDATE_FIX = "⚗"  # a device run whose runtime was built with upstream pull requests applied
WORKAROUND = "⚒"  # a device run of a bundle lowered with workarounds (coverfarm.workarounds)

# What a column of each kind means, where the kind alone explains it (the grid's tooltips).
KIND_HINTS = {
    Kind.BOUNDED: "partitioning did not finish: the support check's count, an upper bound",
    Kind.UNKNOWN: "partition count unknown; connected groups are not a bound",
    Kind.NO_DEVICE: "no runner of this device class is registered",
    Kind.NO_WORKER: "no live CPU worker of the cell's stack and memory class",
    Kind.UNSTABLE: "the latency's interval (its replica medians) is wide, or it has too few replicas",
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
    return backends.title(backend)


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


def ratio(value: float) -> str:
    """A speed-up: one decimal from 1 up ("2.4"), two significant digits below ("0.02")."""
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def speedup_text(latency: Latency) -> str:
    """ "(2.4×, 2.2–2.6)" when its interval is narrow, "(~2.4×, 1.6–3.3 wide)" when it is not,
    "(~2.4×, no interval)" when a side has fewer than 2 replicas, "(baseline ⏳)", or nothing."""
    if latency.speedup is None:
        return f" (baseline {PENDING})" if latency.baseline_waits else ""
    shown = f"{ratio(latency.speedup)}×"
    if latency.speedup_low is None or latency.speedup_high is None:
        return f" ({ABOUT}{shown}, no interval)"
    span = f"{ratio(latency.speedup_low)}–{ratio(latency.speedup_high)}"
    return f" ({shown}, {span})" if latency.speedup_narrow else f" ({ABOUT}{shown}, {span} wide)"


def _latency_text(latency: Latency, known: bool) -> str:
    if latency.median_ms is None:
        return DONE
    figure = (
        f"{DONE} {milliseconds(latency.median_ms)}" if known else f"{ABOUT}{milliseconds(latency.median_ms)}"
    )
    return figure + speedup_text(latency)


def _device_text(column: Column, compact: bool) -> str:
    if column.kind in (Kind.VALUE, Kind.UNSTABLE) and column.latency is not None:
        return _latency_text(column.latency, column.kind is Kind.VALUE)
    if column.kind is Kind.FAILED:
        cause = column.cause or "failed"
        return f"{FAILED} {device_words.compact(cause) if compact else cause}"
    if column.kind is Kind.NO_DEVICE:
        return NO_DEVICE
    return _PLAIN[column.kind]


def device_text(column: Column, compact: bool = False) -> str:
    """A device cell: "✓ 12.3 ms (4.1×, 3.9–4.3)" (figure and speed-up known), "✓ 12.3 ms (~4.1×, 2.9–5.3
    wide)", "~25 ms" (its own interval wide or missing), "❌ cause", "⏳", "no device";
    "⚠ runtime 1.5.0" after it when the run's runtime is not the stack's release, "⚗ with #22786" when
    it was built with a candidate fix, "⚒ group_norm_4d" when its bundle was lowered with a workaround,
    "↺" when the run is a stored one of the cell's reuse key.
    ``compact`` (the grid's cells) cuts a failure's cause to the check that failed
    (``device_words.compact``): its tooltip (``device_hint``) carries it whole."""
    text = _device_text(column, compact)
    if column.off_release is not None:
        text += f" {off_release_label(column.off_release)}"
    if column.patches:
        text += f" {candidate_fix_label(column.patches)}"
    if column.workarounds:
        text += f" {workaround_label(column.workarounds)}"
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


def workaround_label(names: Sequence[str]) -> str:
    """``⚒ group_norm_4d``: the bundle was lowered with these graph rewrites (coverfarm.workarounds)."""
    return f"{WORKAROUND} {', '.join(names)}"


def workaround_hint(names: Sequence[str]) -> str:
    return "lowered with " + "; ".join(workarounds.described(names)) + ": not the stock lowering"


def candidate_fix_hint(patches: Sequence[str]) -> str:
    return f"runtime built with {', '.join(patches)} applied (a candidate fix, not a release)"


def off_release_hint(flag: OffRelease) -> str:
    """Why a device cell is flagged: "ExecuTorch runtime 1.5.0, not the stack's release 1.5.1"."""
    return f"ExecuTorch runtime {flag.runtime}, not the stack's release {flag.release}"


def interval_text(latency: Latency) -> str | None:
    """ "replica medians 30.9–31.3 ms (5 replicas)", or None without an interval."""
    if latency.low_ms is None or latency.high_ms is None:
        return None
    return (
        f"replica medians {milliseconds_range(latency.low_ms, latency.high_ms)} ({latency.replicas} replicas)"
    )


def device_hint(device_class: str, column: Column) -> str:
    """A device column's tooltip: its class, the latency's interval and jitter, why it has no narrow
    speed-up (the column's cause), and a runtime that is not the stack's release."""
    latency = column.latency
    parts = []
    if latency is not None and latency.median_ms is not None:
        count = f"{latency.replicas} replica{'' if latency.replicas == 1 else 's'}"
        figure = interval_text(latency) or f"no interval ({count})"
        parts.append(
            figure + (f", per-sample CV {latency.cv:.0%} (jitter)" if latency.cv is not None else "")
        )
    flag = column.off_release
    if flag is not None:
        parts.append(off_release_hint(flag) + (f" ({flag.note})" if flag.note else ""))
    if column.patches:
        parts.append(candidate_fix_hint(column.patches))
    if column.workarounds:
        parts.append(workaround_hint(column.workarounds))
    if column.cause and (latency is not None or column.kind is Kind.FAILED):
        parts.append(column.cause)
    if column.reused:
        parts.append(f"{REUSED} the stored run of an earlier cell of the same reuse key and bundle")
    return f"{device_class}: " + "; ".join(parts) if parts else device_class


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


# A device cell's profile (coverfarm/profile.py): where the profiled chunk's time went.


def profile_split(summary: ProfileSummary) -> list[list[str]]:
    """Rows (part, milliseconds, share) of a profiled chunk: each delegate, the CPU-left ops, the runtime
    between its instructions, the hand-over between programs, and the whole; each share of the chunk
    (of the programs' executions where the chunk's wall clock was not measured)."""
    whole = summary.chunk_ms if summary.chunk_ms is not None else summary.execute_ms

    def row(part: str, ms: float | None) -> list[str]:
        if ms is None:
            return [part, "not measured", NOT_APPLICABLE]
        return [part, milliseconds(ms), share_percent(ms / whole if whole else None)]

    rows = [row(f"{d.backend} ({d.calls} calls)", d.ms) for d in summary.delegates]
    rows += [row("CPU-left ops", summary.cpu_ops_ms), row("runtime between instructions", summary.runtime_ms)]
    rows.append(row("hand-over between programs", summary.handover_ms))
    rows.append(row("chunk" if summary.chunk_ms is not None else "programs' executions", whole))
    return rows


def profile_line(summary: ProfileSummary) -> str:
    """One line: the CPU's share of the profiled chunk and the split."""
    parts = [f"{d.backend} {milliseconds(d.ms)}" for d in summary.delegates]
    parts.append(f"CPU ops {milliseconds(summary.cpu_ops_ms)}")
    if summary.handover_ms is not None:
        parts.append(f"hand-over {milliseconds(summary.handover_ms)}")
    whole = summary.chunk_ms if summary.chunk_ms is not None else summary.execute_ms
    of = "chunk" if summary.share_of == "chunk" else "programs' executions"
    cpu = share_percent(summary.cpu_share)
    return f"{cpu} of the {of} on the CPU: {', '.join(parts)} of {milliseconds(whole)} (profiled, tracer on)"


def profile_op_rows(summary: ProfileSummary, blockers: list[Blocker]) -> list[list[str]]:
    """Rows (op, where, milliseconds, calls, blocker group) of the top ops by time; a CPU-left op names
    its blocker groups (op, reason) and whether their repro is ready."""
    rows = []
    for op in summary.top_ops:
        groups = blockers_of(op, blockers)
        linked = "; ".join(
            f"{g.reason} ({'repro ready' if g.repro_ready else 'no repro'})" for g in groups
        ) or (NOT_APPLICABLE if op.where != CPU else "no blocker group")
        rows.append([f"`{op.name}`", op.where, milliseconds(op.ms), str(op.calls), linked])
    return rows


# A device cell's numerics run (coverfarm/numerics.py): which op's output departs from eager first.

NUMERICS_REPRO = "python -m worker.repros.numerics RESULT.json OUT"


def error_figure(value: float) -> str:
    return f"{value:.3g}"


def numerics_line(summary: NumericsSummary) -> str:
    """One line: the first op whose output departs from eager beyond the tolerance, with its error; or
    that none does, with the largest error."""
    tolerance = f"atol {summary.atol:g}, rtol {summary.rtol:g}"
    first = summary.first
    if first is not None:
        return (
            f"first departs from eager: `{first.op}` {op_words(first).removeprefix(first.op + ' ')} "
            f"of {first.program} on {first.where}, max abs error {error_figure(first.max_abs_error)} "
            f"(may be {error_figure(first.bound)}: {tolerance})"
        )
    largest = summary.largest
    if largest is None:
        return f"no output was compared ({summary.grain})"
    return (
        f"no op departs from eager beyond {tolerance}; the largest error is "
        f"{error_figure(largest.max_abs_error)}, at `{largest.op}` of {largest.program}"
    )


def numerics_rows(summary: NumericsSummary) -> list[list[str]]:
    """Rows (program, op, where, max abs error, may be, departs) of how the error grows: each output
    whose error exceeds every one before it in its program (``coverfarm.numerics.growth``)."""
    return [
        [
            op.program,
            f"`{op.op}` {op_words(op).removeprefix(op.op + ' ')}",
            op.where,
            error_figure(op.max_abs_error),
            error_figure(op.bound),
            "departs" if op.departs else "within",
        ]
        for op in growth(summary)
    ]
