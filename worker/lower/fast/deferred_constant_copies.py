"""Check a program once after duplicating the constants its partitions share, not once per constant.

Before cutting partitions, ExecuTorch's ``to_backend`` calls ``_maybe_duplicate_constant_nodes`` for every
partition tag: a constant (a weight, a buffer) used by several partitions gets one copy per extra user,
so each delegate owns its data. Each duplicated constant goes through ``duplicate_constant_node``, which
ends with ``exported_program.graph_module.recompile()`` and ``exported_program._validate()``: Python
source generation and the verifier for the *whole* program, once per shared constant. A policy whose
weights are reused across partitions pays that many times over (tdmpc's planner reuses its ensemble's
weights in every planning iteration: 140 partitions, thousands of copies); see
``_duplicate_then_check_once``.

Neither call changes the program: source generation has no effect on the graph and the verifier only
raises. Deferring both to the end of the duplication loop gives the same placeholders, the same names,
the same signature and the same ``.pte``; a program the verifier would refuse is still refused, before
any partition is cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import executorch.exir.backend.backend_api as backend_api
from torch.export import ExportedProgram

from worker.lower.fast.patching import replaced_attributes

__all__ = ["deferred_constant_copy_checks"]


def _do_nothing() -> None:
    return None


def _duplicate_then_check_once(
    duplicate: Callable[[ExportedProgram, str], None], pending: list[ExportedProgram]
) -> Callable[[ExportedProgram, str], None]:
    """``_maybe_duplicate_constant_nodes`` unchanged, minus the per-constant recompile and verifier run.

    Works around ``executorch.exir.backend.canonical_partitioners.duplicate_constant_node_pass
    .duplicate_constant_node``, which recompiles and validates the whole program after each constant it
    copies. Both methods are shadowed by no-ops on the program and its graph module for the duration of
    the call, and the program is queued: what ``to_backend`` calls right after the duplication loop
    (``_partition_and_lower`` for one program, ``_create_partitions`` for a method map) recompiles and
    validates it once before it cuts anything.
    """

    def maybe_duplicate_constant_nodes(program: ExportedProgram, tag: str) -> None:
        program._validate = _do_nothing  # type: ignore[method-assign,misc]  # shadows the (final) method
        program.graph_module.recompile = _do_nothing  # shadows the method
        try:
            duplicate(program, tag)
        finally:
            del program._validate
            del program.graph_module.recompile
        if not any(queued is program for queued in pending):
            pending.append(program)

    return maybe_duplicate_constant_nodes


def _check_before_partitioning(
    partition: Callable[..., Any], pending: list[ExportedProgram]
) -> Callable[..., Any]:
    """``partition`` unchanged, after the deferred recompile and validation of each queued program."""

    def check_then_partition(*args: Any, **kwargs: Any) -> Any:
        while pending:
            program = pending.pop(0)
            program.graph_module.recompile()
            program._validate()
        return partition(*args, **kwargs)

    return check_then_partition


@contextmanager
def deferred_constant_copy_checks() -> Iterator[None]:
    """Within the block, ``to_backend`` checks each program once after duplicating shared constants.

    Process-global and not thread-safe, like the attributes it replaces.
    """
    pending: list[ExportedProgram] = []
    replacements = {
        "_maybe_duplicate_constant_nodes": _duplicate_then_check_once(
            backend_api._maybe_duplicate_constant_nodes, pending
        ),
        "_partition_and_lower": _check_before_partitioning(backend_api._partition_and_lower, pending),
        "_create_partitions": _check_before_partitioning(backend_api._create_partitions, pending),
    }
    try:
        with replaced_attributes(backend_api, **replacements):
            yield
    finally:
        pending.clear()
