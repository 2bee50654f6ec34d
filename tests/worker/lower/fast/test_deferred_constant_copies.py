"""deferred_constant_copy_checks validates once after copying shared constants, and changes no byte."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch.export import ExportedProgram

from worker.lower.fast.deferred_constant_copies import deferred_constant_copy_checks
from worker.lower.fast.pattern_cache import cached_pattern_graphs
from worker.lower.fast.switch import fast_lowering

REUSES = 4  # the shared layer runs in 4 Vulkan partitions


class SharedLayer(torch.nn.Module):
    """One linear layer applied again and again, an elu (CPU only) between applications, like a planner
    that reuses its model's weights in every iteration: each partition needs the same weight and bias."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 16)
        self.scale = torch.nn.Parameter(torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(REUSES):
            x = torch.nn.functional.elu(torch.sigmoid(self.layer(x)) * self.scale)
        return x


@pytest.fixture
def validations() -> Iterator[list[int]]:
    """The node counts of the programs ExportedProgram._validate checks once they hold constant copies."""
    seen: list[int] = []
    original = ExportedProgram._validate

    def counting(self: ExportedProgram) -> None:
        if any(node.op == "placeholder" and "_copy_" in node.name for node in self.graph.nodes):
            seen.append(len(self.graph.nodes))
        original(self)

    ExportedProgram._validate = counting  # type: ignore[method-assign,misc]
    try:
        yield seen
    finally:
        ExportedProgram._validate = original  # type: ignore[method-assign,misc]


def lower(model: torch.nn.Module) -> tuple[bytes, str, int]:
    """(.pte bytes, the lowered program's code, its delegate count)."""
    program = to_edge_transform_and_lower(
        torch.export.export(model, (torch.randn(1, 16),)), partitioner=[VulkanPartitioner()]
    )
    graph_module = program.exported_program().graph_module
    delegates = sum(
        1
        for node in graph_module.graph.nodes
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target)
    )
    return program.to_executorch().buffer, graph_module.code, delegates


def test_copies_are_checked_once_and_change_no_byte(validations: list[int]) -> None:
    """Upstream validates the program after each copied constant (weight, bias and scale, each copied
    for three of the four partitions that use them); deferred, the copies are all made, then checked
    once, and the lowered program and its .pte are the same."""
    torch.manual_seed(0)
    model = SharedLayer().eval()
    with cached_pattern_graphs():
        plain = lower(model)
        plain_checks = len(validations)
        validations.clear()
        with deferred_constant_copy_checks():
            deferred = lower(model)
        deferred_checks = len(validations)
    with fast_lowering():
        fast = lower(model)

    assert plain[2] == REUSES
    assert deferred == plain
    assert fast == plain
    assert plain_checks - deferred_checks == 3 - 1  # three shared constants: three checks become one
