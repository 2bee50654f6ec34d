"""Build a cell's view (``coverfarm.cell_view.CellView``), the one place that decides what each column of
a cell holds: from its validated result document, what its CPU jobs say, and per device class its run,
its eager baseline and its device job.

The orchestrator loads those from its tables (``orchestrator.sweeps.cell_views``); the CLI has a result
document only (``document_view``). No torch, no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from coverfarm import device_classes
from coverfarm.baseline import BaselineResult, speedup
from coverfarm.cell_view import CellView, Column, Kind, Latency, OffRelease, Share
from coverfarm.device_result import DeviceResult
from coverfarm.latency_interval import interval_of
from coverfarm.result import Options, ResultDocument, StageStatus, error_line
from coverfarm.stacks import DEFAULT_STACK

PENDING_STATES = ("queued", "running")  # job statuses (orchestrator.models.JobStatus) still to end
NO_BUNDLE = "no bundle to run"
CANCELLED = "cancelled"


@dataclass(frozen=True)
class CpuJobs:
    """What a cell's CPU jobs say: the state rule's answer (``orchestrator.jobs.cell_state``) and the
    latest."""

    pending: bool = False
    cancelled: bool = False
    running: bool = False  # the latest CPU job is running
    since: datetime | None = None  # when it started
    cause: str | None = None  # why the latest ended as it did: its error's line, else its status reason
    # Why the latest, queued, waits: no live worker of the cell's stack or of its memory class
    # ("waiting for a worker of stack et-1.4.1", "waiting for a ≥ 64 GB worker of stack et-1.5.1").
    waiting: str | None = None
    memory_class_gb: int | None = None  # the pending latest's memory class: a real-weight re-run


@dataclass(frozen=True)
class DeviceJob:
    status: str  # a job status (orchestrator.models.JobStatus value)
    cause: str | None = None  # its error's line, else its status reason


@dataclass(frozen=True)
class DeviceInput:
    """One device class of the cell's sweep: what is stored and pending for the cell on it."""

    device_class: str
    run: DeviceResult | None = None
    baseline: BaselineResult | None = None
    baseline_waits: bool = False  # the baseline job is queued or running
    job: DeviceJob | None = None  # the bundle-run job, once the bundle exists
    enrolled: bool = False  # a runner that is not revoked serves the class
    run_runner_id: int | None = None  # the runners that reported the run and the baseline, as stored
    run_reused: bool = False  # the run was taken from a cell of the same reuse key (a reuse_device sweep)
    baseline_runner_id: int | None = None


@dataclass(frozen=True)
class Cell:
    policy: str
    backend: str
    options: Options
    doc: ResultDocument | None = None
    cpu: CpuJobs = field(default_factory=CpuJobs)
    devices: list[DeviceInput] = field(default_factory=list)
    stack: str = DEFAULT_STACK

    @property
    def release(self) -> str | None:
        """The stack's executorch, as the cell's result recorded it (coverfarm.versions)."""
        return self.doc.versions.get("executorch") if self.doc is not None else None


def _number(value: float) -> str:
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def analyze_command(policy: str, backend: str, options: Options, weights_used: str | None = None) -> str:
    """``coverfarm analyze`` measuring the cell again as it was measured: each option that differs from
    its default (the CLI's defaults are ``Options``'), the bound and the lowering always (so the command
    holds whatever the defaults become), and the weights the result was measured with (``auto``
    decides by the worker's memory, so a command run elsewhere must say which)."""
    defaults = Options()
    parts = ["coverfarm analyze", f"--policy {policy}", f"--backend {backend}"]
    parts.append(f"--timeout {_number(options.timeout_s)}")
    if options.seed != defaults.seed:
        parts.append(f"--seed {options.seed}")
    if options.checkpoint is not None:
        parts.append(f"--checkpoint {options.checkpoint}")
    if not options.constant_prop:
        parts.append("--no-constant-prop")
    parts.append(f"--lowering {options.lowering}")
    if options.frames != defaults.frames:
        parts.append(f"--frames {options.frames}")
    weights = weights_used or options.weights
    if weights != defaults.weights:
        parts.append(f"--weights {weights}")
    if options.force_fp16:
        parts.append("--force-fp16")
    parts.extend(f"--workaround {name}" for name in options.workarounds)
    return " ".join([*parts, "--json"])


