"""What the grid shows of a sweep and its cells, built from the API's public views (SweepPublic, CellPublic).

The texts of the tracker's columns come from coverfarm.tracker, unchanged; this module adds only what a
live page needs on top: the cell's state (⏳ and since when), a colour tone per column, and the device
column, which says "no device" until device runners exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from coverfarm import tracker
from coverfarm.result import ResultDocument, StageResult, StageStatus
from orchestrator.models import JobStatus
from orchestrator.sweeps.schemas import CellPublic, JobPublic, SweepPublic, SweepSummary

NO_DEVICE = "no device"
NOT_APPLICABLE = "-"
DEVICE_COLUMN = "Device runs"
# The progress count of the index and the grid, in this order; "done" is the API's "ok".
PROGRESS = (
    ("done", "ok"),
    ("running", "running"),
    ("queued", "queued"),
    ("slow", "slow"),
    ("failed", "failed"),
)


def backend_columns(backend: str) -> list[str]:
    """The tracker's columns of one backend (without "Policy"), then the device column."""
    return [*tracker.columns(backend)[1:], DEVICE_COLUMN]


def share_tone(share: float | None) -> str:
    if share is None:
        return "plain"
    if share >= 0.995:
        return "full"
    if share >= 0.8:
        return "high"
    if share >= 0.4:
        return "mid"
    return "low"


def share_colour(share: float) -> str:
    """Red (nothing on the backend) through amber to green (all of it), for the heatmap and the grid."""
    hue = round(120 * max(0.0, min(1.0, share)))
    return f"hsl({hue} 62% 78%)"


def duration_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def compact(number: int | float | None) -> str:
    """Multiply-add counts as the eye reads them: 1.2 G rather than 1234567890."""
    if number is None:
        return NOT_APPLICABLE
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(number) >= scale:
            return f"{number / scale:.3g} {unit}"
    return f"{number:g}"


def percent_of(share: float | None) -> str:
    """A share (0..1) as the tracker prints it; "<1%" rather than a misleading "0%"."""
    if share is None:
        return NOT_APPLICABLE
    text = f"{round(100 * share)}%"
    return "<1%" if text == "0%" and share > 0 else text


def share_text(part: int, whole: int | None) -> str:
    text = tracker.percent(part, whole or 0)
    return "<1%" if text == "0%" and part > 0 else text


@dataclass(frozen=True)
class Field:
    """One column of one cell as the grid shows it."""

    text: str
    tone: str  # CSS class: full/high/mid/low (shares), ok/slow/failed/pending/muted/plain
    share: float | None = None  # 0..1, colours the background
    hint: str | None = None  # tooltip
    since: datetime | None = None  # ⏳ clock start: the page counts up from here


@dataclass(frozen=True)
class GridCell:
    id: int
    policy: str
    backend: str
    state: str
    pending: bool
    fields: list[Field]
    heavy_share: float | None  # heavy math on the backend, for the heatmap
    heavy_text: str
    summary: str  # one line for screen readers and the heatmap's tooltip


def document(cell: CellPublic) -> ResultDocument | None:
    return ResultDocument.model_validate(cell.result.document) if cell.result is not None else None


def clock_start(cell: CellPublic) -> datetime | None:
    """When the cell's current wait began: its running job's start (None while merely queued)."""
    if not cell.pending or not cell.jobs:
        return None
    latest = cell.jobs[-1]
    return latest.started_at if latest.status is JobStatus.RUNNING else None


def job_cause(job: JobPublic) -> str | None:
    """The last line of the error an engine raised (its exception), else why the job ended as it did."""
    if job.error and job.error.strip():
        return job.error.strip().splitlines()[-1]
    return job.status_reason


def _pending_label(cell: CellPublic) -> str:
    latest = cell.jobs[-1] if cell.jobs else None
    if latest is not None and latest.status is JobStatus.RUNNING:
        return f"{tracker.PENDING} running"
    return f"{tracker.PENDING} queued"


def _share(on_backend: int | None, supported: int | None, total: int | None) -> float | None:
    """What the column's text shows as a share: the tagged part, else the support check's bound."""
    part = on_backend if on_backend is not None else supported
    return part / total if part is not None and total else None


def _share_or_failed(text: str, share: float | None) -> str:
    return "failed" if text == tracker.FAILED else share_tone(share)


def _doc_fields(cell: CellPublic, doc: ResultDocument) -> list[Field]:
    ops_share = _share(doc.ops.on_backend, doc.ops.supported, doc.ops.total)
    macs_share = _share(doc.heavy_macs.on_backend, doc.heavy_macs.supported, doc.heavy_macs.total)
    ops = tracker.ops_cell(doc)
    heavy = tracker.heavy_math_cell(doc)
    programs = tracker.programs_cell(doc)
    export = tracker.export_cell(doc)
    bound = "partitioning did not finish: the support check's count, an upper bound"
    unknown = "partition count unknown; connected groups are not a bound"
    fields = [
        Field(ops, _share_or_failed(ops, ops_share), ops_share, bound if "≤" in ops else None),
        Field(heavy, _share_or_failed(heavy, macs_share), macs_share, bound if "≤" in heavy else None),
        Field(
            programs,
            "plain" if programs != tracker.FAILED else "failed",
            None,
            unknown if "?" in programs else None,
        ),
    ]
    if cell.pending:
        # A slow result whose longer re-run is queued or running: its numbers stand, its export waits.
        since = clock_start(cell)
        hint = f"longer re-run {'running' if since else 'queued'}"
        fields.append(Field(f"{export} {tracker.PENDING}", "slow", None, hint, since))
    else:
        tone = {"✓": "ok", "slow": "slow"}.get(export, "failed")
        fields.append(Field(export, tone, None, tracker.cause_line(doc)))
    device_ok = doc.export.status is StageStatus.OK
    fields.append(
        Field(NO_DEVICE, "muted", None, "no runner of this device class is registered")
        if device_ok
        else Field(NOT_APPLICABLE, "muted", None, "no bundle to run")
    )
    return fields


