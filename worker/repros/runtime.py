"""One-op bundles that reproduce a device runtime's refusal of a program the partitioner accepted.

A blocker repro (``worker/repros/script.py``) shows an op the partitioner leaves on the CPU. A runtime
refusal is the opposite: the partitioner delegates the op and the device runtime will not load it. Each
repro here is the op alone, at the shape and argument form that the policy's program gives it, lowered
with the backend's stock partitioner into a bundle the runner runs like any other; on a host whose
runtime refuses the op it fails at load with the same message as the policy's bundle.

``python -m worker.repros.runtime OUT`` writes every repro's bundle under ``OUT/<name>/``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from coverfarm import runtime_repros
from coverfarm.runtime_repros import RuntimeReproRef
from worker.bundle.health import build, single_program


class IndexSecondDim(torch.nn.Module):
    """``x[:, idx]``: ``aten.index.Tensor`` with indices ``[None, idx]`` (vqbet's codebook lookup)."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[:, idx]


class ArgmaxLastDim(torch.nn.Module):
    """``argmax`` over the last dim of a small float tensor (tdmpc's planner picks its elites so)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


class LogicalNot(torch.nn.Module):
    """``logical_not`` of a boolean mask (multi_task_dit inverts its padding mask so)."""

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        return torch.logical_not(mask)


@dataclass(frozen=True)
class RuntimeRepro:
    ref: RuntimeReproRef  # its name, op and the runtime file whose check refuses it
    model: Callable[[], torch.nn.Module]
    examples: Callable[[int], tuple[torch.Tensor, ...]]
    seen_in: tuple[str, ...]  # policies whose bundles the runtime refused with the same message


def _generator(i: int) -> torch.Generator:
    return torch.Generator().manual_seed(i)


REPROS = (
    RuntimeRepro(
        ref=runtime_repros.REFS[0],
        model=IndexSecondDim,
        examples=lambda i: (torch.randn(4, 16, generator=_generator(i)), torch.tensor([3, 0, 7, 7])),
        seen_in=("vqbet",),
    ),
    RuntimeRepro(
        ref=runtime_repros.REFS[1],
        model=ArgmaxLastDim,
        examples=lambda i: (torch.randn(1, 8, 64, generator=_generator(i)),),
        seen_in=("tdmpc",),
    ),
    RuntimeRepro(
        ref=runtime_repros.REFS[2],
        model=LogicalNot,
        examples=lambda i: (torch.rand(1, 32, generator=_generator(i)) > 0.5,),
        seen_in=("multi_task_dit",),
    ),
)


def repro_for(runtime_message: str) -> RuntimeRepro | None:
    """The repro whose runtime source file the refusal names, if any."""
    ref = runtime_repros.for_message(runtime_message)
    return next((r for r in REPROS if r.ref == ref), None)


def build_all(out: Path, backend: str = "vulkan") -> dict[str, Path]:
    written = {}
    for repro in REPROS:
        torch.manual_seed(0)
        name = repro.ref.name
        policy = single_program(name, repro.model(), repro.examples, f"repro-{name}")
        written[name] = build(out / name, backend, policy)
    return written


if __name__ == "__main__":
    for name, path in build_all(Path(sys.argv[1])).items():
        print(name, path)
