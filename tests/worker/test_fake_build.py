"""Building under fake weights: the upstream initialisers that need values are skipped for fake tensors
only (``worker.trace.fake_weights.building_fake``)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from worker.trace.fake_weights import building_fake, is_fake


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


def test_distributions_validate_real_parameters_and_skip_fake_ones() -> None:
    with FakeTensorMode(), pytest.raises(DataDependentOutputException):
        torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0))
    with building_fake():
        beta = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0))
    assert is_fake(beta.concentration1)
    with pytest.raises(ValueError, match="to satisfy the constraint"):  # validation is back on outside
        torch.distributions.Beta(torch.tensor(-1.0), torch.tensor(1.0))


def _tiny_language_model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    return LlamaForCausalLM(config)


def test_resized_embeddings_build_fake_and_initialise_real_added_rows_with_the_mean() -> None:
    with building_fake():
        fake = _tiny_language_model()
        fake.resize_token_embeddings(40)
    embedding = fake.get_input_embeddings().weight
    assert is_fake(embedding) and embedding.shape == (40, 16)

    torch.manual_seed(0)
    real = _tiny_language_model()
    old = real.get_input_embeddings().weight.detach().clone()
    real.resize_token_embeddings(40)
    new = real.get_input_embeddings().weight.detach()
    assert torch.equal(new[:32], old)
    assert torch.allclose(new[32:].mean(dim=0), old.mean(dim=0), atol=1e-3)  # drawn around the old mean
