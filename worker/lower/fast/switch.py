"""What ``lowering: fast`` switches on around a Vulkan lowering, besides the exact partitioner.

Each piece removes work that upstream repeats for every delegate partition and leaves the lowered
program byte-identical (tests/worker/lower/fast): the pattern-graph cache (``pattern_cache``), one
recompile of the partitioned graph module instead of one per partition (``deferred_recompile``), and one
recompile and verifier run after duplicating the constants partitions share instead of one per copied
constant (``deferred_constant_copies``), node provenance records shared instead of deep-copied each
time a pass re-creates a node (``shared_provenance``, also in ``to_edge``), graph-module code generated
only where it is used (``lazy_recompile``, in ``to_backend`` and ``to_executorch``), and each delegate's
program unlifted once per ``to_executorch`` instead of once per pass (``unlifted_delegates``).

Each is switched on only while the upstream code it replaces is the code it was written against
(``worker.lower.fast.levers``); the lower stage records every lever's state in the result.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager

from worker.lower.fast.levers import ACTIVE, lever_states

__all__ = ["fast_lowering"]

# Each lever's context manager, by lever name (worker.lower.fast.levers); imported only when active, so a
# lever whose upstream is gone on an older stack does not break the others.
_CONTEXTS = {
    "pattern_cache": ("worker.lower.fast.pattern_cache", "cached_pattern_graphs"),
    "deferred_constant_copies": (
        "worker.lower.fast.deferred_constant_copies",
        "deferred_constant_copy_checks",
    ),
    "deferred_recompile": ("worker.lower.fast.deferred_recompile", "deferred_partition_recompile"),
    "shared_provenance": ("worker.lower.fast.shared_provenance", "shared_node_provenance"),
    "lazy_recompile": ("worker.lower.fast.lazy_recompile", "lazy_code_in_backend_and_emit"),
    "unlifted_delegates": ("worker.lower.fast.unlifted_delegates", "unlifted_delegates_once"),
}


def _context(name: str) -> AbstractContextManager[None]:
    module, function = _CONTEXTS[name]
    context: AbstractContextManager[None] = getattr(importlib.import_module(module), function)()
    return context


@contextmanager
def fast_lowering(states: Mapping[str, str] | None = None) -> Iterator[None]:
    """Within the block, lowering skips upstream's repeated per-partition work; restored on exit.

    Only the levers whose state is active (``lever_states()`` unless given) are switched on; the others
    leave upstream as it is."""
    states = lever_states() if states is None else states
    with ExitStack() as stack:
        for name in _CONTEXTS:
            if states.get(name) == ACTIVE:
                stack.enter_context(_context(name))
        yield
