"""Connected groups: weakly connected groups of the nodes a backend's support check accepts.

Computed in linear time with union-find before the partitioner runs, so it exists even when partitioning
does not finish. docs/metrics.md explains why it is not a bound on the partition count in either direction.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[torch.fx.Node, torch.fx.Node] = {}

    def add(self, item: torch.fx.Node) -> None:
        self.parent.setdefault(item, item)

    def find(self, item: torch.fx.Node) -> torch.fx.Node:
        root = item
        while self.parent[root] is not root:
            root = self.parent[root]
        while self.parent[item] is not root:  # path compression
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: torch.fx.Node, b: torch.fx.Node) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[ra] = rb


def _consumers(node: torch.fx.Node) -> Iterable[torch.fx.Node]:
    """A node's users, looking through getitem (which only unpacks a multi-output node)."""
    for user in node.users:
        if user.target is operator.getitem:
            yield from user.users
        else:
            yield user


def connected_groups(supported: Iterable[torch.fx.Node]) -> int:
    """How many weakly connected groups the supported nodes form (edges only between supported nodes).

    getitem nodes are not members of their own: they connect their producer to its consumers.
    """
    members = {node for node in supported if node.target is not operator.getitem}
    forest = _UnionFind()
    for node in members:
        forest.add(node)
    for node in members:
        for user in _consumers(node):
            if user in members:
                forest.union(node, user)
    return len({forest.find(node) for node in members})
