"""Which nodes of an edge graph count as ops, and how they are named in results."""

from __future__ import annotations

import operator
from collections.abc import Iterator

import torch

DELEGATE_CALL = "executorch_call_delegate"


def aten_target(node: torch.fx.Node) -> object:
    """The ATen OpOverload of an edge node (EdgeOpOverload wraps it) or of an ATen one (itself: its own
    ``_op`` is the C++ builtin, whose name is empty); any other target as it is."""
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target
    return getattr(node.target, "_op", node.target)


def op_name(node: torch.fx.Node) -> str:
    """The ATen name of a node's op (``aten.convolution.default``), without the edge dialect prefix."""
    target = aten_target(node)
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def is_counted(node: torch.fx.Node) -> bool:
    """docs/metrics.md: call_function nodes, not counting getitem and delegate calls."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return False
    return getattr(node.target, "__name__", "") != DELEGATE_CALL


def counted_nodes(graph: torch.fx.Graph) -> Iterator[torch.fx.Node]:
    return (node for node in graph.nodes if is_counted(node))


def delegate_calls(graph: torch.fx.Graph) -> int:
    return sum(
        1
        for node in graph.nodes
        if node.op == "call_function" and getattr(node.target, "__name__", "") == DELEGATE_CALL
    )
