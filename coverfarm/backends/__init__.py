"""The backends coverfarm measures, one module each (``coverfarm/backends/<name>.py``), and their
registry. No torch: every role imports this.

Each module holds one ``BACKEND = BackendInfo(...)``: what the farm, the runners and every renderer need
to know of a backend (its title, its partitioner as the report names it, the delegate its runtime
registers, the device classes it offers, the packages that carry it). Its lowering side (partitioner,
per-node support check and reasons, repro template) is the module of the same name under
``worker/lower/backends/``. The registry finds every module of this package, so adding a backend adds
two modules and touches no renderer, route or table (docs/design.md, "Adding a backend").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class BackendInfo:
    name: str  # the cell's backend, the last word of its device classes (coverfarm.device_classes)
    title: str  # as the tracker and every page write it ("XNNPACK")
    partitioner: str  # the partitioner expression a cell is lowered with, as the report names it
    runtime_backend: str  # the delegate's name in ExecuTorch's ``backend_registry``
    # True: it runs on the CPU through the runtime of the executorch wheel beside the runner, so a host
    # whose runtime registers ``runtime_backend`` offers the class ``cpu-<arch>-<name>``, and a cell of
    # another stack runs on runners of that stack. False: a GPU backend (classes named by the probe).
    cpu_class: bool
    # True: not a CPU backend, but its bundles also run on the Python runtime of the executorch wheel beside
    # the runner (VGF's), so a cell of another stack runs on runners of that stack, as a CPU class's does.
    wheel_runtime: bool = False
    # Distributions besides executorch that carry the backend, recorded in every result's versions.
    packages: tuple[str, ...] = ()
    # A partitioner option the cell's ``force_fp16`` maps to; False: the backend has none.
    takes_force_fp16: bool = False
    # Where the runtime picks the precision it computes in on the host that runs the bundle: the device
    # runner asks this (no torch) and records the answer with the run (``DeviceResult.precision``).
    runtime_precision: Callable[[], str] | None = None
    # The wheel's Python runtime loads its programs from the file's bytes instead of the file (mapped):
    # a backend whose delegate does not run from a mapped program (OpenVINO's, in executorch 1.5.1).
    load_from_bytes: bool = False


@cache
def registry() -> dict[str, BackendInfo]:
    """Every backend module of this package, by name, in name order."""
    found: dict[str, BackendInfo] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        info = importlib.import_module(f"{__name__}.{module}").BACKEND
        if not isinstance(info, BackendInfo) or info.name != module:
            raise TypeError(f"coverfarm.backends.{module}.BACKEND must be a BackendInfo named {module!r}")
        found[module] = info
    return found


def names() -> tuple[str, ...]:
    return tuple(registry())


def info(name: str) -> BackendInfo | None:
    return registry().get(name)


def title(name: str) -> str:
    """The backend's title, or its name for one coverfarm does not know (a stored cell of an old one)."""
    found = registry().get(name)
    return found.title if found else name


def runtime_backends() -> dict[str, str]:
    """Each backend's delegate name in ExecuTorch's runtime registry."""
    return {name: b.runtime_backend for name, b in registry().items()}


def runs_on_wheel(name: str) -> bool:
    """Whether the backend's bundles run on the Python runtime of the wheel beside the runner (every CPU
    backend's, and those that say so): the runtime is then the stack's own."""
    found = registry().get(name)
    return found is not None and (found.cpu_class or found.wheel_runtime)


def takes_force_fp16(name: str) -> bool:
    found = registry().get(name)
    return found is not None and found.takes_force_fp16
