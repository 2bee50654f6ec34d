"""cached_pattern_graphs builds each Vulkan pattern graph once per lowering and changes no output byte."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.backends.vulkan.patterns import pattern_registry
from executorch.backends.vulkan.patterns.pattern_registry import GetGraphFn
from executorch.exir import to_edge_transform_and_lower
from torch.fx.graph_module import GraphModule
from tracker_repros import Blocks

from worker.lower.fast.pattern_cache import cached_pattern_graphs

BLOCKS = 5  # 6 Vulkan partitions: enough to show the per-partition rebuild, cheap enough to run twice


@pytest.fixture
def builder_calls() -> Iterator[Counter[str]]:
    """Counts calls of the registered (upstream, uncached) pattern-graph builders."""
    calls: Counter[str] = Counter()
    originals: dict[str, GetGraphFn] = {}

    def counting(name: str, build: GetGraphFn) -> GetGraphFn:
        def wrapper() -> list[GraphModule]:
            calls[name] += 1
            return build()

        return wrapper

    for name, entry in pattern_registry.fusable_patterns.items():
        if entry.get_graphs_fn is not None:
            originals[name] = entry.get_graphs_fn
            entry.get_graphs_fn = counting(name, entry.get_graphs_fn)
    try:
        yield calls
    finally:
        for name, build in originals.items():
            pattern_registry.fusable_patterns[name].get_graphs_fn = build


def lower_to_pte(model: torch.nn.Module) -> tuple[bytes, int]:
    ep = torch.export.export(model, (torch.ones(1, 32),))
    program = to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner()])
    delegates = sum(
        1
        for node in program.exported_program().graph.nodes
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target)
    )
    return program.to_executorch().buffer, delegates


def test_pte_is_byte_identical_and_builders_run_once(builder_calls: Counter[str]) -> None:
    assert not builder_calls
    torch.manual_seed(0)
    model = Blocks(BLOCKS).eval()

    plain, delegates = lower_to_pte(model)
    uncached = dict(builder_calls)
    builder_calls.clear()
    with cached_pattern_graphs():
        cached, cached_delegates = lower_to_pte(model)

    assert delegates == cached_delegates == BLOCKS + 1
    assert cached == plain
    # Upstream rebuilds every pattern graph in partition() and once more per Vulkan partition.
    assert set(uncached) == {"export_llama_rope", "hf_rope"}
    assert all(count == delegates + 1 for count in uncached.values())
    assert builder_calls == Counter(dict.fromkeys(uncached, 1))


def test_registry_is_restored_and_graphs_are_shared() -> None:
    entry = pattern_registry.fusable_patterns["export_llama_rope"]
    original = entry.get_graphs_fn
    assert original is not None
    with pytest.raises(RuntimeError), cached_pattern_graphs():
        get_graphs = entry.get_graphs_fn
        assert get_graphs is not None and get_graphs is not original
        first, second = get_graphs(), get_graphs()
        assert first is not second and all(a is b for a, b in zip(first, second, strict=True))
        raise RuntimeError("lowering failed")
    assert entry.get_graphs_fn is original
