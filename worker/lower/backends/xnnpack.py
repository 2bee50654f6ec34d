"""XNNPACK's lowering: ``XnnpackPartitioner()``, its reasons from its configs' ``WhyNoPartition``
reports (``worker.lower.backends.reasons.xnnpack_reasons``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coverfarm.backends.xnnpack import BACKEND as CONTRACT
from worker.lower.backends import Backend, ReproTemplate

if TYPE_CHECKING:
    from executorch.exir.backend.partitioner import Partitioner
    from torch.export import ExportedProgram

    from worker.lower.backends.reasons import Reasons

PARTITIONER_MODULE = "executorch.backends.xnnpack.partition.xnnpack_partitioner"


def make_partitioner() -> Partitioner:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner()


def reasons(partitioner: Partitioner, ep: ExportedProgram) -> Reasons:
    from worker.lower.backends.reasons import xnnpack_reasons

    return xnnpack_reasons(partitioner, ep)


BACKEND = Backend(
    name="xnnpack",
    make_partitioner=make_partitioner,
    capability_module=None,
    reasons=reasons,
    partitioner_modules=(PARTITIONER_MODULE,),
    repro=ReproTemplate(
        "from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner\n"
        "from executorch.exir.backend.canonical_partitioners.config_partitioner import format_target_name",
        CONTRACT.partitioner,
        '''

class Reasons(logging.Handler):
    """XNNPACK's partitioner configs log a WhyNoPartition (node, reason) at DEBUG when they refuse a
    node: collect those given for nodes of OP."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.seen = []

    def emit(self, record):
        node, reason = getattr(record.msg, "node", None), getattr(record.msg, "reason", None)
        if isinstance(reason, str) and getattr(node, "target", None) is not None:
            if str(getattr(node.target, "__name__", node.target)) == OP_NAME:
                self.seen.append(reason)


def lower_and_ask(ep):
    reasons = Reasons()
    root = logging.getLogger()
    level = root.level
    root.addHandler(reasons)
    root.setLevel(logging.DEBUG)
    try:
        edge = to_edge_transform_and_lower(ep, partitioner=[PARTITIONER])
    finally:
        root.removeHandler(reasons)
        root.setLevel(level)
    if reasons.seen:
        return edge, reasons.seen[-1]
    if format_target_name(OP_NAME) not in PARTITIONER.target_partitioner_configs:
        return edge, "no operator implementation"
    return edge, None
''',
    ),
)
