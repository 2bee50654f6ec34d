"""Vulkan: ``VulkanPartitioner()``, run by a Vulkan GPU's native runtime (the farm's model backend)."""

from coverfarm.backends import BackendInfo

BACKEND = BackendInfo(
    name="vulkan",
    title="Vulkan",
    partitioner="VulkanPartitioner()",
    runtime_backend="VulkanBackend",
    cpu_class=False,
    takes_force_fp16=True,
)
