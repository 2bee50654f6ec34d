"""Measure a program while ExecuTorch lowers it, without changing how it is lowered.

``ObservingPartitioner`` wraps the backend's own partitioner and forwards every call to it, so that
``to_edge_transform_and_lower`` runs exactly as it would with the bare partitioner. It looks at the
edge program the partitioner receives (after ``to_edge`` and the transform passes): ops and heavy math
before partitioning, the backend's per-node support answers and connected groups as soon as they exist,
and the partitioner's tags when it returns. Each is logged as an event the moment it is known.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Mapping

import torch
from executorch.exir.backend.partitioner import Partitioner, PartitionResult
from torch.export import ExportedProgram
from torch.fx.passes.operator_support import OperatorSupportBase

from worker.child.events import EventLog
from worker.lower.backends import Backend
from worker.lower.backends.reasons import LEFT_OUT, Reasons, capability_reasons
from worker.lower.metrics.example import describe
from worker.lower.metrics.graph import counted_nodes, op_name
from worker.lower.metrics.groups import connected_groups
from worker.lower.metrics.macs import node_macs
from worker.lower.whatif import programs_if_supported

WHATIF_BUDGET_S = 120.0  # per program: past it, groups get no what-if count


def blocker_rows(
    nodes: Mapping[torch.fx.Node, str], macs: Mapping[torch.fx.Node, int]
) -> list[dict[str, object]]:
    """Group CPU-left nodes by (op, reason): count, one-run MACs and node names."""
    groups: dict[tuple[str, str], list[torch.fx.Node]] = defaultdict(list)
    for node, reason in nodes.items():
        groups[(op_name(node), reason)].append(node)
    return [
        {
            "op": op,
            "reason": reason,
            "count": len(members),
            "macs": sum(macs[n] for n in members),
            "nodes": [n.name for n in members],
        }
        for (op, reason), members in sorted(groups.items())
    ]


class Observer:
    """Measures one program of one policy on one backend and logs what it finds."""

    def __init__(self, log: EventLog, program: str, backend: Backend, partitioner: Partitioner) -> None:
        self.log = log
        self.program = program
        self.backend = backend
        self.partitioner = partitioner
        self.ep: ExportedProgram | None = None
        self.macs: dict[torch.fx.Node, int] = {}
        self.reported_support = False
        self.reasons: Reasons = {}
        self.partition_start = 0.0

    def before_partition(self, ep: ExportedProgram) -> None:
        self.ep = ep
        self.macs = {node: node_macs(node) for node in counted_nodes(ep.graph)}
        self.log.emit(
            "edge",
            program=self.program,
            ops=len(self.macs),
            macs=sum(self.macs.values()),
            op_histogram=_histogram(self.macs),
        )
        if self.backend.reasons is not None:
            start = time.monotonic()
            self.report_support(self.backend.reasons(self.partitioner, ep), start)
        self.partition_start = time.monotonic()

    def on_support(self, support: OperatorSupportBase) -> None:
        """Called with the support check the backend's partitioner built, before it proposes partitions."""
        assert self.ep is not None, "the support check was built before the partitioner saw the program"
        if not self.reported_support:
            start = time.monotonic()
            self.report_support(capability_reasons(support, self.ep.graph_module), start)

    def report_support(self, reasons: Reasons, start: float) -> None:
        self.reported_support = True
        self.reasons = reasons
        refused = {
            node: reason for node, reason in reasons.items() if reason is not None and node in self.macs
        }
        accepted = [node for node, reason in reasons.items() if reason is None]
        counted_accepted = [node for node in accepted if node in self.macs]
        self.log.emit(
            "support",
            program=self.program,
            supported_ops=len(counted_accepted),
            supported_macs=sum(self.macs[n] for n in counted_accepted),
            connected_groups=connected_groups(accepted),
            blockers=blocker_rows(refused, self.macs),
            seconds=time.monotonic() - start,
        )

    def after_partition(
        self, result: PartitionResult, said: Mapping[torch.fx.Node, str] | None = None
    ) -> None:
        """``said``: what the partitioner said of nodes while partitioning (``Backend.partition_reports``),
        the reason of a node its support check accepted but no partition kept."""
        graph = result.tagged_exported_program.graph
        tagged = {node for node in graph.nodes if "delegation_tag" in node.meta}
        said = said or {}
        left = {
            node: (self.reasons.get(node) or said.get(node) or LEFT_OUT)
            for node in counted_nodes(graph)
            if node not in tagged
        }
        on_backend = [node for node in counted_nodes(graph) if node in tagged]
        self.log.emit(
            "partitioned",
            program=self.program,
            seconds=time.monotonic() - self.partition_start,
            partitions=len(result.partition_tags),
            ops_on_backend=len(on_backend),
            macs_on_backend=sum(self.macs.get(n, node_macs(n)) for n in on_backend),
            blockers=blocker_rows(left, {n: self.macs.get(n, node_macs(n)) for n in left}),
        )
        self.report_groups(left, len(result.partition_tags))
        self.log.emit("phase", phase="export", program=self.program)

    def report_groups(self, left: Mapping[torch.fx.Node, str], partitions: int) -> None:
        """Per blocker group of this program: a representative node, described for its repro (the one
        with the most heavy math), and the partition count if the group were supported."""
        assert self.ep is not None
        start = time.monotonic()
        members: dict[tuple[str, str], list[torch.fx.Node]] = defaultdict(list)
        for node, reason in left.items():
            members[(op_name(node), reason)].append(node)
        keys = sorted(members)
        if self.backend.uses_capability_partitioner:
            counts = programs_if_supported(
                self.ep.graph_module, self.reasons, [members[k] for k in keys], partitions, WHATIF_BUDGET_S
            )
        else:
            counts = [None] * len(keys)
        groups = []
        for (op, reason), count in zip(keys, counts, strict=True):
            nodes = members[(op, reason)]
            example = max(nodes, key=lambda n: self.macs.get(n, 0))
            groups.append(
                {
                    "op": op,
                    "reason": reason,
                    "example": describe(example, self.ep),
                    "partitions_if_supported": count,
                }
            )
        self.log.emit("groups", program=self.program, groups=groups, seconds=time.monotonic() - start)


def _histogram(macs: Mapping[torch.fx.Node, int]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for node in macs:
        counts[op_name(node)] += 1
    return dict(sorted(counts.items()))


class ObservingPartitioner(Partitioner):
    """The backend's partitioner, unchanged, with an observer around ``partition``."""

    def __init__(self, inner: Partitioner, observer: Observer) -> None:
        super().__init__(getattr(inner, "_spec", {}))  # VulkanPartitioner never sets it
        self.inner = inner
        self.observer = observer
        self.delegation_spec = getattr(inner, "delegation_spec", None)

    def ops_to_not_decompose(self, ep: ExportedProgram):  # type: ignore[no-untyped-def]
        return self.inner.ops_to_not_decompose(ep)

    def transform_for_pre_decomposition(self, exported_program: ExportedProgram) -> ExportedProgram:
        return self.inner.transform_for_pre_decomposition(exported_program)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        self.observer.before_partition(exported_program)
        reports = self.observer.backend.partition_reports
        with reports() if reports is not None else contextlib.nullcontext({}) as said:
            result = self.inner.partition(exported_program)
        self.observer.after_partition(result, said)
        return result
