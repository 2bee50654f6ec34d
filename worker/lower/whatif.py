"""What-if: how many backend programs a program would lower to if one blocker group were supported.

The backend's own verdicts (from its support check, recorded before partitioning) are replayed with the
group's nodes accepted too, through the exact fast partitioner (``worker.lower.fast.exact_partitioner``,
the same partitions as torch.fx's ``CapabilityBasedPartitioner``). It is checked first: replaying the
unchanged verdicts must give the partition count the real partitioner produced, or no what-if is
reported (the replay would not be the backend's partitioning).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

import torch
from torch.fx.passes.operator_support import OperatorSupportBase

from worker.lower.fast.exact_partitioner import ExactCapabilityPartitioner

# VulkanPartitioner.partition (executorch 1.5.1) builds its CapabilityBasedPartitioner with
# allows_single_node_partition=True and no other option; the replay uses the same.
ALLOWS_SINGLE_NODE_PARTITION = True


class _Replay(OperatorSupportBase):
    def __init__(self, accepted: Collection[torch.fx.Node]) -> None:
        self.accepted = accepted

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        return node in self.accepted


def count_partitions(graph_module: torch.fx.GraphModule, accepted: Collection[torch.fx.Node]) -> int:
    partitioner = ExactCapabilityPartitioner(
        graph_module, _Replay(accepted), allows_single_node_partition=ALLOWS_SINGLE_NODE_PARTITION
    )
    return len(partitioner.propose_partitions())


def programs_if_supported(
    graph_module: torch.fx.GraphModule,
    reasons: Mapping[torch.fx.Node, str | None],
    groups: list[list[torch.fx.Node]],
    observed_partitions: int,
    budget_s: float,
) -> list[int | None]:
    """Per group, the partition count with that group's nodes accepted; None past the time budget or
    when the replay does not reproduce ``observed_partitions``."""
    start = time.monotonic()
    accepted = {node for node, reason in reasons.items() if reason is None}
    if count_partitions(graph_module, accepted) != observed_partitions:
        return [None] * len(groups)
    counts: list[int | None] = []
    for members in groups:
        if time.monotonic() - start > budget_s:
            counts.append(None)
            continue
        counts.append(count_partitions(graph_module, accepted | set(members)))
    return counts
