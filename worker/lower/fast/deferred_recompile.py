"""Regenerate a partitioned graph module's Python code once per lowering instead of once per partition.

When ``to_backend`` cuts a program into delegate partitions, ExecuTorch's
``_create_partitions_in_graph_module`` calls ``create_submodule_from_nodes`` for every partition, and
that function ends with torch.fx's ``legalize_graph(gm)``. ``legalize_graph`` copies the graph into a
new, topologically sorted ``Graph`` and assigns it with ``gm.graph = new_graph``; the ``graph`` setter of
``GraphModule`` then calls ``gm.recompile()``, which generates and compiles Python source for the
*whole* program and, recursively, for every fused submodule already attached to it. A program cut into
P partitions therefore generates the source of its whole graph P times and that of the k-th fused
submodule P - k times: for tdmpc (about 6,000 nodes, 140 Vulkan partitions) this is most of the
export phase. See ``_legalize_graph_without_recompile``.

Nothing between two partitions runs the graph module or reads its source: each partition's submodule
becomes an ``ExportedProgram`` with a ``GraphModule`` of its own, and the lowered program built after
the loop gets a fresh ``GraphModule`` as well. Generated source has no effect on the graph, so the
graphs, the node names and the ``.pte`` are exactly those of the upstream path; the graph module is
recompiled once, when all partitions are cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import executorch.exir.backend.backend_api as backend_api
import executorch.exir.lowered_backend_module as lowered_backend_module
from torch.fx import GraphModule

from worker.lower.fast.patching import replaced_attributes

__all__ = ["deferred_partition_recompile"]


def _legalize_graph_without_recompile(
    legalize: Callable[[GraphModule], GraphModule], pending: list[GraphModule]
) -> Callable[[GraphModule], GraphModule]:
    """``legalize_graph`` unchanged, minus the ``recompile`` that its ``gm.graph = ...`` triggers.

    Works around torch.fx's ``GraphModule.graph`` setter, which recompiles the module on every
    assignment, as used by ``torch.fx.passes.tools_common.legalize_graph`` once per partition from
    ``executorch.exir.lowered_backend_module.create_submodule_from_nodes``. The upstream function runs
    as is (same sort, same node copies, same names); only the module's ``recompile`` is shadowed by a
    no-op for the duration of the call, and the module is queued to be recompiled once when
    ``_create_partitions_in_graph_module`` returns. Outside that function (other callers of
    ``create_submodule_from_nodes``) nothing is queued to flush it, so nothing is deferred.
    """

    def legalize_graph(gm: GraphModule) -> GraphModule:
        if not _partitioning:
            return legalize(gm)
        gm.recompile = _no_recompile  # type: ignore[method-assign,assignment]  # shadows the method
        try:
            result = legalize(gm)
        finally:
            del gm.recompile
        if not any(queued is gm for queued in pending):
            pending.append(gm)
        return result

    return legalize_graph


def _no_recompile() -> None:
    return None


_partitioning = False


def _recompile_after_partitioning(
    create_partitions: Callable[..., Any], pending: list[GraphModule]
) -> Callable[..., Any]:
    """``_create_partitions_in_graph_module`` unchanged, then one recompile of each module it legalized."""

    def create_partitions_in_graph_module(*args: Any, **kwargs: Any) -> Any:
        global _partitioning
        outer = _partitioning
        _partitioning = True
        try:
            return create_partitions(*args, **kwargs)
        finally:
            _partitioning = outer
            if not outer:
                while pending:
                    pending.pop(0).recompile()

    return create_partitions_in_graph_module


@contextmanager
def deferred_partition_recompile() -> Iterator[None]:
    """Within the block, ``to_backend`` recompiles each partitioned graph module once; restored on exit.

    Process-global and not thread-safe, like the attributes it replaces.
    """
    pending: list[GraphModule] = []
    legalize = _legalize_graph_without_recompile(lowered_backend_module.legalize_graph, pending)
    create = _recompile_after_partitioning(backend_api._create_partitions_in_graph_module, pending)
    with (
        replaced_attributes(lowered_backend_module, legalize_graph=legalize),
        replaced_attributes(backend_api, _create_partitions_in_graph_module=create),
    ):
        yield
