"""A program traced with fake weights (``worker.trace.fake_weights``) across a save and a load, and through
constant propagation: the trace stage saves it, the lower stage loads and partitions it.

Two places where PyTorch and ExecuTorch assume real weights are worked around here:

* ``torch.export.save`` writes a fake tensor's (absent) storage as if it were real and the file does
  not load back: ``to_meta`` swaps the weights for meta tensors before saving, ``from_meta`` turns
  them into fake tensors of the loaded program's own fake mode after loading. ``torch.export.save``
  also groups tensors by storage pointer and dtype (``group_weights`` in torch 2.14's
  ``pt2_archive``), and every meta tensor and every empty real tensor has pointer 0: an empty real
  constant (transformers' attention keeps some) would be saved as the base of the meta tensors of its
  dtype, and ``torch.export.load`` then fails (``setStorage ... out of bounds for storage of size 0``).
  ``to_meta`` makes empty constants meta tensors too; they hold no values.
* ``constant_prop_pass`` records each folded tensor as its placeholder's ``FakeTensor.constant``,
  which FakeTensorMode expects to be a real tensor (``invalidate_constant_aliases`` asserts it):
  ``forget_fake_constants`` clears those that are fake.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.export import ExportedProgram


def _is_fake(tensor: object) -> bool:
    return isinstance(tensor, FakeTensor)


def _meta_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")


def to_meta(ep: ExportedProgram) -> ExportedProgram:
    """The program with every fake weight, constant and example input, and every empty constant,
    replaced by a meta tensor, ready to save."""
    if ep.example_inputs is not None:
        ep.example_inputs = torch.utils._pytree.tree_map_only(FakeTensor, _meta_like, ep.example_inputs)
    for table in (ep.state_dict, ep.constants):
        for name, value in list(table.items()):
            if isinstance(value, torch.Tensor) and (_is_fake(value) or value.numel() == 0):
                meta = _meta_like(value)
                table[name] = (
                    torch.nn.Parameter(meta, requires_grad=False)
                    if isinstance(value, torch.nn.Parameter)
                    else meta
                )
    return ep


def _fake_mode_of(ep: ExportedProgram) -> FakeTensorMode:
    for node in ep.graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder" and isinstance(value, FakeTensor):
            return value.fake_mode
    raise ValueError("the program has no fake placeholder values to take a fake mode from")


def has_meta_weights(ep: ExportedProgram) -> bool:
    return any(
        isinstance(v, torch.Tensor) and v.device.type == "meta"
        for table in (ep.state_dict, ep.constants)
        for v in table.values()
    )


def from_meta(ep: ExportedProgram) -> ExportedProgram:
    """A loaded program's meta weights as fake tensors on the device the graph expects."""
    mode = _fake_mode_of(ep)
    expected: dict[str, Any] = {}
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            expected[node.name] = node.meta.get("val")
    devices = {
        spec.target: expected.get(spec.arg.name)
        for spec in ep.graph_signature.input_specs
        if spec.target is not None and hasattr(spec.arg, "name")
    }
    for table in (ep.state_dict, ep.constants):
        for name, value in list(table.items()):
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                val = devices.get(name)
                device = val.device if isinstance(val, torch.Tensor) else torch.device("cpu")
                fake = mode.fake_tensor_converter.from_meta_and_device(mode, value, device)
                table[name] = (
                    torch.nn.Parameter(fake, requires_grad=False)
                    if isinstance(value, torch.nn.Parameter)
                    else fake
                )
    return ep


def forget_fake_constants(ep: ExportedProgram) -> ExportedProgram:
    """Clear the ``FakeTensor.constant`` that ``constant_prop_pass`` set to a fake folded value."""
    for node in ep.graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder" and isinstance(value, FakeTensor) and _is_fake(value.constant):
            value.constant = None
    return ep
