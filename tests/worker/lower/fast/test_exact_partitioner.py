"""ExactCapabilityPartitioner proposes exactly what torch.fx's CapabilityBasedPartitioner proposes.

Same partition ids, same nodes in the same order with the same node orders, same list order, and the
operator-support check called on the same nodes in the same order -- on random graphs and on the
tracker's repro 4 through VulkanPartitioner.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import _get_qualified_name
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase
from tracker_repros import Blocks

from worker.lower.fast.exact_partitioner import ExactCapabilityPartitioner


# Call targets of the random graphs (never called: partitioning only looks at the graph).
def compute(*args: Any) -> None:
    return None


def other_compute(*args: Any) -> None:
    return None


def view_like(*args: Any) -> None:
    return None


def multi_output(*args: Any) -> None:
    return None


TARGETS: tuple[Callable[..., None], ...] = (compute, other_compute, view_like, multi_output)


class RecordingSupport(OperatorSupportBase):
    """Supports the named nodes; records every call, in order."""

    def __init__(self, supported: set[str]) -> None:
        super().__init__()
        self.supported = supported
        self.calls: list[str] = []

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: Node) -> bool:
        self.calls.append(node.name)
        return node.name in self.supported


Summary = list[tuple[int | None, list[tuple[str, int | None]]]]


def summarize(partitions: Sequence[Partition]) -> Summary:
    return [(p.id, [(node.name, order) for node, order in p.nodes.items()]) for p in partitions]


def propose(
    cls: type[CapabilityBasedPartitioner], gm: GraphModule, supported: set[str], **options: Any
) -> tuple[Summary, list[str]]:
    support = RecordingSupport(supported)
    return summarize(cls(gm, support, **options).propose_partitions()), support.calls


def assert_same_as_stock(gm: GraphModule, supported: set[str], **options: Any) -> Summary:
    stock = propose(CapabilityBasedPartitioner, gm, supported, **options)
    fast = propose(ExactCapabilityPartitioner, gm, supported, **options)
    assert fast == stock
    return stock[0]


@st.composite
def random_graphs(draw: st.DrawFn) -> GraphModule:
    """A random DAG of call_function nodes: random edges, some multi-output nodes read through
    (sometimes nested) getitems, some getitems mixed with other users, some "view_like" ops."""
    graph = Graph()
    made: list[Node] = [graph.placeholder(f"x{i}") for i in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(0, 22))):
        kind = draw(st.sampled_from(["op", "op", "op", "multi", "getitem"]))
        if kind == "getitem":
            source = draw(st.sampled_from(made))
            made.append(graph.call_function(operator.getitem, (source, draw(st.integers(0, 2)))))
            continue
        inputs = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
        if kind == "op":
            made.append(graph.call_function(draw(st.sampled_from(TARGETS)), tuple(inputs)))
            continue
        node = graph.call_function(multi_output, tuple(inputs))
        made.append(node)
        for index in range(draw(st.integers(1, 3))):
            item = graph.call_function(operator.getitem, (node, index))
            made.append(item)
            if draw(st.booleans()):
                made.append(graph.call_function(operator.getitem, (item, 0)))  # nested getitem
    sinks = [node for node in made if not node.users]
    graph.output(tuple(sinks) if sinks else made[-1])
    return GraphModule(torch.nn.Module(), graph)


@settings(max_examples=1000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gm=random_graphs(),
    support_bits=st.tuples(st.integers(0, 2**200 - 1), st.integers(0, 2**200 - 1)),
    support_rate=st.sampled_from(["quarter", "half", "three quarters", "all"]),
    allows_single_node_partition=st.booleans(),
    skip_horizontal_fusion=st.sampled_from([False, False, True]),
    extra_non_compute=st.booleans(),
)
def test_random_graphs_match_stock(
    gm: GraphModule,
    support_bits: tuple[int, int],
    support_rate: str,
    allows_single_node_partition: bool,
    skip_horizontal_fusion: bool,
    extra_non_compute: bool,
) -> None:
    a, b = support_bits
    mask = {"quarter": a & b, "half": a, "three quarters": a | b, "all": -1}[support_rate]
    supported = {node.name for i, node in enumerate(gm.graph.nodes) if mask >> i & 1}
    assert_same_as_stock(
        gm,
        supported,
        allows_single_node_partition=allows_single_node_partition,
        skip_horizontal_fusion=skip_horizontal_fusion,
        non_compute_ops=[_get_qualified_name(view_like)] if extra_non_compute else None,
        allowed_single_node_partition_ops=[_get_qualified_name(other_compute)] if extra_non_compute else None,
    )


def build(edges: dict[str, tuple[str, ...]], outputs: Sequence[str]) -> GraphModule:
    """A graph from name -> input names, in dict order; names starting with "x" are placeholders."""
    graph = Graph()
    made: dict[str, Node] = {}
    for name, inputs in edges.items():
        if name.startswith("x"):
            made[name] = graph.placeholder(name)
        elif name.startswith("getitem"):
            made[name] = graph.call_function(operator.getitem, (made[inputs[0]], 0))
        else:
            made[name] = graph.call_function(compute, tuple(made[i] for i in inputs))
        made[name].name = name
    graph.output(tuple(made[name] for name in outputs))
    return GraphModule(torch.nn.Module(), graph)


def test_stale_partition_map_is_reproduced() -> None:
    """Found by the property test against a variant that kept partition maps fresh after merges.

    The stock class does not update other partitions' maps when a partition they name is merged
    away, and its cycle check then misses that path. The result differs from a fresh-map partitioner.
    """
    gm = build(
        {
            "x0": (),
            "x1": (),
            "x2": (),
            "f0": ("x0",),
            "getitem": ("x1",),
            "getitem_1": ("x1",),
            "f0_1": ("x0",),
            "f0_2": ("f0_1",),
            "multi": ("getitem", "f0", "f0_2"),
            "multi_1": ("getitem_1", "x1"),
            "multi_2": ("x0", "getitem_1"),
            "multi_3": ("f0_1", "getitem_1"),
            "getitem_2": ("f0_1",),
            "getitem_3": ("x1",),
        },
        ["x2", "multi", "multi_1", "multi_2", "multi_3", "getitem_2", "getitem_3"],
    )
    supported = {
        "x0",
        "x1",
        "x2",
        "f0",
        "f0_1",
        "getitem",
        "getitem_2",
        "getitem_3",
        "multi",
        "multi_2",
        "multi_3",
    }
    partitions = assert_same_as_stock(gm, supported, skip_horizontal_fusion=True)
    assert partitions == [
        (5, [("f0_1", 8), ("multi_3", 3), ("getitem_2", 2)]),
        (6, [("x1", 13), ("f0", 11), ("getitem", 10), ("multi", 6), ("getitem_3", 1)]),
    ]


def test_chain_with_cpu_side_branches() -> None:
    """Repro 4's shape in miniature: each block's side branch stays on the CPU."""
    edges: dict[str, tuple[str, ...]] = {"x0": ()}
    previous = "x0"
    for block in range(6):
        edges |= {
            f"mm{block}": (previous,),
            f"sig{block}": (f"mm{block}",),
            f"mul{block}": (f"mm{block}", f"sig{block}"),
            f"elu{block}": (f"mm{block}",),
            f"add{block}": (f"mul{block}", f"elu{block}"),
        }
        previous = f"add{block}"
    gm = build(edges, [previous])
    supported = {name for name in edges if not name.startswith(("x", "elu"))}
    partitions = assert_same_as_stock(gm, supported, allows_single_node_partition=True)
    assert len(partitions) == 7  # one per block, the first linear alone


def test_partition_and_fuse_gives_the_stock_graph() -> None:
    def chain() -> GraphModule:
        return build(
            {"x0": (), "a": ("x0",), "b": ("a",), "c": ("b", "x0"), "d": ("c",), "e": ("d", "b")}, ["e"]
        )

    stock = CapabilityBasedPartitioner(chain(), RecordingSupport({"a", "b", "d", "e"})).partition_and_fuse()
    fast = ExactCapabilityPartitioner(chain(), RecordingSupport({"a", "b", "d", "e"})).partition_and_fuse()
    assert fast.code == stock.code
    assert "fused_" in fast.code


def test_graph_not_in_topological_order_falls_back_to_stock() -> None:
    gm = build({"x0": (), "a": ("x0",), "b": ("a",), "c": ("b",), "d": ("c", "a")}, ["d"])
    nodes = {node.name: node for node in gm.graph.nodes}
    nodes["a"].append(nodes["c"])  # c now sits before its input b
    assert_same_as_stock(gm, {"a", "b", "c", "d"})
    assert_same_as_stock(gm, {"a", "c", "d"}, allows_single_node_partition=True)


def test_repro4_vulkan_tags_match_stock() -> None:
    from executorch.backends.vulkan.partitioner import vulkan_partitioner
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import (
        VulkanPartitioner,
        VulkanSupportedOperators,
    )
    from executorch.exir import to_edge

    from worker.lower.fast.partitioner_impl import capability_partitioner
    from worker.lower.fast.pattern_cache import cached_pattern_graphs

    torch.manual_seed(0)
    ep = to_edge(torch.export.export(Blocks(100).eval(), (torch.randn(1, 32),))).exported_program()
    tags: dict[str, dict[str, str | None]] = {}
    seen: dict[str, list[OperatorSupportBase]] = {}
    with cached_pattern_graphs():
        for impl in ("stock", "fast"):
            for node in ep.graph.nodes:
                node.meta.pop("delegation_tag", None)
            seen[impl] = []
            with capability_partitioner(impl, on_support=seen[impl].append):
                VulkanPartitioner().partition(ep)
            tags[impl] = {node.name: node.meta.get("delegation_tag") for node in ep.graph.nodes}

    assert vulkan_partitioner.CapabilityBasedPartitioner is CapabilityBasedPartitioner
    assert tags["fast"] == tags["stock"]
    assert len({tag for tag in tags["fast"].values() if tag is not None}) == 101
    for impl in ("stock", "fast"):
        assert len(seen[impl]) == 1 and isinstance(seen[impl][0], VulkanSupportedOperators)


def test_capability_partitioner_restores_on_error() -> None:
    from executorch.backends.vulkan.partitioner import vulkan_partitioner

    from worker.lower.fast.partitioner_impl import capability_partitioner

    with pytest.raises(RuntimeError), capability_partitioner("fast"):
        assert vulkan_partitioner.CapabilityBasedPartitioner is not CapabilityBasedPartitioner
        raise RuntimeError("lowering failed")
    assert vulkan_partitioner.CapabilityBasedPartitioner is CapabilityBasedPartitioner
    with pytest.raises(ValueError), capability_partitioner("quick"):  # type: ignore[arg-type]
        pass
