"""What the reports take from the device side: the device columns' texts of a sweep's cells
(``device_cells``, from the cells' views), latency intervals for the diff, and the runtime build and eager
baseline behind each device class."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import runtime_repros, tracker
from coverfarm.cell_build import Cell as CellInput
from coverfarm.cell_build import device_columns
from coverfarm.device_result import short_message
from coverfarm.latency_interval import LatencyInterval, interval_of
from coverfarm.result import Options
from orchestrator.devices.grid import baselines, device_inputs, runs
from orchestrator.models import Cell, Sweep
from orchestrator.sweeps.service import cpu_jobs

# cell id -> {device class: its latency's figure and interval}
Intervals = dict[int, dict[str, LatencyInterval]]


def device_cells(session: Session, sweep: Sweep) -> dict[tuple[str, str], dict[str, str]]:
    """(policy, backend) → {device class: the tracker's device cell text}, for the sweep's classes."""
    inputs = device_inputs(session, sweep.cells, sweep.device_classes)
    texts = {}
    for cell in sweep.cells:
        typed = CellInput(cell.policy, cell.backend, Options(), cpu=cpu_jobs(cell), devices=inputs[cell.id])
        texts[(cell.policy, cell.backend)] = {
            name: tracker.device_text(column) for name, column in device_columns(typed).items()
        }
    return texts


def device_intervals(session: Session, sweep: Sweep) -> Intervals:
    """The latency of every successful device run of the sweep's cells, judged from its replicas."""
    found: Intervals = {}
    for (cell_id, device_class), run in runs(session, sweep.cells).items():
        if run.status == "ok" and run.latency is not None:
            found.setdefault(cell_id, {})[device_class] = interval_of(run.latency)
    return found


def _cells(sweep: Sweep, backend: str, stack: str | None) -> list[Cell]:
    return [cell for cell in sweep.cells if cell.backend == backend and stack in (None, cell.stack)]


def device_runtimes(session: Session, sweep: Sweep, backend: str, stack: str | None = None) -> list[str]:
    """One line per device class that ran the backend's bundles (of one stack's cells, when given): the
    board and the runtime build its runner probed (ExecuTorch version and registered backends, the
    native runner when configured), and the torch build and threads of the eager baseline the speed-ups
    divide."""
    cells = _cells(sweep, backend, stack)
    eager: dict[str, str] = {}
    for (_, device_class), baseline in baselines(session, cells).items():
        if baseline.status == "ok":
            eager.setdefault(
                device_class,
                f"eager baseline: PyTorch {baseline.torch_version} on "
                f"{baseline.threads} CPU threads of a {device_class} host",
            )
    lines: dict[str, str] = {}
    for (_, device_class), run in runs(session, cells).items():
        if device_class in lines:
            continue
        probe = run.probe
        board = probe.board if probe is not None else None
        parts = [(board.model or board.cpu_model if board else None) or "board not recorded"]
        if probe is not None and probe.executorch.version:
            backends = ", ".join(probe.executorch.registered_backends) or "none"
            parts.append(f"ExecuTorch runtime {probe.executorch.version} (backends: {backends})")
        native = probe.native_runtime if probe is not None else None
        if native is not None and native.path and native.status == "ok":
            parts.append(f"native runner {native.path}")
        if run.runtime_identity is not None and run.runtime_identity.note:
            parts.append(run.runtime_identity.note)
        if device_class in eager:
            parts.append(eager[device_class])
        lines[device_class] = f"{device_class}: {'; '.join(parts)}"
    return [lines[name] for name in sorted(lines)]


@dataclass(frozen=True)
class RuntimeIssue:
    """Device runs refused or crashed by the runtime with the same message (its check's file:line and
    words), the policies and device classes it hit, and the one-op repro that shows it, if any."""

    where: str
    op: str | None
    kind: str
    message: str
    policies: list[str]
    device_classes: list[str]
    repro: str | None


def runtime_issues(
    session: Session, sweep: Sweep, backend: str, stack: str | None = None
) -> list[RuntimeIssue]:
    cells = _cells(sweep, backend, stack)
    by_id = {cell.id: cell for cell in cells}
    found: dict[tuple[str, str], RuntimeIssue] = {}
    for (cell_id, device_class), run in sorted(runs(session, cells).items()):
        failure = run.failure
        cell = by_id[cell_id]
        if failure is None or failure.message is None:
            continue
        if failure.kind not in ("refused_at_load", "crashed"):
            continue
        where = short_message(failure.message)
        ref = runtime_repros.for_message(failure.message)
        issue = found.setdefault(
            (failure.kind, where),
            RuntimeIssue(
                where=where,
                op=ref.op if ref else runtime_repros.missing_operator(failure.message),
                kind=failure.kind,
                message=failure.message,
                policies=[],
                device_classes=[],
                repro=f"{ref.name} ({ref.seen})" if ref else None,
            ),
        )
        if cell.policy not in issue.policies:
            issue.policies.append(cell.policy)
        if device_class not in issue.device_classes:
            issue.device_classes.append(device_class)
    return list(found.values())
