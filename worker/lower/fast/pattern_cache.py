"""Memoize the Vulkan backend's pattern-graph builders for the duration of one lowering.

The Vulkan backend asks every registered graph pattern for its graphs twice per use:
``VulkanPartitioner.partition`` (``patterns.get_all_fusable_subgraphs``) and, for every Vulkan
partition, ``VulkanBackend.preprocess`` (``FusePatternsPass`` -> ``patterns.replace_all_fusable_subgraphs``).
Each builder exports a small module and runs ``to_edge`` on it (about 1.3 s for ``export_llama_rope``
and 2.2 s for ``hf_rope`` here), so a program lowered into 100 Vulkan partitions spends minutes
rebuilding the same pattern graphs. Upstream meant to cache them; see ``_memoize_pattern_builders``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from executorch.backends.vulkan.patterns import pattern_registry
from executorch.backends.vulkan.patterns.pattern_registry import GetGraphFn
from torch.fx.graph_module import GraphModule

__all__ = ["cached_pattern_graphs"]


def _memoized(build: GetGraphFn) -> GetGraphFn:
    graphs: list[GraphModule] | None = None

    def cached() -> list[GraphModule]:
        nonlocal graphs
        if graphs is None:
            graphs = list(build())
        return list(graphs)  # a fresh list, the same graph modules (as lru_cache would return)

    return cached


def _memoize_pattern_builders() -> dict[str, GetGraphFn]:
    """Wrap every registered pattern-graph builder in a cache; return the originals by pattern name.

    Works around the decorator order in ExecuTorch's backends/vulkan/patterns/rope_hf.py (and rope.py)::

        @lru_cache(maxsize=2)
        @register_pattern_graph("hf_rope")
        def get_hf_rope_graphs(): ...

    Decorators apply bottom-up, so ``register_pattern_graph`` stores the *uncached* function in
    ``pattern_registry.fusable_patterns`` and ``lru_cache`` wraps only the module-level name, which the
    backend never calls. The registry entry is what the partitioner and the fusion pass call, so that
    is what is cached here. The builders take no arguments and their graphs do not depend on the random
    example inputs they draw, so the graphs (and the lowered program) are the same; only torch's global
    random generator is advanced less often.
    """
    originals: dict[str, GetGraphFn] = {}
    for name, entry in pattern_registry.fusable_patterns.items():
        if entry.get_graphs_fn is not None:
            originals[name] = entry.get_graphs_fn
            entry.get_graphs_fn = _memoized(entry.get_graphs_fn)
    return originals


@contextmanager
def cached_pattern_graphs() -> Iterator[None]:
    """Within the block, each Vulkan pattern-graph builder runs at most once; restored on exit.

    Process-global and not thread-safe, like the registry it patches.
    """
    originals = _memoize_pattern_builders()
    try:
        yield
    finally:
        for name, build in originals.items():
            pattern_registry.fusable_patterns[name].get_graphs_fn = build
