"""shared_node_provenance shares torch.fx's provenance records instead of copying them, and changes no
output byte."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx.traceback as fx_traceback
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge_transform_and_lower
from tracker_repros import Blocks

from worker.lower.fast.pattern_cache import cached_pattern_graphs
from worker.lower.fast.shared_provenance import shared_node_provenance


def without_graph_ids(record: dict[str, object]) -> dict[str, object]:
    """A provenance record without its graph ids (``id()`` of graphs, different in every run)."""
    sources = record.get("from_node", [])
    assert isinstance(sources, list)
    return {
        **{key: value for key, value in record.items() if key not in ("graph_id", "from_node")},
        "from_node": [without_graph_ids(source) for source in sources],
    }


def pte_and_provenance(model: torch.nn.Module, example: torch.Tensor) -> tuple[bytes, str, list[object]]:
    """(.pte bytes, the lowered program's code, each node's provenance history)."""
    program = to_edge_transform_and_lower(
        torch.export.export(model, (example,)), partitioner=[VulkanPartitioner()]
    )
    graph_module = program.exported_program().graph_module
    provenance: list[object] = [
        [without_graph_ids(source.to_dict()) for source in node.meta.get("from_node", [])]
        for node in graph_module.graph.nodes
    ]
    return program.to_executorch().buffer, graph_module.code, provenance


def test_pte_code_and_provenance_are_identical() -> None:
    torch.manual_seed(0)
    model, example = Blocks(4).eval(), torch.randn(1, 32)
    with cached_pattern_graphs():
        plain = pte_and_provenance(model, example)
        with shared_node_provenance():
            shared = pte_and_provenance(model, example)
    assert any(repr(p).count("pass_name") > 2 for p in plain[2])  # histories of several passes
    assert shared == plain


def test_records_are_shared_in_a_new_list_and_other_values_deep_copied() -> None:
    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    older = fx_traceback.NodeSource(None, pass_name="first")
    node.meta["from_node"] = [older]
    with shared_node_provenance():
        record = fx_traceback.NodeSource(node, pass_name="second")
        nested = {"a": [1, 2]}
        assert copy.deepcopy(nested) is not nested  # the module's own copy is untouched
    assert record.from_node == [older] and record.from_node[0] is older
    assert record.from_node is not node.meta["from_node"]
    assert fx_traceback.copy is copy
    upstream = fx_traceback.NodeSource(node, pass_name="second")
    assert upstream.from_node[0] is not older and upstream.from_node[0].to_dict() == older.to_dict()


def test_module_is_restored_on_error() -> None:
    with pytest.raises(RuntimeError), shared_node_provenance():
        raise RuntimeError("boom")
    assert fx_traceback.copy is copy
