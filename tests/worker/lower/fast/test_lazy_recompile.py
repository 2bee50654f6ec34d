"""lazy_code_in_backend_and_emit generates graph-module code only where it is used, and changes no output
byte."""

from __future__ import annotations

import copy
import inspect
import operator
import pickle
from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from executorch.exir.program._program import EdgeProgramManager
from method_calls import counted_calls
from test_deferred_recompile import BLOCKS, TwoHeads, lower
from torch.fx import Graph, GraphModule
from tracker_repros import Blocks

from worker.lower.fast.lazy_recompile import lazy_code_in_backend_and_emit, lazy_graph_module_code
from worker.lower.fast.pattern_cache import cached_pattern_graphs


@pytest.fixture
def code_generations() -> Iterator[Counter[int]]:
    """Counts the generations of Python code per graph (by id)."""
    with counted_calls(Graph, "python_code") as calls:
        yield calls


@pytest.mark.parametrize("name", ["blocks", "two_heads"])
def test_pte_and_lowered_program_are_identical(name: str, code_generations: Counter[int]) -> None:
    torch.manual_seed(0)
    model = (Blocks(BLOCKS) if name == "blocks" else TwoHeads()).eval()
    example = torch.randn(1, 32 if name == "blocks" else 16)
    with cached_pattern_graphs():
        plain = lower(model, example)
        eager_generations = code_generations.total()
        with lazy_code_in_backend_and_emit():
            lazy = lower(model, example)
    assert lazy == plain
    assert code_generations.total() - eager_generations < eager_generations / 2


class AddMul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y) * 2


def traced() -> tuple[GraphModule, Graph]:
    reference = torch.fx.symbolic_trace(AddMul())
    return reference, copy.deepcopy(reference.graph)


def test_code_is_generated_on_first_use_and_is_the_stock_code(code_generations: Counter[int]) -> None:
    reference, graph = traced()
    x, y = torch.randn(3), torch.randn(3)
    stock = GraphModule(reference, copy.deepcopy(graph))
    with lazy_graph_module_code():
        lazy = GraphModule(reference, graph)
        assert code_generations[id(graph)] == 0  # built without generating code
        assert inspect.signature(lazy.forward) == inspect.signature(reference.forward)
    assert code_generations[id(graph)] == 1  # reading forward generated it
    assert torch.equal(lazy(x, y), reference(x, y))
    assert lazy.code == stock.code and str(lazy) == str(stock)


def test_recompile_after_an_edit_regenerates_on_next_use(code_generations: Counter[int]) -> None:
    reference, graph = traced()
    with lazy_graph_module_code():
        lazy = GraphModule(reference, graph)
        assert torch.equal(lazy(torch.ones(2), torch.ones(2)), torch.full((2,), 4.0))
        (mul,) = (node for node in lazy.graph.nodes if node.target is operator.mul)
        mul.args = (mul.args[0], 3)
        lazy.recompile()
        generated = code_generations[id(lazy.graph)]
        assert "3" in lazy.code
        assert code_generations[id(lazy.graph)] == generated + 1
    assert torch.equal(lazy(torch.ones(2), torch.ones(2)), torch.full((2,), 6.0))


def test_pickles_and_copies_like_a_graph_module() -> None:
    reference, graph = traced()
    x, y = torch.randn(3), torch.randn(3)
    with lazy_graph_module_code():
        lazy = GraphModule(reference, graph)
        copied = copy.deepcopy(lazy)
    unpickled = pickle.loads(pickle.dumps(lazy))
    for module in (copied, unpickled):
        assert isinstance(module, GraphModule)
        assert torch.equal(module(x, y), reference(x, y))


def test_recompile_refreshes_pytree_specs_at_once() -> None:
    program = torch.export.export(AddMul(), (torch.randn(3), torch.randn(3)))
    stock = program.module()
    with lazy_graph_module_code():
        lazy = GraphModule(stock, copy.deepcopy(stock.graph))
    assert lazy._in_spec == stock._in_spec and lazy._out_spec == stock._out_spec
    assert lazy._in_spec is not None


def test_children_are_marked_with_their_parent() -> None:
    reference, graph = traced()
    with lazy_graph_module_code():
        child = GraphModule(reference, graph)
        calls_child = Graph()
        x, y = calls_child.placeholder("x"), calls_child.placeholder("y")
        calls_child.output(calls_child.call_module("child", (x, y)))
        parent = GraphModule({"child": child}, calls_child)
        type(child).forward = lambda self, *args: None  # stale code
        parent.recompile()
    assert child(torch.ones(1), torch.ones(1)) is not None  # regenerated from its graph


def test_only_modules_built_in_the_block_are_lazy(code_generations: Counter[int]) -> None:
    reference, graph = traced()
    GraphModule(reference, graph)
    assert code_generations[id(graph)] == 1  # generated at construction, as upstream does


def test_upstream_methods_are_restored_on_error() -> None:
    new = vars(GraphModule)["__new__"]
    to_backend, to_executorch = EdgeProgramManager.to_backend, EdgeProgramManager.to_executorch
    with pytest.raises(RuntimeError), lazy_code_in_backend_and_emit():
        assert EdgeProgramManager.to_backend is not to_backend
        with lazy_graph_module_code():
            assert vars(GraphModule)["__new__"] is not new
            raise RuntimeError("lowering failed")
    assert vars(GraphModule)["__new__"] is new
    assert EdgeProgramManager.to_backend is to_backend and EdgeProgramManager.to_executorch is to_executorch
