"""deferred_partition_recompile recompiles a partitioned program once and changes no output byte."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import executorch.exir.backend.backend_api as backend_api
import executorch.exir.lowered_backend_module as lowered_backend_module
import pytest
import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge, to_edge_transform_and_lower
from method_calls import counted_calls
from torch.fx import GraphModule
from tracker_repros import Blocks

from worker.lower.fast.deferred_recompile import deferred_partition_recompile
from worker.lower.fast.pattern_cache import cached_pattern_graphs
from worker.lower.fast.switch import fast_lowering

BLOCKS = 6  # 7 Vulkan partitions


class TwoHeads(torch.nn.Module):
    """Partitions with two outputs each, and a mutated buffer, between CPU-only ops."""

    steps: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(16, 16)
        self.second = torch.nn.Linear(16, 16)
        self.register_buffer("steps", torch.zeros(1, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.first(x)
        b, c = torch.sigmoid(a), a * 2
        d = torch.nn.functional.elu(b) + torch.nn.functional.elu(c)  # elu stays on the CPU
        e = self.second(d)
        self.steps.add_(e)
        return torch.nn.functional.elu(e * torch.tanh(e)) + self.steps


@pytest.fixture
def recompiles() -> Iterator[Counter[int]]:
    """Counts GraphModule.recompile calls per module (by id)."""
    with counted_calls(GraphModule, "recompile") as calls:
        yield calls


def lower(model: torch.nn.Module, example: torch.Tensor) -> tuple[bytes, str, int]:
    """(.pte bytes, the lowered program's generated code, its delegate count)."""
    program = to_edge_transform_and_lower(
        torch.export.export(model, (example,)), partitioner=[VulkanPartitioner()]
    )
    graph_module = program.exported_program().graph_module
    delegates = sum(
        1
        for node in graph_module.graph.nodes
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target)
    )
    return program.to_executorch().buffer, graph_module.code, delegates


@pytest.mark.parametrize("name", ["blocks", "two_heads"])
def test_pte_and_lowered_program_are_identical(name: str) -> None:
    torch.manual_seed(0)
    model = (Blocks(BLOCKS) if name == "blocks" else TwoHeads()).eval()
    example = torch.randn(1, 32 if name == "blocks" else 16)

    # The pattern cache (byte-identical on its own, test_pattern_cache.py) keeps each lowering cheap.
    with cached_pattern_graphs():
        plain = lower(model, example)
        with deferred_partition_recompile():
            deferred = lower(model, example)
    with fast_lowering():
        fast = lower(model, example)

    assert plain[2] == BLOCKS + 1 if name == "blocks" else plain[2] > 1
    assert deferred == plain
    assert fast == plain


def test_partitioned_module_is_recompiled_once(recompiles: Counter[int]) -> None:
    """Upstream recompiles the partitioned program's module once per partition; deferred, once."""
    torch.manual_seed(0)
    model = Blocks(BLOCKS).eval()
    partitioned: list[GraphModule] = []
    original = backend_api._create_partitions_in_graph_module

    def recording(graph_module: GraphModule, *args: object, **kwargs: object) -> object:
        partitioned.append(graph_module)
        recompiles.pop(id(graph_module), None)  # count from here: ids of freed modules are reused
        return original(graph_module, *args, **kwargs)

    backend_api._create_partitions_in_graph_module = recording
    counts = []
    try:
        for deferred in (False, True):
            partitioned.clear()
            with cached_pattern_graphs():
                if deferred:
                    with deferred_partition_recompile():
                        lower(model, torch.randn(1, 32))
                else:
                    lower(model, torch.randn(1, 32))
            assert len(partitioned) == 1
            counts.append(recompiles[id(partitioned[0])])
    finally:
        backend_api._create_partitions_in_graph_module = original
    assert counts == [BLOCKS + 1, 1]


def test_legalize_outside_partitioning_is_not_deferred(recompiles: Counter[int]) -> None:
    graph_module = to_edge(torch.export.export(Blocks(2).eval(), (torch.randn(1, 32),))).exported_program()
    module = graph_module.graph_module
    recompiles.clear()
    with deferred_partition_recompile():
        assert lowered_backend_module.legalize_graph(module) is module
    assert recompiles[id(module)] == 1


def test_upstream_functions_are_restored_on_error() -> None:
    legalize = lowered_backend_module.legalize_graph
    create = backend_api._create_partitions_in_graph_module
    with pytest.raises(RuntimeError), deferred_partition_recompile():
        assert lowered_backend_module.legalize_graph is not legalize
        assert backend_api._create_partitions_in_graph_module is not create
        raise RuntimeError("lowering failed")
    assert lowered_backend_module.legalize_graph is legalize
    assert backend_api._create_partitions_in_graph_module is create
