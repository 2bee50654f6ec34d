"""What the grid shows of a sweep and its cells: each cell's view (``coverfarm.cell_view``, built by
``orchestrator.sweeps.cell_views``) laid out for a live page. The texts come from coverfarm.tracker; this
module adds only what a page needs on top: a colour tone per column, decided by the column's kind, the
clock of what is running (⏳ and since when), and the device column, one per cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from coverfarm import device_classes, tracker
from coverfarm.cell_build import DeviceInput
from coverfarm.cell_view import CellView, Column, Kind
from coverfarm.numerics import NumericsRun
from coverfarm.profile import ProfileRun
from coverfarm.result import ResultDocument, StageResult
from coverfarm.stacks import DEFAULT_STACK
from dashboard.device_details import Artifacts, DeviceDetails, artifacts, device_details
from orchestrator.models import JobStatus
from orchestrator.reports.numerics import CellNumerics, run_heading
from orchestrator.reports.profiles import CellProfile
from orchestrator.sweeps.schemas import CellPublic, SweepSummary

DEVICE_COLUMN = "Device runs"
# The progress count of the index and the grid, in this order; "done" is the API's "ok".
PROGRESS = (
    ("done", "ok"),
    ("running", "running"),
    ("queued", "queued"),
    ("slow", "slow"),
    ("failed", "failed"),
)
# CSS class per kind (dashboard/static/style.css); shares have their own tones (share_tone).
KIND_TONES = {
    Kind.VALUE: "ok",
    Kind.BOUNDED: "plain",
    Kind.UNKNOWN: "plain",
    Kind.SLOW: "slow",
    Kind.NEEDS_WORKER: "failed",
    Kind.FAILED: "failed",
    Kind.PENDING: "pending",
    Kind.NOT_APPLICABLE: "muted",
    Kind.NO_DEVICE: "muted",
    Kind.NO_WORKER: "muted",
    Kind.UNSTABLE: "unstable",
}
# Of a cell's device classes, the first kind found here gives the device column its tone.
DEVICE_TONE_ORDER = (Kind.FAILED, Kind.VALUE, Kind.UNSTABLE, Kind.PENDING)


def backend_columns(backend: str) -> list[str]:
    """The tracker's columns of one backend (without "Policy"), then the device column."""
    return [*tracker.columns(backend)[1:], DEVICE_COLUMN]


def backend_classes(classes: Sequence[str], backend: str) -> list[str]:
    """The device classes, of ``classes``, that run ``backend``: those its device column heading and its
    cells name (a malformed name runs none)."""
    return [name for name in classes if _runs(name, backend)]


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
        return tracker.NOT_APPLICABLE
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(number) >= scale:
            return f"{number / scale:.3g} {unit}"
    return f"{number:g}"


def tone(column: Column) -> str:
    """The column's CSS class: a share's tone where it shows a share, else its kind's."""
    if column.kind in (Kind.VALUE, Kind.BOUNDED) and column.share is not None:
        return share_tone(column.share.fraction)
    if column.kind is Kind.VALUE and column.count is not None:
        return "plain"
    return KIND_TONES[column.kind]


@dataclass(frozen=True)
class Field:
    """One column of one cell as the grid shows it."""

    text: str
    tone: str  # CSS class: full/high/mid/low (shares), ok/slow/failed/pending/muted/plain/unstable
    share: float | None = None  # 0..1, colours the background
    hint: str | None = None  # tooltip
    since: datetime | None = None  # ⏳ clock start: the page counts up from here
    kind: Kind = Kind.VALUE
    flagged: bool = False  # a device run whose runtime is not the stack's release (outlined)


@dataclass(frozen=True)
class GridCell:
    id: int
    policy: str
    backend: str
    stack: str
    state: str
    pending: bool
    fields: list[Field]
    heavy_share: float | None  # heavy math on the backend, for the heatmap
    heavy_text: str
    heavy_kind: Kind
    summary: str  # one line for screen readers and the heatmap's tooltip
    devices: dict[str, Field] = field(default_factory=dict)  # each device class's column on its own


def _field(column: Column, text: str) -> Field:
    share = column.share.fraction if column.share is not None else None
    return Field(text, tone(column), share, tracker.hint(column), None, column.kind)


def device_class_field(device_class: str, column: Column) -> Field:
    """One device class's column of a cell, on its own (the progress view has a column per class)."""
    hint = tracker.device_hint(device_class, column)
    tone = KIND_TONES[column.kind]
    text = tracker.device_text(column, compact=True)
    return Field(text, tone, None, hint, None, column.kind, column.off_release is not None)


def device_fields(view: CellView) -> dict[str, Field]:
    """Each of the cell's device classes' columns on its own, by class, in the sweep's order."""
    return {name: device_class_field(name, column) for name, column in view.devices.items()}


