"""OpenVINO: ``OpenvinoPartitioner([])`` (no compile spec: the CPU device, the plugin's defaults), run on
the CPU by the executorch wheel's runtime, which loads the ``openvino`` package's library.

The delegate carries a compiled OpenVINO model that the runtime imports with the CPU plugin's defaults,
so the precision it computes in is the runtime host's ``INFERENCE_PRECISION_HINT`` (bf16 on a CPU with
AVX-512 BF16 or AMX); the runner records it with each run (``DeviceResult.precision``).
"""

from coverfarm.backends import BackendInfo


def cpu_inference_precision() -> str:
    """The CPU plugin's ``INFERENCE_PRECISION_HINT`` on this host ("bf16", "f32"): the precision the
    runtime's OpenVINO delegate computes in. The delegate's compiled model is imported with the plugin's
    defaults (a compile spec's hint given at lowering does not reach it), so the imported model's own
    property is this one; ``tests/worker/test_openvino.py`` checks that on the lowered blob."""
    import openvino

    return str(openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name())


BACKEND = BackendInfo(
    name="openvino",
    title="OpenVINO",
    partitioner="OpenvinoPartitioner([])",
    runtime_backend="OpenvinoBackend",
    cpu_class=True,
    # The partitioner package imports its NNCF quantizer at import; openvino is the runtime's library.
    packages=("openvino", "nncf"),
    runtime_precision=cpu_inference_precision,
    # executorch 1.5.1's runtime, loading a program with an OpenVINO delegate from its file, crashes
    # (SIGSEGV) in the first execute; loaded from the file's bytes, the same program runs.
    load_from_bytes=True,
)
