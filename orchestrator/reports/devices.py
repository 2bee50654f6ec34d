"""What the reports take from the device side besides the cells' views (whose device columns
``orchestrator.sweeps.cell_views`` builds): latency intervals for the diff, judged from each run's
replicas, the runtime build and eager baseline behind each device class, and the runtime's refusals and
crashes, and the ops numerics runs name."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from coverfarm import runtime_repros
from coverfarm.device_words import RUNTIME_FAILURES, short_message
from coverfarm.latency_interval import LatencyInterval, interval_of
from coverfarm.numerics import op_words
from coverfarm.tracker import NUMERICS_REPRO
from orchestrator.devices.grid import baselines, runs
from orchestrator.models import Cell, Sweep

# The kind of a runtime issue found by a numerics run: an output that departs from eager first at an op.
DEPARTS = "departs_from_eager"

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
        parts = [(board.model or board.cpu_text() if board else None) or "board not recorded"]
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
    words), or whose numerics run named the same op as the first to depart from eager (``DEPARTS``);
    the policies and device classes it hit, and the one-op repro that shows it, if any."""

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
    for (cell_id, device_class), run in sorted(runs(session, cells).items()):
        summary = run.numerics.summary if run.numerics is not None else None
        first = summary.first if summary is not None else None
        if first is None:
            continue
        issue = found.setdefault(
            (DEPARTS, f"{first.op} on {first.where}"),
            RuntimeIssue(
                where=f"{first.program}: {op_words(first)}",
                op=first.op,
                kind=DEPARTS,
                message=f"max abs error {first.max_abs_error:.3g}, may be {first.bound:.3g}",
                policies=[],
                device_classes=[],
                repro=f"one-op bundle{'s' if len(first.examples) > 1 else ''} of its "
                f"{'ops' if first.span > 1 else 'op'}: `{NUMERICS_REPRO}` (not run on a device yet)",
            ),
        )
        if by_id[cell_id].policy not in issue.policies:
            issue.policies.append(by_id[cell_id].policy)
        if device_class not in issue.device_classes:
            issue.device_classes.append(device_class)
    return list(found.values())
