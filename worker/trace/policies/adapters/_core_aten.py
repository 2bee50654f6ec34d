"""Exporting so that ``to_edge`` accepts the program: ``torch.empty_like`` traced as ``torch.empty``.

Upstream behaviour worked around: torch 2.14's decomposition table turns ``aten.empty_like`` into
``aten.empty_permuted``, which ExecuTorch 1.5's edge verifier rejects as not Core ATen
(``SpecViolationError: Operator torch._ops.aten.empty_permuted.default is not in Core ATen opset``), so
any program with an ``empty_like`` (SmolVLA's ``apply_rope`` fills one half by half) never reaches a
partitioner. For a contiguous tensor ``empty_like(x)`` is ``empty(x.shape, dtype=x.dtype)``, which
decomposes to the core ``aten.empty.memory_format``; the replacement is applied only while the program
is exported and is reported, so the adapter records it as a substitution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from worker.trace.policies.adapters._common import export_program
from worker.trace.policies.base import TracedProgram

EMPTY_LIKE_SUBSTITUTION = (
    "torch.empty_like(x) -> torch.empty(x.shape, dtype=x.dtype) while exporting (contiguous x only), because "
    "torch 2.14 decomposes empty_like to aten.empty_permuted, which ExecuTorch 1.5's edge verifier rejects "
    "(the exported program is checked equal to the eager module on the example frame)"
)


class _EmptyLikeAsEmpty(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.replaced = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.empty_like and len(args) == 1 and set(kwargs) <= {"dtype"}:
            x = args[0]
            if x.is_contiguous():
                self.replaced += 1
                return torch.empty(tuple(x.shape), dtype=kwargs.get("dtype", x.dtype), device=x.device)
        return func(*args, **kwargs)


class _Exporting(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module, mode: _EmptyLikeAsEmpty) -> None:
        super().__init__()
        self.inner = inner
        self.mode = mode

    def forward(self, *args: torch.Tensor) -> Any:
        with self.mode:
            return self.inner(*args)


def export_core(
    name: str,
    module: torch.nn.Module,
    example: Sequence[torch.Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> tuple[TracedProgram, bool]:
    """``export_program`` with the ``empty_like`` replacement; also whether anything was replaced."""
    mode = _EmptyLikeAsEmpty()
    program = export_program(name, _Exporting(module, mode), example, input_names, output_names)
    return program, mode.replaced > 0
