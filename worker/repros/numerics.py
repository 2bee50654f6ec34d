"""One-op bundles of the op a numerics run found to depart from eager first.

A numerics run (``coverfarm/numerics.py``) names the first op whose output departs from eager, and keeps
the op's node as plain JSON (``NumericsOp.examples``: its op and each argument's shape, dtype and kind,
``worker/lower/metrics/example.py``); a delegate call's ops depart together, and each of them is kept.
Each becomes a module that calls the op alone on random inputs of those shapes, its constants as buffers,
lowered with the backend's stock partitioner into a bundle the runner runs like any other
(``coverfarm runner run-bundle``): on a runtime whose kernel for the op is wrong, its output is wrong.

``python -m worker.repros.numerics RESULT.json OUT`` writes one bundle per kept node of the device
result's first departing op under ``OUT/<i>-<op>/`` and prints each path with the ``--sha256`` that
``coverfarm runner run-bundle`` verifies it by. The description is read as
data: an argument written as an expression is one of the few forms ``example.py`` writes (a dtype,
memory format or layout, ``float('inf')``, ``torch.device('cpu')``), nothing else is evaluated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import torch

from coverfarm.device_result import DeviceResult
from coverfarm.digest import bundle_digest
from worker.bundle.health import build, single_program
from worker.repros.script import FLOAT_DTYPES

_TORCH_ATTR = re.compile(r"torch\.(\w+)")
_FLOAT = re.compile(r"float\('(-?inf|nan)'\)")
_DEVICE = re.compile(r"torch\.device\('([\w:]+)'\)")


class NotBuildable(ValueError):
    """The description cannot be made a one-op module."""


def _expr(text: str) -> Any:
    if found := _TORCH_ATTR.fullmatch(text):
        value = getattr(torch, found.group(1), None)
        if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
            return value
    if found := _FLOAT.fullmatch(text):
        return float(found.group(1))
    if found := _DEVICE.fullmatch(text):
        return torch.device(found.group(1))
    raise NotBuildable(f"argument expression {text!r} is not one a node description holds")


def _op(name: str) -> torch._ops.OpOverload:
    parts = name.split(".")
    if len(parts) != 3:
        raise NotBuildable(f"{name!r} is not an op overload name (namespace.op.overload)")
    namespace, op, overload = parts
    try:
        found = getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        raise NotBuildable(f"{name} is not an operator of this torch") from None
    if not isinstance(found, torch._ops.OpOverload):
        raise NotBuildable(f"{name} is not an operator overload")
    return found


def _tensor(spec: dict[str, Any], generator: torch.Generator) -> torch.Tensor:
    dtype = getattr(torch, str(spec["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise NotBuildable(f"dtype {spec['dtype']!r}")
    shape = [int(size) for size in spec["shape"]]
    if spec["dtype"] in FLOAT_DTYPES:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.zeros(shape, dtype=dtype)  # valid indices, sizes and masks for any op


class OneOp(torch.nn.Module):
    """``example``'s op alone: its forward inputs are the node's input tensors, its parameters,
    buffers and constants are buffers of random values of their shapes."""

    def __init__(self, example: dict[str, Any]) -> None:
        super().__init__()
        if "unsupported" in example:
            raise NotBuildable(f"{example['op']}: {example['unsupported']}")
        self.op = _op(str(example["op"]))
        self.input_specs: list[dict[str, Any]] = []
        generator = torch.Generator().manual_seed(0)
        self._constants = 0

        def template(spec: dict[str, Any]) -> Any:
            kind = spec["kind"]
            if kind == "tensor":
                if spec["source"] == "input":
                    self.input_specs.append(spec)
                    return ("input", len(self.input_specs) - 1)
                name = f"c{self._constants}"
                self._constants += 1
                self.register_buffer(name, _tensor(spec, generator))
                return ("constant", name)
            if kind == "list":
                return [template(item) for item in spec["items"]]
            if kind == "expr":
                return ("value", _expr(str(spec["value"])))
            return ("value", spec["value"])

        self.args = [template(arg) for arg in example.get("args", [])]
        self.kwargs = {key: template(arg) for key, arg in example.get("kwargs", {}).items()}

    def _fill(self, node: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
        if isinstance(node, list):
            return [self._fill(item, inputs) for item in node]
        kind, value = node
        if kind == "input":
            return inputs[value]
        if kind == "constant":
            return getattr(self, value)
        return value

    def forward(self, *inputs: torch.Tensor) -> Any:
        args = [self._fill(arg, inputs) for arg in self.args]
        kwargs = {key: self._fill(arg, inputs) for key, arg in self.kwargs.items()}
        out = self.op(*args, **kwargs)
        # An op of several outputs is checked by its first (native_group_norm's normalized tensor; its
        # mean and rstd are statistics a program rarely reads): a plan names one output per program.
        return out[0] if isinstance(out, tuple | list) else out

    def examples(self, frame: int) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(frame)
        return tuple(_tensor(spec, generator) for spec in self.input_specs)


def build_repros(examples: list[dict[str, Any]], backend: str, out: Path) -> dict[str, Path]:
    """One bundle per buildable example under ``out/<i>-<op>``; {name: bundle} (a node that cannot be
    built is left out, with why on stderr)."""
    written = {}
    for i, example in enumerate(examples):
        name = f"{i}-{str(example.get('op', 'op')).replace('.', '_')}"
        try:
            module = OneOp(example).eval()
        except NotBuildable as why:
            print(f"{name}: no repro: {why}", file=sys.stderr)
            continue
        policy = single_program(name.replace("-", "_"), module, module.examples, f"numerics-repro-{name}")
        written[name] = build(out / name, backend, policy)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m worker.repros.numerics RESULT.json OUT", file=sys.stderr)
        return 2
    result = DeviceResult.model_validate_json(Path(argv[0]).read_text())
    summary = result.numerics.summary if result.numerics is not None else None
    if summary is None or summary.first is None or result.backend is None:
        print(f"{argv[0]}: no numerics run naming a first departing op", file=sys.stderr)
        return 2
    for name, path in build_repros(summary.first.examples, result.backend, Path(argv[1])).items():
        print(name, path, f"--sha256 {bundle_digest(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
