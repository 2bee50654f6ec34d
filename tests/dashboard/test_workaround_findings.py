"""Which recorded workaround avoids the finding a device run shows (``coverfarm.workarounds.avoiding``):
the runtime's refusal in its own words, or the span where a numerics run's output first departs."""

from __future__ import annotations

from coverfarm import workarounds
from coverfarm.device_result import DeviceFailure, DeviceResult
from coverfarm.numerics import NumericsOp, NumericsRun, NumericsSummary
from dashboard.device_details import finding_words


def names(found: list[workarounds.Workaround]) -> list[str]:
    return [w.name for w in found]


def test_a_refusal_in_the_runtime_s_words_names_its_workaround_for_its_backend_only() -> None:
    said = ["NativeLayerNorm.cpp:95: native_layer_norm requires weight to be non-None"]
    assert names(workarounds.avoiding("vulkan", said)) == ["layer_norm_affine"]
    assert workarounds.avoiding("xnnpack", said) == []
    assert workarounds.avoiding("vulkan", said, taken=["layer_norm_affine"]) == []
    assert workarounds.avoiding("vulkan", ["ArgReduce.cpp:28: (graph.is_buffer_storage(in)) is false!"]) == []


def test_a_wrong_output_names_group_norm_4d_where_its_first_departing_span_has_a_group_norm() -> None:
    departs = NumericsOp(
        program="denoise_step", op="aten.exp.default", node="aten_exp_default_2", span=19,
        where="VulkanBackend", max_abs_error=2.31, bound=0.004, departs=True,
        examples=[{"op": "aten.convolution.default"}, {"op": "aten.native_group_norm.default"}],
    )  # fmt: skip
    summary = NumericsSummary(
        atol=1e-3, rtol=1e-3, ops=[departs], first=departs, largest=departs, grain="g", reference_graph="edge"
    )
    failure = DeviceFailure(kind="wrong_output", cause="test case outside tolerance", program="denoise_step")
    run = DeviceResult(
        bundle_sha256="ab" * 32, status="failed", failure=failure,
        numerics=NumericsRun(status="ok", trigger="wrong_output", runtime="r", summary=summary),
    )  # fmt: skip
    assert names(workarounds.avoiding("vulkan", finding_words(run))) == ["group_norm_4d"]
    clean = run.model_copy(update={"numerics": None})
    assert workarounds.avoiding("vulkan", finding_words(clean)) == []
