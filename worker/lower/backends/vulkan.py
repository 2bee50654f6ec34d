"""Vulkan's lowering: ``VulkanPartitioner()``, its reasons from ``VulkanSupportedOperators.log_skip``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coverfarm.backends.vulkan import BACKEND as CONTRACT
from worker.lower.backends import Backend, ReproTemplate

if TYPE_CHECKING:
    from executorch.exir.backend.partitioner import Partitioner

PARTITIONER_MODULE = "executorch.backends.vulkan.partitioner.vulkan_partitioner"


def make_partitioner(force_fp16: bool = False) -> Partitioner:
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    return VulkanPartitioner({"force_fp16": True}) if force_fp16 else VulkanPartitioner()


BACKEND = Backend(
    name="vulkan",
    make_partitioner=make_partitioner,
    capability_module=PARTITIONER_MODULE,
    partitioner_modules=(PARTITIONER_MODULE,),
    fast_levers=True,
    repro=ReproTemplate(
        "from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner",
        CONTRACT.partitioner,
        '''

class Reasons(logging.Handler):
    """VulkanSupportedOperators.log_skip logs "Due to [reason], skipping <node>" at INFO on the root
    logger: collect the reasons given for nodes of OP."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.seen = []

    def emit(self, record):
        pattern = r"\\[Vulkan Partitioner\\] Due to \\[(.*)\\], skipping (.*)"
        found = re.match(pattern, record.getMessage(), re.S)
        if found and f" = {OP_NAME}(" in found.group(2):
            self.seen.append(found.group(1))


def lower_and_ask(ep):
    reasons = Reasons()
    root = logging.getLogger()
    level = root.level
    root.addHandler(reasons)
    root.setLevel(logging.INFO)
    try:
        edge = to_edge_transform_and_lower(ep, partitioner=[PARTITIONER])
    finally:
        root.removeHandler(reasons)
        root.setLevel(level)
    return edge, (reasons.seen[-1] if reasons.seen else None)
''',
    ),
)
