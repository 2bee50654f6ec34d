"""What OpenvinoPartitioner takes, the reasons its own support check gives, and the precision its
delegate computes in."""

from __future__ import annotations

import io

import torch
from lowerhelp import blockers, lower_events

from coverfarm.backends.openvino import cpu_inference_precision


class LinearConvElu(torch.nn.Module):
    """A linear, a batch-2 Conv2d and an elu: Vulkan leaves the last two on the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(x), torch.nn.functional.elu(self.conv(image))


INPUTS = (torch.randn(2, 8), torch.randn(2, 3, 8, 8))


def test_linear_conv_and_elu_lower_to_one_delegate_with_nothing_left_on_the_cpu() -> None:
    events = lower_events(LinearConvElu(), INPUTS, backend="openvino")
    assert events["partitioned"]["partitions"] == 1
    assert blockers(events) == {}
    assert events["partitioned"]["ops_on_backend"] == events["edge"]["ops"]
    assert events["partitioned"]["macs_on_backend"] == events["edge"]["macs"] > 0
    assert events["support"]["supported_ops"] == events["edge"]["ops"]
    assert events["lowered"]["delegates"] == 1
    assert events["exported"]["bytes"] > 0


def test_the_delegate_computes_in_the_cpu_plugins_default_precision() -> None:
    """The runtime imports the delegate's compiled model with the CPU plugin's defaults: the imported
    model's own INFERENCE_PRECISION_HINT is what the runner records (``cpu_inference_precision``)."""
    import openvino
    from executorch.backends.openvino.partitioner import OpenvinoPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.export(LinearConvElu().eval(), INPUTS)
    edge = to_edge_transform_and_lower(ep, partitioner=[OpenvinoPartitioner([])])
    blob = edge.exported_program().graph_module.lowered_module_0.processed_bytes
    imported = openvino.Core().import_model(io.BytesIO(blob), "CPU")
    hint = imported.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert hint == cpu_inference_precision()
    assert hint in ("bf16", "f16", "f32")
