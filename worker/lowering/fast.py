"""What ``lowering: fast`` switches on around a Vulkan lowering, besides the exact partitioner.

Each piece removes work that upstream repeats for every delegate partition and leaves the lowered
program byte-identical (tests/worker/lowering): the pattern-graph cache (``pattern_cache``), one
recompile of the partitioned graph module instead of one per partition (``deferred_recompile``), and one
recompile and verifier run after duplicating the constants partitions share instead of one per copied
constant (``deferred_constant_copies``), node provenance records shared instead of deep-copied each
time a pass re-creates a node (``shared_provenance``, also in ``to_edge``), graph-module code generated
only where it is used (``lazy_recompile``, in ``to_backend`` and ``to_executorch``), and each delegate's
program unlifted once per ``to_executorch`` instead of once per pass (``unlifted_delegates``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from worker.lowering.deferred_constant_copies import deferred_constant_copy_checks
from worker.lowering.deferred_recompile import deferred_partition_recompile
from worker.lowering.lazy_recompile import lazy_code_in_backend_and_emit
from worker.lowering.pattern_cache import cached_pattern_graphs
from worker.lowering.shared_provenance import shared_node_provenance
from worker.lowering.unlifted_delegates import unlifted_delegates_once

__all__ = ["fast_lowering"]


@contextmanager
def fast_lowering() -> Iterator[None]:
    """Within the block, lowering skips upstream's repeated per-partition work; restored on exit."""
    with (
        cached_pattern_graphs(),
        deferred_constant_copy_checks(),
        deferred_partition_recompile(),
        shared_node_provenance(),
        lazy_code_in_backend_and_emit(),
        unlifted_delegates_once(),
    ):
        yield
