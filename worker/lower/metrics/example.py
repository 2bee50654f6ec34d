"""Describe a representative node of a blocker group as plain JSON: its op, and each argument's shape,
dtype and kind (a forward input, or a parameter / buffer / constant of the program), or its value.

The description is what ``worker.repros.script`` turns into a standalone repro, and what the result
document keeps as the group's ``example``. A node whose op or arguments cannot be written back as
Python (a higher-order op, a symbolic size) is described with ``unsupported`` saying why.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.export import ExportedProgram

from worker.lower.metrics.graph import aten_target, op_name


class NotExpressible(Exception):
    """The node cannot be written as a one-op module."""


def _constant_kinds(ep: ExportedProgram) -> dict[str, str]:
    signature = ep.graph_signature
    kinds = {name: "param" for name in signature.inputs_to_parameters}
    kinds.update({name: "buffer" for name in signature.inputs_to_buffers})
    kinds.update({name: "constant" for name in signature.inputs_to_lifted_tensor_constants})
    return kinds


def _tensor(value: torch.Tensor, kind: str) -> dict[str, Any]:
    if any(not isinstance(size, int) for size in value.shape):
        raise NotExpressible(f"symbolic shape {tuple(value.shape)}")
    return {
        "kind": "tensor",
        "shape": [int(size) for size in value.shape],
        "dtype": str(value.dtype).removeprefix("torch."),
        "source": kind,
    }


def _value(arg: Any, kinds: dict[str, str]) -> dict[str, Any]:
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        if isinstance(val, torch.Tensor):
            kind = kinds.get(arg.name, "input") if arg.op == "placeholder" else "input"
            return _tensor(val, kind)
        if isinstance(val, bool | int | float):
            return _value(val, kinds)
        raise NotExpressible(f"argument {arg.name} has no tensor metadata ({type(val).__name__})")
    if isinstance(arg, list | tuple):
        return {"kind": "list", "items": [_value(item, kinds) for item in arg]}
    if isinstance(arg, float) and not math.isfinite(arg):
        return {"kind": "expr", "value": f"float({str(arg)!r})"}
    if arg is None or isinstance(arg, bool | int | float | str):
        return {"kind": "value", "value": arg}
    if isinstance(arg, torch.dtype | torch.memory_format | torch.layout):
        return {"kind": "expr", "value": str(arg)}
    if isinstance(arg, torch.device):
        return {"kind": "expr", "value": f"torch.device({str(arg)!r})"}
    raise NotExpressible(f"argument of type {type(arg).__name__}")


def describe(node: torch.fx.Node, ep: ExportedProgram) -> dict[str, Any]:
    """The node as JSON; ``{"op": ..., "unsupported": why}`` when it cannot be written back."""
    name = op_name(node)
    target = aten_target(node)
    if not isinstance(target, torch._ops.OpOverload):
        return {"op": name, "unsupported": f"{name} is not an ATen operator overload"}
    kinds = _constant_kinds(ep)
    try:
        args = [_value(arg, kinds) for arg in node.args]
        kwargs = {key: _value(arg, kinds) for key, arg in node.kwargs.items()}
    except NotExpressible as why:
        return {"op": name, "unsupported": str(why)}
    return {"op": name, "args": args, "kwargs": kwargs}
