"""Write a blocker group's standalone repro: a one-op ``torch.nn.Module`` lowered with the backend's
partitioner and default options, printing the support check's verdict for the op and whether it was
delegated.

The script needs only torch and the executorch wheel (no coverfarm, no GPU). Its last line is one JSON
object, ``{"op": ..., "reason": ..., "delegated": ...}``, which ``worker.repros.verify`` reads; the
lines before it say the same for a person. Each backend's template is its lowering module's
(``worker.lower.backends.<name>``). Generating the text needs no torch.
"""

from __future__ import annotations

import json
from typing import Any

from worker.lower.backends import all_backends, get_backend

VERDICT_PREFIX = "verdict: "

FLOAT_DTYPES = {"float16", "bfloat16", "float32", "float64", "complex64", "complex128"}


def supported_backends() -> list[str]:
    return sorted(all_backends())


def _tensor_expr(spec: dict[str, Any]) -> str:
    shape, dtype = spec["shape"], spec["dtype"]
    if dtype in FLOAT_DTYPES:
        return f"torch.randn({shape}, dtype=torch.{dtype})"
    # Integer and bool tensors: zeros are valid indices, sizes and masks for any op.
    return f"torch.zeros({shape}, dtype=torch.{dtype})"


class _Writer:
    def __init__(self) -> None:
        self.inputs: list[str] = []  # tensor expressions, in forward order
        self.constants: list[tuple[str, str, str]] = []  # (attribute, tensor expression, kind)

    def arg(self, spec: dict[str, Any]) -> str:
        kind = spec["kind"]
        if kind == "tensor":
            if spec["source"] == "input":
                self.inputs.append(_tensor_expr(spec))
                return f"x{len(self.inputs) - 1}"
            name = f"c{len(self.constants)}"
            self.constants.append((name, _tensor_expr(spec), spec["source"]))
            return f"self.{name}"
        if kind == "list":
            return "[" + ", ".join(self.arg(item) for item in spec["items"]) + "]"
        if kind == "expr":
            return str(spec["value"])
        return repr(spec["value"])


def repro_text(example: dict[str, Any], backend: str, reason: str) -> str:
    """The standalone repro of one blocker group, from its representative node's description."""
    if backend not in supported_backends():
        raise ValueError(f"no repro template for backend {backend!r}")
    if "unsupported" in example:
        raise ValueError(f"{example['op']} cannot be written as a one-op module: {example['unsupported']}")
    template = get_backend(backend).repro
    imports, partitioner, ask = template.imports, template.partitioner, template.ask
    writer = _Writer()
    call = [writer.arg(arg) for arg in example["args"]]
    call += [f"{key}={writer.arg(arg)}" for key, arg in example["kwargs"].items()]
    op = example["op"]
    params = ", ".join(["self", *(f"x{i}" for i in range(len(writer.inputs)))])
    init = ["        super().__init__()"]
    for name, expr, kind in writer.constants:
        if kind == "param":
            init.append(f"        self.{name} = torch.nn.Parameter({expr}, requires_grad=False)")
        else:
            init.append(f'        self.register_buffer("{name}", {expr})')
    inputs = "(" + "".join(f"{expr}, " for expr in writer.inputs).rstrip(" ") + ")"
    ns, opname, overload = op.split(".")
    return f'''"""{op} stays on the CPU with {partitioner}: expected reason {json.dumps(reason)}.

One-op module with the argument shapes, dtypes and kinds of a node the partitioner left on the CPU.
Needs torch and the executorch wheel only; no GPU.
"""

import json
import logging
import re

import torch
{imports}
from executorch.exir import to_edge_transform_and_lower

torch.manual_seed(0)
OP = torch.ops.{ns}.{opname}.{overload}
OP_NAME = "{op}"
PARTITIONER = {partitioner}
{ask}

class Repro(torch.nn.Module):
    def __init__(self):
{chr(10).join(init)}

    def forward({params}):
        return OP({", ".join(call)})


ep = torch.export.export(Repro().eval(), {inputs})
edge, reason = lower_and_ask(ep)
graph = edge.exported_program().graph
names = [str(getattr(n.target, "__name__", "")) for n in graph.nodes if n.op == "call_function"]
delegated = OP_NAME not in names
print(f"{{OP_NAME}}: support check {{'accepts it' if reason is None else 'refuses it: ' + reason}}")
print(f"{{OP_NAME}}: {{'delegated' if delegated else 'stays on the CPU'}}")
print("{VERDICT_PREFIX}" + json.dumps({{"op": OP_NAME, "reason": reason, "delegated": delegated}}))
'''
