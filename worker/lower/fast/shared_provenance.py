"""Share the node provenance records that torch.fx copies whenever a pass re-creates a node.

Every ExecuTorch pass that re-traces a program (``ExportPass``, the edge passes, each of
``VulkanBackend.preprocess``'s passes for every partition, ``to_executorch``'s whole-program passes)
re-creates each node inside ``torch.fx.traceback.set_current_meta``, which builds a ``NodeSource`` for
it. ``NodeSource.__init__`` deep-copies the node's whole ``meta["from_node"]`` history (torch 2.14,
``torch/fx/traceback.py``), and that history grows by one level per pass, so the copies grow with the
number of passes a node has been through: on tdmpc about 170,000 of them, 48 s of a 314 s lowering.

A ``NodeSource`` is never changed after it is built (its only writes are in its own constructor and
in its lazily cached string and dict forms), so the copy is replaced by a new list holding the same
``NodeSource`` objects. The list stays a fresh one for each record, as upstream's is, because
``graph_transform_observer`` appends to ``from_node`` lists. Provenance is node metadata only: no graph,
name or ``.pte`` byte depends on whether it was copied (tests/worker/lower/fast/test_shared_provenance.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch.fx.traceback as fx_traceback

from worker.lower.fast.patching import replaced_attributes

__all__ = ["shared_node_provenance"]


def _provenance_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``copy.deepcopy``, except that a list of ``NodeSource`` records becomes a new list of the same
    records. Works around ``NodeSource.__init__``'s ``copy.deepcopy(node.meta["from_node"])``."""
    if type(value) is list and all(type(item) is fx_traceback.NodeSource for item in value):
        return list(value)
    return copy.deepcopy(value, memo)


@contextmanager
def shared_node_provenance() -> Iterator[None]:
    """Within the block, torch.fx's provenance records are shared instead of deep-copied; restored on
    exit. ``torch.fx.traceback`` uses ``copy.copy`` and ``copy.deepcopy`` only; the replacement
    module-level ``copy`` it sees keeps ``copy.copy`` as it is."""
    with replaced_attributes(fx_traceback, copy=SimpleNamespace(copy=copy.copy, deepcopy=_provenance_copy)):
        yield
