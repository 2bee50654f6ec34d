"""XNNPACK: ``XnnpackPartitioner()``, run on the CPU by the executorch wheel's runtime."""

from coverfarm.backends import BackendInfo

BACKEND = BackendInfo(
    name="xnnpack",
    title="XNNPACK",
    partitioner="XnnpackPartitioner()",
    runtime_backend="XnnpackBackend",
    cpu_class=True,
)