def _runs(device_class: str, backend: str) -> bool:
    try:
        return device_classes.backend_of(device_class) == backend
    except ValueError:
        return False


def device_field(view: CellView, per_class: dict[str, Field] | None = None) -> Field:
    """The device column: one "class: text" per device class of the sweep that runs the cell's backend
    (the text alone for one), from ``per_class`` (``device_fields``, made here when not given); the
    classes of other backends are left out, and where no class runs it the column reads one "-"."""
    if not view.devices:
        return _field(view.device, tracker.device_text(view.device, compact=True))
    per_class = device_fields(view) if per_class is None else per_class
    own = backend_classes(list(per_class), view.backend)
    if not own:  # no class of the sweep runs this backend: one "-", not "class: -" per other backend's
        return next(iter(per_class.values()))
    per_class = {name: per_class[name] for name in own}
    if len(per_class) == 1:
        shown = "; ".join(field_.text for field_ in per_class.values())
    else:
        shown = "; ".join(f"{name}: {field_.text}" for name, field_ in per_class.items())
    kinds = {field_.kind for field_ in per_class.values()}
    kind = next((kind for kind in DEVICE_TONE_ORDER if kind in kinds), Kind.NOT_APPLICABLE)
    hint = ", ".join(field_.hint or "" for field_ in per_class.values())
    flagged = any(field_.flagged for field_ in per_class.values())
    return Field(shown, KIND_TONES[kind], None, hint, None, kind, flagged)


def coverage_fields(view: CellView) -> list[Field]:
    """The four coverage columns of a cell as the grid shows them."""
    texts = tracker.coverage_texts(view)
    fields = [_field(column, text) for column, text in zip(view.coverage, texts, strict=True)]
    if view.rerun:
        # A slow result whose longer re-run is queued or running, or a fake-weight one whose real-weight
        # re-run is: its numbers stand, its export waits.
        shade = "slow" if view.memory_class_gb is None else tone(view.export)
        fields[-1] = Field(texts[-1], shade, None, tracker.rerun_hint(view), view.since, view.export.kind)
    elif view.pending and not view.measured and view.waiting is None:
        label = tracker.pending_label(view)
        fields[0] = Field(label, "pending", None, tracker.BEING_MEASURED, view.since, Kind.PENDING)
    if view.reused_from is not None and not view.rerun:
        export = fields[-1]
        hint = "; ".join(filter(None, [tracker.reused_label(view.reused_from), export.hint]))
        fields[-1] = Field(export.text, export.tone, export.share, hint, export.since, export.kind)
    return fields


