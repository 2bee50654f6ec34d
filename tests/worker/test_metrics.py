"""Heavy-math multiply-adds against closed forms, and connected groups on hand-made graphs."""

from __future__ import annotations

import operator

import torch
from executorch.exir import to_edge

from worker.lower.metrics.graph import counted_nodes, op_name
from worker.lower.metrics.groups import connected_groups
from worker.lower.metrics.macs import node_macs


def edge_macs(module: torch.nn.Module, *inputs: torch.Tensor) -> dict[str, int]:
    ep = to_edge(torch.export.export(module.eval(), inputs)).exported_program()
    found: dict[str, int] = {}
    for node in counted_nodes(ep.graph):
        found[op_name(node)] = found.get(op_name(node), 0) + node_macs(node)
    return found


def test_linear_macs_are_batch_times_in_times_out() -> None:
    macs = edge_macs(torch.nn.Linear(64, 32), torch.randn(5, 64))
    assert sum(macs.values()) == 5 * 64 * 32
    assert macs["aten.addmm.default"] == 5 * 64 * 32


def test_conv2d_macs_are_outputs_times_kernel_volume() -> None:
    macs = edge_macs(torch.nn.Conv2d(3, 8, kernel_size=3, padding=1), torch.randn(2, 3, 16, 16))
    assert macs["aten.convolution.default"] == 2 * 8 * 16 * 16 * (3 * 3 * 3)


def test_grouped_conv_and_bmm() -> None:
    macs = edge_macs(torch.nn.Conv1d(8, 8, kernel_size=5, groups=4), torch.randn(1, 8, 20))
    assert macs["aten.convolution.default"] == 1 * 8 * 16 * (2 * 5)

    class Bmm(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.bmm(a, b)

    assert edge_macs(Bmm(), torch.randn(3, 4, 5), torch.randn(3, 5, 6))["aten.bmm.default"] == 3 * 4 * 5 * 6


def test_elementwise_ops_are_not_heavy() -> None:
    class Act(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * 2 + 1

    assert sum(edge_macs(Act(), torch.randn(4, 4)).values()) == 0


def chain(n: int) -> list[torch.fx.Node]:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    nodes = []
    for _ in range(n):
        x = graph.call_function(torch.relu, (x,))
        nodes.append(x)
    graph.output(x)
    return nodes


def test_groups_of_a_chain_cut_in_two_places() -> None:
    nodes = chain(7)
    supported = [n for i, n in enumerate(nodes) if i not in (2, 5)]
    assert connected_groups(supported) == 3
    assert connected_groups(nodes) == 1
    assert connected_groups([]) == 0


def test_getitem_connects_its_producer_to_consumers_without_being_a_group() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    split = graph.call_function(torch.split, (x, 2))
    first = graph.call_function(operator.getitem, (split, 0))
    use = graph.call_function(torch.relu, (first,))
    graph.output(use)
    assert connected_groups([split, first, use]) == 1
    assert connected_groups([first]) == 0