def _share(total: int | None, on_backend: int | None, supported: int | None, command: str) -> Column:
    if total is None:
        return Column(Kind.FAILED, command=command)
    if on_backend is not None:
        return Column(Kind.VALUE, share=Share(on_backend, total), command=command)
    if supported is not None:
        return Column(Kind.BOUNDED, share=Share(supported, total), command=command)
    return Column(Kind.FAILED, command=command)


def _programs(doc: ResultDocument, command: str) -> Column:
    if doc.programs.count is not None:
        return Column(Kind.VALUE, count=doc.programs.count, command=command)
    if doc.programs.connected_groups is not None:
        return Column(Kind.UNKNOWN, count=doc.programs.connected_groups, command=command)
    return Column(Kind.FAILED, command=command)


def _export(doc: ResultDocument, cpu: CpuJobs, command: str) -> Column:
    """The export column; it carries the row's cause, as the tracker's footnote does."""
    since = cpu.since  # of a pending longer re-run
    cause = doc.cause()
    status = doc.export.status
    if status is StageStatus.OK:
        return Column(Kind.VALUE, cause=cause, since=since, command=command)
    if status is StageStatus.SLOW or doc.partition.status is StageStatus.SLOW:
        return Column(Kind.SLOW, cause=cause, since=since, command=command)
    weights = doc.weights
    if status is StageStatus.NOT_RUN and weights is not None and weights.mode == "fake":
        # Measured with fake weights (the policy does not fit this worker): export needs a bigger one.
        return Column(
            Kind.NEEDS_WORKER,
            needs_worker_gb=weights.needs_worker_gb,
            cause=cause,
            since=since,
            command=command,
        )
    return Column(Kind.FAILED, cause=cause, since=since, command=command)


def off_release(run: DeviceResult, release: str | None) -> OffRelease | None:
    """The run's runtime when it is known and is not ``release`` (the stack's executorch), else None."""
    identity = run.runtime_identity
    if identity is None or identity.version is None or release is None or identity.version == release:
        return None
    return OffRelease(runtime=identity.version, release=release, note=identity.note)


def _run(device: DeviceInput, release: str | None) -> Column:
    run, baseline = device.run, device.baseline
    assert run is not None
    flag = off_release(run, release)
    if run.status != "ok":
        cause = run.failure.short_cause if run.failure else error_line(run.error)
        return Column(Kind.FAILED, cause=cause or "failed", off_release=flag)
    latency = run.latency
    if latency is None:
        return Column(Kind.VALUE, latency=Latency(None), off_release=flag)
    # Judged now from the stored replicas (coverfarm.latency_interval), whatever rules it was timed under.
    judged = interval_of(latency)
    waits = baseline is None and device.baseline_waits
    # Only from two measurements of one runner on one host (coverfarm.baseline.speedup).
    verdict = speedup(baseline, run, device.baseline_runner_id, device.run_runner_id)
    timed = Latency(
        judged.figure_ms, verdict.value, waits, latency.cv, judged.low_ms, judged.high_ms, judged.replicas,
        verdict.low, verdict.high, verdict.narrow,
    )  # fmt: skip
    why = []
    if judged.reason is not None:
        why.append(f"latency not known within ±{judged.width:.0%}: {judged.reason}")
    if not verdict.narrow and not waits:
        lead = f"speed-up not known within ±{judged.width:.0%}: " if verdict.allowed else "no speed-up: "
        why.append(lead + "; ".join(verdict.reasons))
    why += verdict.notes
    kind = Kind.VALUE if judged.narrow else Kind.UNSTABLE
    return Column(kind, latency=timed, cause="; ".join(why) or None, off_release=flag)


