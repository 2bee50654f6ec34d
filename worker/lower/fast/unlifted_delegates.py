"""Unlift each delegate's original program once per ``to_executorch`` instead of once per pass.

``to_executorch`` runs a series of whole-program passes, and each re-traces the program with fake
tensors. Every ``executorch_call_delegate`` node it meets runs the lowered module's original program to
get its outputs: ``call_delegate_cpu`` (torch 2.14, ``torch/_higher_order_ops/executorch_call_delegate.py``)
does ``lowered_module.original_module.module()(*args)``, and ``ExportedProgram.module()`` copies and
unlifts the whole program into a new graph module every time. For tdmpc that is 140 delegates times
every pass.

Within the block, the module that ``module()`` returned for a lowered module is kept and run again for
that lowered module, as long as its original program is the same object. The unlifted module holds the
program's own parameter and buffer tensors, not copies, and running its graph does not change the module,
so each call computes what a fresh unlift computes; the outputs only give the traced nodes their
metadata. Same ``.pte`` bytes (tests/worker/lower/fast/test_unlifted_delegates.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from executorch.exir.program._program import EdgeProgramManager
from torch.fx import GraphModule

from worker.lower.fast.patching import replaced_attributes, within

__all__ = ["unlifted_delegates_once"]

# By module path: the package attribute of that name is the operator, not its module.
call_delegate = import_module("torch._higher_order_ops.executorch_call_delegate")


def _reusing_unlifted(
    call_delegate_cpu: Callable[..., Any], unlifted: dict[Any, tuple[Any, GraphModule]]
) -> Callable[..., Any]:
    """``call_delegate_cpu`` unchanged, given a lowered module whose ``original_module.module()``
    returns the module unlifted at its first call (keyed by the lowered module itself)."""

    def call_delegate_cpu_once(lowered_module: Any, *args: Any) -> Any:
        program = lowered_module.original_module
        entry = unlifted.get(lowered_module)
        if entry is None or entry[0] is not program:
            entry = unlifted[lowered_module] = (program, program.module())
        module = entry[1]
        view = SimpleNamespace(original_module=SimpleNamespace(module=lambda: module))
        return call_delegate_cpu(view, *args)

    return call_delegate_cpu_once


def _one_unlift_per_delegate() -> AbstractContextManager[None]:
    """Within the block, ``call_delegate_cpu`` reuses each delegate's unlifted module; the modules are
    dropped with the block."""
    reusing = _reusing_unlifted(call_delegate.call_delegate_cpu, {})
    return replaced_attributes(call_delegate, call_delegate_cpu=reusing)


def unlifted_delegates_once() -> AbstractContextManager[None]:
    """Within the block, ``EdgeProgramManager.to_executorch`` unlifts each delegate's original program
    once per call. Restored on exit; process-global and not thread-safe."""
    to_executorch = within(EdgeProgramManager.to_executorch, _one_unlift_per_delegate)
    return replaced_attributes(EdgeProgramManager, to_executorch=to_executorch)
