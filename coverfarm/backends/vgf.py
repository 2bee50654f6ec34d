"""Arm's VGF backend: ``VgfPartitioner(VgfCompileSpec("TOSA-1.0+FP"))``, Vulkan with Arm's ML extensions
(``VK_ARM_tensors``, ``VK_ARM_data_graph``), the GPU path Arm offers for Mali.

Lowering turns each partition into TOSA (``tosa-tools``' serializer) and the ML SDK's model converter
(``ai-ml-sdk-model-converter``) compiles it into a VGF blob. The executorch wheel's runtime registers
``VgfBackend``, which runs a blob on a Vulkan device offering those extensions: natively, or through the
ML SDK's emulation layers (``ai-ml-emulation-layer-for-vulkan``) over another driver, which makes the
device class an emulated one (``gpu_runner.probe.vgf_classes``), never a Mali's.
"""

from coverfarm.backends import BackendInfo

BACKEND = BackendInfo(
    name="vgf",
    title="VGF",
    partitioner='VgfPartitioner(VgfCompileSpec("TOSA-1.0+FP"))',
    runtime_backend="VgfBackend",
    cpu_class=False,
    wheel_runtime=True,
    packages=("tosa-tools", "ml-dtypes", "ai-ml-sdk-model-converter", "ai-ml-emulation-layer-for-vulkan"),
)
