"""The LingBot-VA adapter: built offline on a small transformer, its first chunk traced, equal to the policy.

LingBot-VA is built by LeRobot's own code, its frozen VAE, UMT5 encoder and tokenizer loaded through the
policy's own ``_ensure_frozen_modules`` from the offline Wan2.2 configs (shrunk and registered under the
checkpoint's name for the test) and the tokenizer stand-in. The tests shrink what the policy's config
allows (two layers of two 32-wide heads, 32×32 cameras, 2 and 3 denoising steps, 16-token prompts), so the
same adapter code runs in seconds in the policy's bf16. The plan through the exported programs equals the
plan through the eager ones, and both equal the policy's own ``predict_action_chunk`` on a reset policy;
the cache passes' keys and values equal what the policy's key/value cache holds after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lerobot.configs import FeatureType
from test_vla_adapters import check_plan, data_dependent_ops, timed

from coverfarm.offline_causes import NO_OFFLINE_BUILD
from worker.trace.policies import registry
from worker.trace.policies.adapters import _wan, lingbot_va
from worker.trace.policies.adapters._common import Features
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import wan2_2
from worker.trace.policies.offline.hub import MissingOfflineConfig

SMALL_FEATURES: Features = {
    lingbot_va.CAMERAS[0]: (FeatureType.VISUAL, (3, 32, 32)),
    lingbot_va.CAMERAS[1]: (FeatureType.VISUAL, (3, 32, 32)),
    "action": (FeatureType.ACTION, (7,)),
}
SMALL: dict[str, Any] = {
    "num_attention_heads": 2,
    "attention_head_dim": 32,
    "text_dim": 32,
    "freq_dim": 32,
    "ffn_dim": 128,
    "num_layers": 2,
    "height": 32,
    "width": 32,
    "num_inference_steps": 2,
    "action_num_inference_steps": 3,
    "max_sequence_length": 16,
}
SMALL_VAE = {"base_dim": 8, "decoder_base_dim": 8, "num_res_blocks": 1}
SMALL_UMT5 = {"d_model": 32, "d_ff": 64, "d_kv": 8, "num_heads": 4, "num_layers": 2, "num_decoder_layers": 2}


def trace_small(**extra: Any) -> TracedPolicy:
    name = wan2_2.LINGBOT_VA_BASE
    return lingbot_va.trace_lingbot_va_with(
        seed=0,
        checkpoint=None,
        overrides={**SMALL, **extra},
        features=SMALL_FEATURES,
        vae_configs={name: wan2_2.WAN2_2_VAE_CONFIG | SMALL_VAE},
        text_encoder_configs={name: wan2_2.UMT5_XXL_CONFIG | SMALL_UMT5},
    )


@pytest.fixture(scope="module")
def small() -> Iterator[TracedPolicy]:
    """LingBot-VA on the small transformer, traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        yield timed("lingbot_va (small)", trace_small)


def lerobot_policy(traced: TracedPolicy) -> Any:
    module: Any = traced.eager["video_step"]
    return module.owner


# --- offline data ---------------------------------------------------------------------------------------


def test_lingbot_va_is_registered_and_has_no_offline_cause() -> None:
    assert "lingbot_va" in registry.supported() and "lingbot_va" not in NO_OFFLINE_BUILD
    assert registry.get_adapter("lingbot_va") is lingbot_va.trace_lingbot_va_with


def test_lingbot_va_transformer_has_the_checkpoint_size() -> None:
    from lerobot.policies.lingbot_va.configuration_lingbot_va import LingBotVAConfig
    from lerobot.policies.lingbot_va.utils import WanTransformer3DModel

    config = LingBotVAConfig()
    assert config.wan_pretrained_path == wan2_2.LINGBOT_VA_BASE
    with torch.device("meta"):
        transformer = WanTransformer3DModel(
            num_attention_heads=config.num_attention_heads,
            attention_head_dim=config.attention_head_dim,
            ffn_dim=config.ffn_dim,
            num_layers=config.num_layers,
            action_dim=config.action_dim,
        )
    assert 5.0e9 < sum(p.numel() for p in transformer.parameters()) < 5.2e9


