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


class Fn(torch.nn.Module):
    """One function of one input as a module: the tracker's one-op repros (elu, log1p, var, ...)."""

    def __init__(self, fn):  # type: ignore[no-untyped-def]
        super().__init__()
        self.fn = fn

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.fn(x)


class Put(torch.nn.Module):
    """index_put through a boolean-mask write (the tracker's index_put repro)."""

    def forward(self, t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        y = t.clone()
        y[idx] = 0.0
        return y