def _device(cell: Cell, device: DeviceInput) -> Column:
    if device_classes.backend_of(device.device_class) != cell.backend:
        return Column(Kind.NOT_APPLICABLE, cause=f"{device.device_class} runs another backend")
    if device.run is not None:
        identity = device.run.runtime_identity
        patches = tuple(identity.patches) if identity is not None else ()
        return replace(
            _run(device, cell.release),
            reused=device.run_reused,
            patches=patches,
            workarounds=cell.options.workarounds,
        )
    job = device.job
    if job is None and not cell.cpu.pending:
        return Column(Kind.NOT_APPLICABLE, cause=NO_BUNDLE)
    if job is not None and job.status not in PENDING_STATES:
        if job.status == CANCELLED:
            return Column(Kind.NOT_APPLICABLE, cause=CANCELLED)
        return Column(Kind.FAILED, cause=job.cause or "failed")
    # The bundle is still being made, or its run is queued or running.
    return Column(Kind.PENDING) if device.enrolled else Column(Kind.NO_DEVICE)


def device_columns(cell: Cell) -> dict[str, Column]:
    """The cell's column per device class of its sweep, in the sweep's order."""
    return {device.device_class: _device(cell, device) for device in cell.devices}


def _measured(cell: Cell, doc: ResultDocument, command: str) -> CellView:
    return CellView(
        policy=cell.policy,
        backend=cell.backend,
        ops=_share(doc.ops.total, doc.ops.on_backend, doc.ops.supported, command),
        heavy=_share(doc.heavy_macs.total, doc.heavy_macs.on_backend, doc.heavy_macs.supported, command),
        programs=_programs(doc, command),
        export=_export(doc, cell.cpu, command),
        device=(
            Column(Kind.NO_DEVICE)
            if doc.export.status is StageStatus.OK
            else Column(Kind.NOT_APPLICABLE, cause=NO_BUNDLE)
        ),
        devices=device_columns(cell),
        cause=doc.cause(),
        pending=cell.cpu.pending,
        running=cell.cpu.running,
        since=cell.cpu.since,
        rerun=cell.cpu.pending,
        cancelled=cell.cpu.cancelled,
        measured=True,
        command=command,
        reused_from=doc.reused_from,
        waiting=cell.cpu.waiting,
        memory_class_gb=cell.cpu.memory_class_gb,
        stack=cell.stack,
        release=cell.release,
    )


def build(cell: Cell) -> CellView:
    used = cell.doc.weights.mode if cell.doc is not None and cell.doc.weights is not None else None
    command = analyze_command(cell.policy, cell.backend, cell.options, used)
    if cell.doc is not None:
        return _measured(cell, cell.doc, command)
    cpu = cell.cpu
    if cpu.pending and cpu.waiting is not None:
        # Queued where no live worker takes it, as a device column with no runner says "no device".
        column = Column(Kind.NO_WORKER, cause=cpu.waiting, command=command)
        device, cause = Column(Kind.PENDING), cpu.waiting
    elif cpu.pending:
        column = Column(Kind.PENDING, since=cpu.since, command=command)
        device, cause = Column(Kind.PENDING), None
    elif cpu.cancelled:
        column = Column(Kind.NOT_APPLICABLE, cause=CANCELLED, command=command)
        device, cause = Column(Kind.NOT_APPLICABLE, cause=CANCELLED), CANCELLED
    else:
        column = Column(Kind.FAILED, cause=cpu.cause, command=command)
        device, cause = Column(Kind.NOT_APPLICABLE, cause=NO_BUNDLE), cpu.cause
    return CellView(
        policy=cell.policy,
        backend=cell.backend,
        ops=column,
        heavy=column,
        programs=column,
        export=column,
        device=device,
        devices=device_columns(cell),
        cause=cause,
        pending=cpu.pending,
        running=cpu.running,
        since=cpu.since,
        cancelled=cpu.cancelled,
        command=command,
        waiting=cpu.waiting,
        memory_class_gb=cpu.memory_class_gb,
        stack=cell.stack,
    )


def document_view(doc: ResultDocument) -> CellView:
    """The view of a result document on its own (``coverfarm analyze``): nothing pending, no device."""
    return build(Cell(doc.policy, doc.backend, doc.options, doc))
