"""Choose which capability partitioner a backend's partitioner runs, and observe its support check.

``VulkanPartitioner.partition`` builds its partitioner through the module-level name
``CapabilityBasedPartitioner`` of ``executorch.backends.vulkan.partitioner.vulkan_partitioner``, and
``OpenvinoPartitioner.partition`` through that of ``executorch.backends.openvino.partitioner`` (the
backend's ``capability_module``). Inside ``capability_partitioner(impl, module=...)`` that name is
bound to a factory for the chosen implementation and restored on exit:

* ``"stock"``: torch.fx's own ``CapabilityBasedPartitioner``, unchanged (only wrapped, for the callback);
* ``"fast"``: ``ExactCapabilityPartitioner``, which proposes the same partitions with the same ids.

The swap is process-global and not thread-safe: lowering runs in a single-threaded child process per
stage, and two concurrent blocks in one process would see each other's choice. Nested blocks restore
in LIFO order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from torch.fx.graph_module import GraphModule
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from worker.lower.fast.exact_partitioner import ExactCapabilityPartitioner

__all__ = ["PartitionerImpl", "SupportCallback", "capability_partitioner"]

VULKAN_MODULE = "executorch.backends.vulkan.partitioner.vulkan_partitioner"

PartitionerImpl = Literal["stock", "fast"]
SupportCallback = Callable[[OperatorSupportBase], None]

_IMPLEMENTATIONS: dict[str, type[CapabilityBasedPartitioner]] = {
    "stock": CapabilityBasedPartitioner,
    "fast": ExactCapabilityPartitioner,
}


@contextmanager
def capability_partitioner(
    impl: PartitionerImpl, on_support: SupportCallback | None = None, module: str = VULKAN_MODULE
) -> Iterator[None]:
    """Within the block, the partitioner of ``module`` (``VulkanPartitioner.partition`` by default)
    uses ``impl``; ``on_support`` sees its check.

    ``on_support`` is called with the operator-support object (``VulkanSupportedOperators``,
    ``OpenvinoOperatorsSupport``) each time the partitioner is constructed, before partitioning starts.
    """
    if impl not in _IMPLEMENTATIONS:
        raise ValueError(
            f"unknown partitioner implementation {impl!r}; expected one of {sorted(_IMPLEMENTATIONS)}"
        )
    partitioner_class = _IMPLEMENTATIONS[impl]

    def build(
        graph_module: GraphModule,
        operator_support: OperatorSupportBase,
        allows_single_node_partition: bool = False,
        non_compute_ops: Sequence[str] | None = None,
        allowed_single_node_partition_ops: Sequence[str] | None = None,
        skip_horizontal_fusion: bool = False,
    ) -> CapabilityBasedPartitioner:
        if on_support is not None:
            on_support(operator_support)
        return partitioner_class(
            graph_module,
            operator_support,
            allows_single_node_partition=allows_single_node_partition,
            non_compute_ops=non_compute_ops,
            allowed_single_node_partition_ops=allowed_single_node_partition_ops,
            skip_horizontal_fusion=skip_horizontal_fusion,
        )

    partitioner_module = importlib.import_module(module)
    saved = getattr(partitioner_module, "CapabilityBasedPartitioner")  # noqa: B009
    setattr(partitioner_module, "CapabilityBasedPartitioner", build)  # noqa: B010
    try:
        yield
    finally:
        setattr(partitioner_module, "CapabilityBasedPartitioner", saved)  # noqa: B010
