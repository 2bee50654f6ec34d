"""What the reports take from the device side besides the device columns (which are the cells' views):
latency samples for the diff, and the runtime build and eager baseline behind each device class."""

from __future__ import annotations

from sqlalchemy.orm import Session

from orchestrator.devices.grid import baselines, runs
from orchestrator.models import Sweep

# (policy, backend) -> {device class: latency samples in ms}
Samples = dict[tuple[str, str], dict[str, list[float]]]


def device_samples(session: Session, sweep: Sweep) -> Samples:
    """The latency samples of every successful device run of the sweep's cells."""
    by_id = {cell.id: cell for cell in sweep.cells}
    found: Samples = {}
    for (cell_id, device_class), run in runs(session, sweep.cells).items():
        if run.status == "ok" and run.latency is not None and run.latency.samples_ms:
            cell = by_id[cell_id]
            found.setdefault((cell.policy, cell.backend), {})[device_class] = list(run.latency.samples_ms)
    return found


def device_runtimes(session: Session, sweep: Sweep, backend: str) -> list[str]:
    """One line per device class that ran the backend's bundles: the board and the runtime build its
    runner probed (ExecuTorch version and registered backends, the native runner when configured), and
    the torch build and threads of the eager baseline the speed-ups divide."""
    by_id = {cell.id: cell for cell in sweep.cells}
    eager: dict[str, str] = {}
    for (cell_id, device_class), baseline in baselines(session, sweep.cells).items():
        if baseline.status == "ok" and by_id[cell_id].backend == backend:
            eager.setdefault(
                device_class,
                f"eager baseline: PyTorch {baseline.torch_version} on "
                f"{baseline.threads} CPU threads of a {device_class} host",
            )
    lines: dict[str, str] = {}
    for (cell_id, device_class), run in runs(session, sweep.cells).items():
        if by_id[cell_id].backend != backend or device_class in lines:
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
        if device_class in eager:
            parts.append(eager[device_class])
        lines[device_class] = f"{device_class}: {'; '.join(parts)}"
    return [lines[name] for name in sorted(lines)]
