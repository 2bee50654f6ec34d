"""What the reports take from the device side besides the cells' views (whose device columns
``orchestrator.sweeps.cell_views`` builds): latency intervals for the diff, judged from each run's
replicas, the runtime build and eager baseline behind each device class, and the runtime's refusals and
crashes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import runtime_repros
from coverfarm.device_words import RUNTIME_FAILURES, short_message
from coverfarm.latency_interval import LatencyInterval, interval_of
from orchestrator.devices.grid import baselines, runs
from orchestrator.models import Cell, Sweep

# cell id -> {device class: its latency's figure and interval}
Intervals = dict[int, dict[str, LatencyInterval]]


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
        if failure.kind not in RUNTIME_FAILURES:
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
