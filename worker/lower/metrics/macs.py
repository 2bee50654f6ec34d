"""Heavy math: multiply-adds of matmul, linear, convolution and attention nodes, from node shapes.

The formulas are ``torch.utils.flop_counter``'s (FLOPs = 2 x MACs) where it has one. It has none for
``aten.linear`` (which XNNPACK keeps undecomposed) or for the composite ``scaled_dot_product_attention``,
so those two are counted here with the same conventions.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten

HEAVY_PACKETS = {
    aten.mm,
    aten.addmm,
    aten.bmm,
    aten.baddbmm,
    aten.convolution,
    aten._convolution,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
}


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _aten_op(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    target = getattr(node.target, "_op", node.target)  # EdgeOpOverload -> ATen OpOverload
    return target if isinstance(target, torch._ops.OpOverload) else None


def _linear_macs(x: torch.Tensor, weight: torch.Tensor) -> int:
    return math.prod(x.shape[:-1]) * weight.shape[0] * weight.shape[1]


def _sdpa_macs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    batch = math.prod(q.shape[:-2])
    length, embed = q.shape[-2], q.shape[-1]
    source = k.shape[-2]
    return batch * length * source * (embed + v.shape[-1])


def node_macs(node: torch.fx.Node) -> int:
    """Multiply-adds of one node; 0 for nodes that are not heavy math."""
    if node.op != "call_function":
        return 0
    op = _aten_op(node)
    if op is None:
        return 0
    packet = op.overloadpacket
    args = [_val(a) for a in node.args]
    kwargs = {k: _val(v) for k, v in node.kwargs.items()}
    if packet is aten.linear:
        return int(_linear_macs(args[0], args[1]))
    if packet is aten.scaled_dot_product_attention:
        return int(_sdpa_macs(args[0], args[1], args[2]))
    if packet in HEAVY_PACKETS and packet in flop_registry:
        out = node.meta.get("val")
        flops = flop_registry[packet](*args, out_val=out, **kwargs)
        return int(flops) // 2
    return 0


def is_heavy(node: torch.fx.Node) -> bool:
    op = _aten_op(node) if node.op == "call_function" else None
    if op is None:
        return False
    packet = op.overloadpacket
    return packet in HEAVY_PACKETS or packet in (aten.linear, aten.scaled_dot_product_attention)
