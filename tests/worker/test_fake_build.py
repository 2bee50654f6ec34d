"""Building under fake weights: the upstream initialisers that need values are skipped for fake tensors
only (``worker.fake_weights.building_fake``)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from worker.fake_weights import building_fake, is_fake


def test_truncated_normal_needs_values_under_a_plain_fake_mode() -> None:
    with FakeTensorMode(), pytest.raises(DataDependentOutputException):
        torch.nn.init.trunc_normal_(torch.empty(16, 16), std=0.02)


def test_truncated_normal_builds_fake_tensors_and_draws_real_ones_as_torch_does() -> None:
    original = torch.nn.init._no_grad_trunc_normal_
    with building_fake():
        fake = torch.nn.init.trunc_normal_(torch.empty(16, 16), std=0.02)
        torch.manual_seed(0)
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            inside = torch.nn.init.trunc_normal_(torch.empty(16, 16), std=0.02)
    assert is_fake(fake) and fake.shape == (16, 16)
    assert torch.nn.init._no_grad_trunc_normal_ is original
    torch.manual_seed(0)
    outside = torch.nn.init.trunc_normal_(torch.empty(16, 16), std=0.02)
    assert not is_fake(inside) and torch.equal(inside, outside)


def test_to_keeps_tied_weights_tied_under_fake_weights() -> None:
    with building_fake():
        embed = torch.nn.Embedding(10, 4)
        head = torch.nn.Linear(4, 10, bias=False)
        head.weight = embed.weight
        model = torch.nn.Sequential(embed, head).to(dtype=torch.bfloat16)
        assert model[0].weight is model[1].weight and model[1].weight.dtype == torch.bfloat16
        assert isinstance(model[1].weight, torch.nn.Parameter) and is_fake(model[1].weight)
        model.to(dtype=torch.float32)
        assert model[0].weight is model[1].weight and model[0].weight.dtype == torch.float32


def test_a_module_holding_a_replaced_tensor_gets_its_latest_version() -> None:
    # As with torch's in-place swap: converting one holder of a shared tensor converts it for all.
    with building_fake():
        embed = torch.nn.Embedding(10, 4)
        head = torch.nn.Linear(4, 10, bias=False)
        head.weight = embed.weight
        embed.to(dtype=torch.bfloat16)
        head.to(device="cpu")
        assert head.weight is embed.weight and head.weight.dtype == torch.bfloat16
