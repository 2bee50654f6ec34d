"""The lowering side of each backend, one module each (``worker/lower/backends/<name>.py``): its
partitioner, how its own per-node support check is asked for its reasons, and its repro template.

Each module holds one ``BACKEND = Backend(...)``, named as its contract module
``coverfarm/backends/<name>.py`` names it (title, runtime, device classes, packages). Nothing here
decides support itself (``worker.lower.backends.reasons``). A backend module imports nothing heavy at
import: its partitioner and the executorch modules it needs are imported when it is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coverfarm import backends
from coverfarm.errors import UserError

if TYPE_CHECKING:
    import torch
    from executorch.exir.backend.partitioner import Partitioner
    from torch.export import ExportedProgram

    from worker.lower.backends.reasons import Reasons


@dataclass(frozen=True)
class ReproTemplate:
    """What a blocker group's one-op repro (``worker.repros.script``) needs of the backend: its imports,
    the partitioner expression, and the text of ``lower_and_ask(ep) -> (edge, reason)``, which lowers
    with the partitioner and returns the support check's reason for refusing a node of ``OP_NAME``
    (None when it accepted it, or was never asked)."""

    imports: str
    partitioner: str
    ask: str


@dataclass(frozen=True)
class Backend:
    name: str
    # force_fp16: the Vulkan partitioner's compile option (coverfarm.backends' takes_force_fp16)
    make_partitioner: Callable[..., Partitioner]
    # The module whose ``CapabilityBasedPartitioner`` the partitioner builds its partitions with: the
    # support check is observed there, and fast lowering swaps in the exact fast implementation there.
    # None: the partitioner is asked itself, through ``reasons``.
    capability_module: str | None
    repro: ReproTemplate
    # The executorch modules a repro imports (imported once by the repro child, before the first one).
    partitioner_modules: tuple[str, ...] = ()
    reasons: Callable[[Partitioner, ExportedProgram], Reasons] | None = None
    # A partitioner that drops nodes after its support check accepted them (VGF's drops partitions of
    # no-op ops) and says why: within the block, what it said per node, read for those left out.
    partition_reports: Callable[[], AbstractContextManager[Mapping[torch.fx.Node, str]]] | None = None
    # Fast lowering's levers beyond the exact partitioner (worker.lower.fast.switch) were written
    # against this backend's lowering.
    fast_levers: bool = False

    @property
    def uses_capability_partitioner(self) -> bool:
        return self.capability_module is not None


def get_backend(name: str) -> Backend:
    if name not in backends.registry():
        raise UserError(f"unknown backend {name!r}; known: {', '.join(backends.names())}")
    backend: Backend = importlib.import_module(f"{__name__}.{name}").BACKEND
    return backend


def all_backends() -> dict[str, Backend]:
    """Every backend coverfarm.backends registers, with its lowering module."""
    return {name: get_backend(name) for name in backends.names()}
