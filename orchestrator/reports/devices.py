"""What the reports take from the device side: the device columns, latency samples and runtime builds.

The device package (``orchestrator.devices``) provides them; it is looked up at call time, so the
reports render without device columns, latency comparisons or runtime lines while the farm has no
device runners, and pick them up as soon as it does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from sqlalchemy.orm import Session

from orchestrator.models import Sweep

# (policy, backend) -> {device class: the device cell's text, as the tracker writes it}
DeviceColumns = dict[tuple[str, str], dict[str, str]]
# (policy, backend) -> {device class: latency samples in ms}
Samples = dict[tuple[str, str], dict[str, list[float]]]


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def device_columns(session: Session, sweep: Sweep) -> DeviceColumns | None:
    """``device_cells(session, sweep)`` of the device package, or None when it has none."""
    for name in ("orchestrator.devices.service", "orchestrator.devices.grid"):
        module = _module(name)
        device_cells: Callable[[Session, Sweep], DeviceColumns] | None = getattr(module, "device_cells", None)
        if device_cells is not None:
            return device_cells(session, sweep)
    return None


def _rows(session: Session, sweep: Sweep, query: str) -> Sequence[Any]:
    of_cells = getattr(_module("orchestrator.devices.repository"), query, None)
    if of_cells is None:
        return []
    rows: Sequence[Any] = of_cells(session, [cell.id for cell in sweep.cells])
    return rows


def _runs(session: Session, sweep: Sweep) -> Sequence[Any]:
    return _rows(session, sweep, "runs_of_cells")


def device_samples(session: Session, sweep: Sweep) -> Samples:
    """The latency samples of every successful device run of the sweep's cells."""
    by_id = {cell.id: cell for cell in sweep.cells}
    found: Samples = {}
    for run in _runs(session, sweep):
        samples = ((run.document or {}).get("latency") or {}).get("samples_ms")
        if run.status == "ok" and isinstance(samples, list) and samples:
            cell = by_id[run.cell_id]
            found.setdefault((cell.policy, cell.backend), {})[run.device_class] = [float(s) for s in samples]
    return found


def device_runtimes(session: Session, sweep: Sweep, backend: str) -> list[str]:
    """One line per device class that ran the backend's bundles: the board and the runtime build its
    runner probed (ExecuTorch version and registered backends, the native runner when configured), and
    the torch build and threads of the eager baseline the speed-ups divide."""
    by_id = {cell.id: cell for cell in sweep.cells}
    eager: dict[str, str] = {}
    for baseline in _rows(session, sweep, "baselines_of_cells"):
        document = baseline.document or {}
        if baseline.status == "ok" and by_id[baseline.cell_id].backend == backend:
            eager.setdefault(
                baseline.device_class,
                f"eager baseline: PyTorch {document.get('torch_version')} on "
                f"{document.get('threads')} CPU threads of a {baseline.device_class} host",
            )
    lines: dict[str, str] = {}
    for run in _runs(session, sweep):
        if by_id[run.cell_id].backend != backend or run.device_class in lines:
            continue
        probe = (run.document or {}).get("probe") or {}
        board = probe.get("board") or {}
        runtime = probe.get("executorch") or {}
        parts = [board.get("model") or board.get("cpu_model") or "board not recorded"]
        if runtime.get("version"):
            backends = ", ".join(runtime.get("registered_backends") or []) or "none"
            parts.append(f"ExecuTorch runtime {runtime['version']} (backends: {backends})")
        native = probe.get("native_runtime") or {}
        if native.get("path") and native.get("status") == "ok":
            parts.append(f"native runner {native['path']}")
        if run.device_class in eager:
            parts.append(eager[run.device_class])
        lines[run.device_class] = f"{run.device_class}: {'; '.join(parts)}"
    return [lines[name] for name in sorted(lines)]
