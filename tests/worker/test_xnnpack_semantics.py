"""What XnnpackPartitioner takes and the reasons its own configs give for the rest."""

from __future__ import annotations

import torch
from lowerhelp import blockers, lower_events


class CumsumAfterLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.linear(x), dim=-1)


def test_linear_is_taken_and_an_op_without_config_is_named() -> None:
    events = lower_events(CumsumAfterLinear(), (torch.randn(2, 16),), backend="xnnpack")
    assert events["edge"]["op_histogram"] == {"aten.cumsum.default": 1, "aten.linear.default": 1}
    assert events["edge"]["macs"] == 2 * 16 * 16
    assert events["partitioned"]["partitions"] == 1
    assert events["partitioned"]["macs_on_backend"] == 2 * 16 * 16
    assert blockers(events) == {"aten.cumsum.default": "no operator implementation"}
    assert events["support"]["connected_groups"] == 1


def test_bf16_linear_is_refused_by_xnnpacks_dtype_check() -> None:
    linear = torch.nn.Linear(16, 16).to(torch.bfloat16)
    events = lower_events(linear, (torch.randn(2, 16, dtype=torch.bfloat16),), backend="xnnpack")
    assert events["partitioned"]["partitions"] == 0
    # The linear's dtype check fails, so to_edge decomposes it; the config's WhyNoPartition says why.
    assert blockers(events) == {"aten.addmm.default": "invalid dtype"}