def test_scheduler_step_sizes_are_the_steps_own() -> None:
    from lerobot.policies.lingbot_va.utils import FlowMatchScheduler

    scheduler = FlowMatchScheduler(shift=5.0, sigma_min=0.0, extra_one_step=True)
    scheduler.set_timesteps(4)
    deltas = lingbot_va.scheduler_deltas(scheduler, scheduler.timesteps)
    sample, output = torch.randn(3), torch.randn(3)
    for t, delta in zip(scheduler.timesteps, deltas, strict=True):
        assert torch.equal(scheduler.step(output, t, sample), sample + output * delta)
    assert deltas[-1] == -scheduler.sigmas[-1]  # the last step goes to sigma 0


# --- the small policy -----------------------------------------------------------------------------------


def test_lingbot_va_small_traces_the_first_chunk(small: TracedPolicy) -> None:
    assert small.plan.runs_per_chunk() == {
        "text_encoder": 2,
        "encode_frame": 1,
        "video_step": 2,
        "video_cache": 1,
        "action_step": 3,
        "action_cache": 1,
    }
    assert small.substitutions == lingbot_va.SUBSTITUTIONS
    assert small.plan.frame_inputs == lingbot_va.FRAME_INPUTS
    assert small.config["latent_shape"] == [1, 48, 4, 2, 4] and small.config["action_shape"] == [
        1,
        30,
        4,
        4,
        1,
    ]
    assert [t.item() for t in (small.plan.constants["vt.02"], small.plan.constants["at.03"])] == [0.0, 0.0]
    policy = lerobot_policy(small)
    assert {p.dtype for p in policy.transformer.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in policy._frozen["vae"].parameters()} == {torch.bfloat16}
    assert {p.dtype for p in policy._frozen["text_encoder"].parameters()} == {torch.bfloat16}
    cache = small.program("video_cache")
    assert cache.output_names == ("video_keys", "video_values")


def test_lingbot_va_small_has_no_data_dependent_or_complex_ops(small: TracedPolicy) -> None:
    assert not data_dependent_ops(small, "complex", "polar")


def test_lingbot_va_small_action_step_to_edge(small: TracedPolicy) -> None:
    from executorch.exir import to_edge

    to_edge(small.program("action_step").exported)


@pytest.mark.parametrize("frame_index", [0, 1])
def test_lingbot_va_small_plan_equals_predict_action_chunk(small: TracedPolicy, frame_index: int) -> None:
    # The plan through the exported programs, through the eager modules and the policy's own
    # predict_action_chunk (its original code on a reset policy, fed the frame's noise) agree.
    action = check_plan(small, frame_index, exact_eager_chunk=True)
    assert action.shape == (1, 12, 7)  # frame 0's actions are dropped


def test_lingbot_va_static_chunk_is_checked(small: TracedPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = lerobot_policy(small)  # the trace checked it on frame 0 with the real tables
    real = _wan.Rotation.apply

    def shifted(self: _wan.Rotation, pairs: torch.Tensor) -> torch.Tensor:
        return real(self, pairs) * 1.01

    monkeypatch.setattr(_wan.Rotation, "apply", shifted)
    with pytest.raises(SubstitutionMismatch, match="static chunk"):
        lingbot_va.check_static_chunk(policy, small, small.make_frame(0))


def test_lingbot_va_traces_with_fake_weights(tmp_path: Path) -> None:
    from worker.fake_programs import to_meta
    from worker.trace.fake_weights import building_fake, is_fake

    with building_fake():
        policy = trace_small(num_inference_steps=1, action_num_inference_steps=1)
    assert policy.plan.runs_per_chunk()["action_step"] == 1
    assert is_fake(next(iter(policy.program("action_step").exported.state_dict.values())))
    for program in policy.programs[
        :2
    ]:  # saved with meta weights by the trace stage, loaded by the lower stage
        torch.export.save(to_meta(program.exported), tmp_path / f"{program.name}.pt2")
        loaded = torch.export.load(tmp_path / f"{program.name}.pt2")
        assert len(list(loaded.graph.nodes)) == len(list(program.exported.graph.nodes))


def test_lingbot_va_unknown_frozen_repo_is_a_one_line_cause() -> None:
    with pytest.raises(MissingOfflineConfig, match="no offline VAE config for 'someone/other-va'") as error:
        trace_small(wan_pretrained_path="someone/other-va")
    assert "\n" not in str(error.value)
