"""Models from the tracker issue's repros, shared by the tests that use them."""

from __future__ import annotations

import torch


class Blocks(torch.nn.Module):
    """Repro 4 of the tracker issue: an elu side branch per block stays on the CPU."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            a = layer(x)
            x = a * torch.sigmoid(a) + torch.nn.functional.elu(a)
        return x
