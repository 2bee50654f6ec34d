"""Fake weights: trace and partition a policy whose weights are never materialized.

With ``weights: fake`` the policy is built under a ``FakeTensorMode``: every parameter and buffer is a
``FakeTensor`` (shape, dtype and device only, no storage), so a 3 B-parameter policy costs what its
graph costs, not 12 GB. ``torch.export`` traces it as usual (the fake mode is detected from the
inputs), ``to_edge``, ``constant_prop_pass`` and the partitioners work on shapes and dtypes, which is
all the coverage columns depend on. What needs values cannot run: eager references, and the
serialization of constants into a ``.pte``.

Three places where PyTorch and transformers assume real weights while a policy is built are worked around
here, each in one function (two more, in saving a traced program and in constant propagation, are
``worker.fake_programs``'):

* ``Module.to()`` / ``_apply`` always swaps a ``FakeTensor`` parameter in place with
  ``torch.utils.swap_tensors``, which refuses a tensor that has a weak reference, and every fake
  parameter has one (torch 2.14): ``building_fake`` replaces the parameter object instead, once per
  shared object, so tied weights stay tied.
* ``torch.nn.init.trunc_normal_`` draws by rejection, looping on ``mask.any()`` (torch 2.14,
  ``torch/nn/init.py``), which a fake tensor cannot answer (``DataDependentOutputException``): SigLIP's
  initialisation (pi0, pi05, pi0_fast) does. ``building_fake`` skips the draw for fake tensors, which
  hold no values; real tensors are drawn as usual.
* A ``torch.distributions`` constructor validates its parameters (``constraint.check(value).all()``
  read as a Python bool, torch 2.14), and transformers' ``_init_added_embeddings_weights_with_mean``
  (``resize_token_embeddings``'s initialisation of added rows) branches on
  ``constraints.positive_definite.check(covariance).all()`` of the old rows: neither can be answered
  by a fake tensor. ``building_fake`` turns the distributions' default validation off (VLA-JEPA's
  action head builds a training-time ``Beta``) and skips the added rows' initialisation when the
  old rows are fake (Wall-X resizes its embedding to its tokenizer). Real builds do both as usual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode


def _replacing_apply() -> Callable[..., torch.nn.Module]:
    """A ``Module._apply`` that replaces parameters and buffers instead of swapping them in place, with
    the in-place swap's effect on shared tensors: a tensor held by several modules (an LM head tied to
    the embedding) is replaced by the same new tensor wherever it is met, and a module still holding a
    tensor that was replaced before gets ``fn`` of its latest replacement. The replaced tensors are kept
    alive while building, so their ids are not reused."""
    replaced: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def replacement(old: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        latest = old
        while id(latest) in replaced:
            latest = replaced[id(latest)][1]
        with torch.no_grad():
            applied = fn(latest)
        if applied is latest:  # fn changed nothing (a tie met a second time, say): keep the tensor
            return latest
        if isinstance(latest, torch.nn.Parameter):
            applied = torch.nn.Parameter(applied, requires_grad=latest.requires_grad)
        replaced[id(latest)] = (latest, applied)
        return applied

    def apply(
        self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> torch.nn.Module:
        if recurse:
            for module in self.children():
                module._apply(fn)
        for table in (self._parameters, self._buffers):
            for key, tensor in table.items():
                if tensor is not None:
                    table[key] = replacement(tensor, fn)  # type: ignore[assignment]
        return self

    return apply


@contextlib.contextmanager
def building_fake() -> Iterator[FakeTensorMode]:
    """Inside: tensors that are created are fake, and ``Module.to()`` works on fake parameters.

    Real tensors a constructor makes with ``torch.from_numpy`` (sinusoidal tables, say) are accepted
    and treated as constants (``allow_non_fake_inputs``).
    """
    from torch.distributions import Distribution
    from transformers import PreTrainedModel

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    original_trunc_normal = torch.nn.init._no_grad_trunc_normal_
    mean_init = PreTrainedModel._init_added_embeddings_weights_with_mean
    validate = Distribution._validate_args

    def trunc_normal(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor if is_fake(tensor) else original_trunc_normal(tensor, *args, **kwargs)

    def added_rows(model: Any, old: Any, new: Any, old_count: int, added: int) -> None:
        if not is_fake(old.weight):
            mean_init(model, old, new, old_count, added)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.nn.Module, "_apply", _replacing_apply()))
        stack.enter_context(mock.patch.object(torch.nn.init, "_no_grad_trunc_normal_", trunc_normal))
        stack.enter_context(
            mock.patch.object(PreTrainedModel, "_init_added_embeddings_weights_with_mean", added_rows)
        )
        Distribution.set_default_validate_args(False)
        stack.callback(Distribution.set_default_validate_args, validate)
        with mode:
            yield mode


def is_fake(tensor: object) -> bool:
    return isinstance(tensor, FakeTensor)


@contextlib.contextmanager
def real_tensors() -> Iterator[None]:
    """Inside: tensors that are created are real, also while a policy is built or traced with fake
    weights. For the host's work on the frame: preprocessing (numpy, Python loops over ids), prompt
    building and tokenizing, tables a program takes as constants."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        yield
