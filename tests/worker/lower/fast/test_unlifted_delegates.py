"""unlifted_delegates_once unlifts each delegate's program once per to_executorch, and changes no output
byte."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from executorch.exir.program._program import EdgeProgramManager
from method_calls import counted_calls
from test_deferred_recompile import BLOCKS, TwoHeads, lower
from torch.export import ExportedProgram
from tracker_repros import Blocks

from worker.lower.fast.pattern_cache import cached_pattern_graphs
from worker.lower.fast.switch import fast_lowering
from worker.lower.fast.unlifted_delegates import call_delegate, unlifted_delegates_once


@pytest.fixture
def unlifts() -> Iterator[Counter[int]]:
    """Counts ``ExportedProgram.module()`` calls per program (by id)."""
    with counted_calls(ExportedProgram, "module") as calls:
        yield calls


@pytest.mark.parametrize("name", ["blocks", "two_heads"])
def test_pte_and_lowered_program_are_identical(name: str, unlifts: Counter[int]) -> None:
    torch.manual_seed(0)
    model = (Blocks(BLOCKS) if name == "blocks" else TwoHeads()).eval()
    example = torch.randn(1, 32 if name == "blocks" else 16)
    with cached_pattern_graphs():
        plain = lower(model, example)
        stock_unlifts = unlifts.copy()
        unlifts.clear()
        with unlifted_delegates_once():
            once = lower(model, example)
    with fast_lowering():
        fast = lower(model, example)
    assert once == plain
    assert fast == plain
    assert max(stock_unlifts.values()) > 1  # upstream unlifts a delegate's program once per pass
    assert max(unlifts.values()) == 1


def test_upstream_functions_are_restored_on_error() -> None:
    to_executorch = EdgeProgramManager.to_executorch
    cpu = call_delegate.call_delegate_cpu
    with pytest.raises(RuntimeError), unlifted_delegates_once():
        assert EdgeProgramManager.to_executorch is not to_executorch
        raise RuntimeError("lowering failed")
    assert EdgeProgramManager.to_executorch is to_executorch
    assert call_delegate.call_delegate_cpu is cpu
