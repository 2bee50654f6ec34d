"""The lowering workarounds' graph rewrites (``coverfarm.workarounds`` names and describes them).

Each is a transform pass of ``to_edge_transform_and_lower``, run on the edge program after constant
propagation and before the partitioner sees it, so the partitioner judges the rewritten graph as it
would any other. A rewrite computes the same function as the graph it replaces; what it changes is which
kernel the backend runs, which is why a cell lowered with one says so.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from executorch.backends.transforms.utils import create_constant_placeholder
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument
from torch.fx import Node

from coverfarm.workarounds import GROUP_NORM_4D, LAYER_NORM_AFFINE, LOGICAL_NOT_AS_BITWISE_NOT


class GroupNormAs4D(ExportedProgramPassBase):
    """``group_norm_4d``: each ``native_group_norm`` of a 3-D (N, C, L) input computes on the input viewed
    as (N, C, L, 1); the normalized output is viewed back to (N, C, L). ``HxW`` is L either way, and the
    mean and rstd, (N, group), do not change, so only the kernel's input rank does."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        norm = exir_ops.edge.aten.native_group_norm.default
        view = exir_ops.edge.aten.view_copy.default
        renamed: dict[str, str] = {}
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != norm:
                continue
            source = node.args[0]
            value = source.meta.get("val") if isinstance(source, Node) else None
            if value is None or value.dim() != 3:
                continue
            shape = list(value.shape)
            with graph.inserting_before(node):
                wide = _node(graph, view, (source, [*shape, 1]), node.meta, value.view(*shape, 1))
            node.args = (wide, *node.args[1:])
            output, mean, rstd = node.meta["val"]
            node.meta["val"] = (output.view(*shape, 1), mean, rstd)
            for user in list(node.users):
                if user.target is not operator.getitem or user.args[1] != 0:
                    continue
                user.meta["val"] = node.meta["val"][0]
                with graph.inserting_after(user):
                    back = _node(graph, view, (user, shape), user.meta, output)
                user.replace_all_uses_with(back, delete_user_cb=_other_than(back))
                renamed[user.name] = back.name
            modified = True
        if modified:
            _rename_outputs(exported_program, renamed)
            graph.lint()
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, modified)


def _node(graph: torch.fx.Graph, target: Any, args: tuple[Any, ...], meta: dict[str, Any], val: Any) -> Node:
    """A call of ``target`` that keeps the replaced node's provenance (its module stack, stack trace), with
    its own value."""
    node = graph.call_function(target, args)
    node.meta.update({key: item for key, item in meta.items() if key != "val"})
    node.meta["val"] = val
    return node


def _other_than(node: Node) -> Callable[[Node], bool]:
    return lambda user: user is not node


def _rename_outputs(exported_program: ExportedProgram, renamed: dict[str, str]) -> None:
    """A program output that was a rewritten node is now the node that views it back."""
    for spec in exported_program.graph_signature.output_specs:
        if isinstance(spec.arg, TensorArgument) and spec.arg.name in renamed:
            spec.arg = TensorArgument(name=renamed[spec.arg.name])


class LayerNormAffine(ExportedProgramPassBase):
    """``layer_norm_affine``: each ``native_layer_norm`` without a weight (or bias) gets ones (zeros) of its
    normalized shape and its input's dtype as constant parameters, one pair per shape and dtype; x * 1 + 0
    is x, so the function is the same."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        norm = exir_ops.edge.aten.native_layer_norm.default
        user_inputs = _user_inputs(exported_program)
        first_input = next((n for n in graph.nodes if n.op == "placeholder" and n.name in user_inputs), None)
        if first_input is None:  # constants go before the first user input; a program without one has none
            return ExportedProgramPassResult(exported_program, False)
        made: dict[tuple[str, tuple[int, ...], torch.dtype], Node] = {}
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != norm:
                continue
            source, shape, weight, bias = node.args[:4]
            if weight is not None and bias is not None:
                continue
            dtype = source.meta["val"].dtype
            args = list(node.args)
            for index, (fill, given) in enumerate(((1.0, weight), (0.0, bias)), start=2):
                if given is not None:
                    continue
                key = ("ones" if fill else "zeros", tuple(shape), dtype)
                if key not in made:
                    name = f"workaround_layer_norm_{key[0]}_{'x'.join(map(str, shape))}_{str(dtype)[6:]}"
                    with graph.inserting_before(first_input):
                        made[key] = create_constant_placeholder(
                            exported_program, graph, name, InputKind.PARAMETER,
                            torch.full(tuple(shape), fill, dtype=dtype),
                        )  # fmt: skip
                args[index] = made[key]
            node.args = tuple(args)
            modified = True
        if modified:
            graph.lint()
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, modified)


def _user_inputs(exported_program: ExportedProgram) -> set[str]:
    return {
        spec.arg.name
        for spec in exported_program.graph_signature.input_specs
        if spec.kind is InputKind.USER_INPUT and isinstance(spec.arg, TensorArgument)
    }


class LogicalNotAsBitwiseNot(ExportedProgramPassBase):
    """``logical_not_as_bitwise_not``: each ``logical_not`` of a bool tensor becomes ``bitwise_not``,
    which on bools is the same function (a logical_not of another dtype is left as it is)."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        modified = False
        for node in graph.nodes:
            if node.op != "call_function" or node.target != exir_ops.edge.aten.logical_not.default:
                continue
            source = node.args[0]
            if isinstance(source, Node) and source.meta["val"].dtype == torch.bool:
                node.target = exir_ops.edge.aten.bitwise_not.default
                modified = True
        if modified:
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, modified)


REWRITES: dict[str, Callable[[], ExportedProgramPassBase]] = {
    GROUP_NORM_4D.name: GroupNormAs4D,
    LAYER_NORM_AFFINE.name: LayerNormAffine,
    LOGICAL_NOT_AS_BITWISE_NOT.name: LogicalNotAsBitwiseNot,
}


def rewrites(names: tuple[str, ...]) -> list[ExportedProgramPassBase]:
    """The transform passes of ``names``, in their order."""
    return [REWRITES[name]() for name in names]