def _empty_fields(cell: CellPublic, width: int) -> list[Field]:
    if cell.pending:
        since = clock_start(cell)
        first = Field(_pending_label(cell), "pending", None, "being measured", since)
        return [first, *[Field(tracker.PENDING, "pending") for _ in range(width - 1)]]
    if cell.state is JobStatus.CANCELLED:
        return [Field(NOT_APPLICABLE, "muted", None, "cancelled") for _ in range(width)]
    cause = job_cause(cell.jobs[-1]) if cell.jobs else None
    return [
        *[Field(tracker.FAILED, "failed", None, cause) for _ in range(width - 1)],
        Field(NOT_APPLICABLE, "muted", None, "no bundle to run"),
    ]


def device_field(texts: dict[str, str]) -> Field:
    """The device column from orchestrator.devices.grid's texts, one "class: text" per device class."""
    shown = "; ".join(texts.values()) if len(texts) == 1 else "; ".join(f"{k}: {v}" for k, v in texts.items())
    values = set(texts.values())
    if any(text.startswith("❌") for text in values):
        tone = "failed"
    elif any(text.startswith("✓") for text in values):
        tone = "ok"
    else:
        tone = "pending" if tracker.PENDING in values else "muted"
    return Field(shown, tone, None, ", ".join(texts))


def grid_cell(cell: CellPublic, device_texts: dict[str, str] | None = None) -> GridCell:
    doc = document(cell)
    width = len(backend_columns(cell.backend))
    fields = _doc_fields(cell, doc) if doc is not None else _empty_fields(cell, width)
    if device_texts:
        fields[-1] = device_field(device_texts)
    heavy_share = fields[1].share if doc is not None else None
    heavy_text = fields[1].text
    title = tracker.backend_title(cell.backend)
    columns = backend_columns(cell.backend)
    summary = f"{cell.policy} on {title}: " + "; ".join(
        f"{column} {field_.text}" for column, field_ in zip(columns, fields, strict=True)
    )
    return GridCell(
        id=cell.id,
        policy=cell.policy,
        backend=cell.backend,
        state=cell.state.value,
        pending=cell.pending,
        fields=fields,
        heavy_share=heavy_share,
        heavy_text=heavy_text,
        summary=summary,
    )


@dataclass(frozen=True)
class Grid:
    sweep: SweepPublic
    backends: list[str]
    policies: list[str]
    rows: list[tuple[str, list[GridCell | None]]]  # per policy, one cell per backend (None: not in sweep)
    cells: list[GridCell] = field(default_factory=list)


def grid(sweep: SweepPublic, devices: dict[tuple[str, str], dict[str, str]] | None = None) -> Grid:
    """``devices``: orchestrator.devices.grid.device_cells of the sweep (its device columns)."""
    cells = {
        (cell.policy, cell.backend): grid_cell(cell, (devices or {}).get((cell.policy, cell.backend)))
        for cell in sweep.cells
    }
    rows = [(p, [cells.get((p, backend)) for backend in sweep.backends]) for p in sweep.policies]
    return Grid(sweep, sweep.backends, sweep.policies, rows, list(cells.values()))


def progress(summary: SweepSummary) -> list[tuple[str, int]]:
    """(label, cells) for done / running / queued / slow / failed, then cancelled when there are any."""
    counts = [(label, summary.counts.get(state, 0)) for label, state in PROGRESS]
    if summary.counts.get("cancelled"):
        counts.append(("cancelled", summary.counts["cancelled"]))
    return counts


@dataclass(frozen=True)
class Stage:
    name: str
    result: StageResult


@dataclass(frozen=True)
class BlockerRow:
    op: str
    reason: str
    count: int
    macs: int
    share: str  # of the policy's heavy math


@dataclass(frozen=True)
class Details:
    cell: CellPublic
    view: GridCell
    doc: ResultDocument | None
    stages: list[Stage]
    blockers: list[BlockerRow]
    cause: str | None
    repro: str


def repro_command(cell: CellPublic) -> str:
    options = cell.options
    parts = ["coverfarm analyze", f"--policy {cell.policy}", f"--backend {cell.backend}"]
    parts.append(f"--timeout {options.get('timeout_s', 900):g}")
    if options.get("seed"):
        parts.append(f"--seed {options['seed']}")
    if options.get("checkpoint"):
        parts.append(f"--checkpoint {options['checkpoint']}")
    if options.get("constant_prop") is False:
        parts.append("--no-constant-prop")
    # Always spelled out, so the command repeats the cell whatever the CLI's default is.
    parts.append(f"--lowering {options.get('lowering', 'stock')}")
    if options.get("frames", 16) != 16:
        parts.append(f"--frames {options['frames']}")
    return " ".join([*parts, "--json"])


def details(cell: CellPublic) -> Details:
    doc = document(cell)
    stages: list[Stage] = []
    blockers: list[BlockerRow] = []
    cause: str | None = None
    if doc is not None:
        stages = [Stage("trace", doc.trace), Stage("partition", doc.partition), Stage("export", doc.export)]
        blockers = [
            BlockerRow(b.op, b.reason, b.count, b.macs, share_text(b.macs, doc.heavy_macs.total))
            for b in doc.blockers
        ]
        cause = tracker.cause_line(doc)
    elif cell.jobs and not cell.pending and cell.state is not JobStatus.CANCELLED:
        cause = job_cause(cell.jobs[-1])
    return Details(cell, grid_cell(cell), doc, stages, blockers, cause, repro_command(cell))