class CellRow(Protocol):
    """What a grid cell reads off a stored cell beside its view: the row itself
    (``orchestrator.models.Cell``, its state the one kept on it) or the API's copy of it (the cell page's
    ``CellPublic``)."""

    @property
    def id(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def stack(self) -> str: ...
    @property
    def state(self) -> JobStatus: ...
    @property
    def pending(self) -> bool: ...


def grid_cell(cell: CellRow, view: CellView) -> GridCell:
    devices = device_fields(view)
    fields = [*coverage_fields(view), device_field(view, devices)]
    title = tracker.backend_title(cell.backend)
    columns = backend_columns(cell.backend)
    summary = f"{cell.policy} on {title}: " + "; ".join(
        f"{column} {field_.text}" for column, field_ in zip(columns, fields, strict=True)
    )
    return GridCell(
        id=cell.id,
        policy=cell.policy,
        backend=cell.backend,
        stack=cell.stack,
        state=cell.state.value,
        pending=cell.pending,
        fields=fields,
        heavy_share=fields[1].share if view.measured else None,
        heavy_text=fields[1].text,
        heavy_kind=view.heavy.kind,
        summary=summary,
        devices=devices,
    )


@dataclass(frozen=True)
class GridRow:
    policy: str
    cells: list[GridCell | None]  # one per backend (None: not in the sweep)
    stack: str  # the stack of the row's cells
    span: int = 1  # rows the policy's header spans: the stacks compared (0: the row above has it)


@dataclass(frozen=True)
class Grid:
    backends: list[str]
    policies: list[str]  # of the rows shown
    rows: list[GridRow]  # per policy, and per stack shown under it when stacks are compared
    cells: list[GridCell] = field(default_factory=list)  # the cells shown
    stacks: list[str] = field(default_factory=list)  # the sweep's, oldest release first
    shown: list[str] = field(default_factory=list)  # the stacks shown: one, or several side by side

    @property
    def compare(self) -> bool:
        return len(self.shown) > 1

    @property
    def flagged(self) -> bool:
        """Whether a cell shown has a device run whose runtime is not its stack's release."""
        return any(field_.flagged for cell in self.cells for field_ in cell.fields)

    @property
    def candidate_fix(self) -> bool:
        """Whether a cell shown has a device run whose runtime was built with a candidate fix."""
        return any(tracker.CANDIDATE_FIX in field_.text for cell in self.cells for field_ in cell.fields)

    @property
    def workaround(self) -> bool:
        """Whether a cell shown has a device run of a bundle lowered with a workaround."""
        return any(tracker.WORKAROUND in field_.text for cell in self.cells for field_ in cell.fields)


def grid(
    backends: list[str],
    cells: Sequence[CellRow],
    views: dict[int, CellView],
    stacks: list[str] | None = None,
    shown: list[str] | None = None,
) -> Grid:
    """Rows of some of a sweep's cells, one per policy in cell order (and per stack shown under it when
    there are several) and a column per one of the sweep's ``backends``. ``cells``: their stored rows;
    ``views``: their views by cell id, each built once (orchestrator.sweeps.cell_views.views_of);
    ``stacks``: the sweep's, oldest release first (orchestrator.sweeps.cell_views.release_order);
    ``shown``: those to show (default: the first)."""
    stacks = stacks or list(dict.fromkeys(cell.stack for cell in cells)) or [DEFAULT_STACK]
    shown = shown or stacks[:1]
    by_key = {
        (cell.policy, cell.backend, cell.stack): grid_cell(cell, views[cell.id])
        for cell in cells
        if cell.stack in shown
    }
    policies = list(dict.fromkeys(cell.policy for cell in cells))
    rows = [
        GridRow(p, [by_key.get((p, backend, stack)) for backend in backends], stack, 0 if i else len(shown))
        for p in policies
        for i, stack in enumerate(shown)
    ]
    return Grid(backends, policies, rows, list(by_key.values()), stacks, shown)


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
    stack: str | None = None  # the cell's stack, where its sweep has several
    profiles: list[ProfileView] = field(default_factory=list)  # where the time goes, per device class
    numerics: list[NumericsView] = field(default_factory=list)  # which op goes wrong, per device class
    devices: list[DeviceDetails] = field(default_factory=list)  # its runs and baselines, per class
    artifacts: Artifacts | None = None  # the bundle and its programs, as links


@dataclass(frozen=True)
class ProfileView:
    """A device class's profile of the cell, as its details show it (texts from ``coverfarm.tracker``)."""

    device_class: str
    profile: ProfileRun
    line: str | None
    split: list[list[str]]
    ops: list[list[str]]


@dataclass(frozen=True)
class NumericsView:
    """A device class's numerics run of the cell, as its details show it (texts from
    ``coverfarm.tracker``)."""

    device_class: str
    heading: str
    numerics: NumericsRun
    line: str | None
    rows: list[list[str]]


def numerics_views(cells: list[CellNumerics]) -> list[NumericsView]:
    views = []
    for n in cells:
        summary = n.numerics.summary
        views.append(
            NumericsView(
                n.device_class,
                run_heading(n.numerics),
                n.numerics,
                tracker.numerics_line(summary).replace("`", "") if summary else None,
                tracker.numerics_rows(summary) if summary else [],
            )
        )
    return views


def profile_views(profiles: list[CellProfile]) -> list[ProfileView]:
    views = []
    for p in profiles:
        summary = p.profile.summary
        views.append(
            ProfileView(
                p.device_class,
                p.profile,
                tracker.profile_line(summary) if summary else None,
                tracker.profile_split(summary) if summary else [],
                tracker.profile_op_rows(summary, p.blockers) if summary else [],
            )
        )
    return views


def details(
    cell: CellPublic, view: CellView, several_stacks: bool = False, devices: Sequence[DeviceInput] = ()
) -> Details:
    doc = cell.result.document if cell.result is not None else None
    stages: list[Stage] = []
    blockers: list[BlockerRow] = []
    if doc is not None:
        stages = [Stage("trace", doc.trace), Stage("partition", doc.partition), Stage("export", doc.export)]
        total = doc.heavy_macs.total
        blockers = [
            BlockerRow(
                b.op, b.reason, b.count, b.macs, tracker.share_percent(b.macs / total if total else None)
            )
            for b in doc.blockers
        ]
    # A cancelled cell's details say so in their own words; they have no error to show.
    cause = view.cause if view.measured or not view.cancelled else None
    stack = cell.stack if several_stacks else None
    tones = {name: KIND_TONES[column.kind] for name, column in view.devices.items()}
    ours = [
        d
        for d in devices
        if d.device_class in view.devices and device_classes.backend_of(d.device_class) == cell.backend
    ]
    shown = device_details(ours, view.devices, tones)
    return Details(
        cell, grid_cell(cell, view), doc, stages, blockers, cause, view.command, stack,
        devices=shown, artifacts=artifacts(doc),
    )  # fmt: skip
