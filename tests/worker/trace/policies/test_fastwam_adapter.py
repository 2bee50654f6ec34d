"""The FastWAM adapter: built offline on small Wan2.2 experts, traced, and its chunk plan equal to the policy.

FastWAM is built by LeRobot's own code with the offline Wan2.2 VAE and UMT5 configs and the tokenizer
stand-in. The tests shrink what the policy's config allows (both DiTs to two layers of two 32-wide heads,
the image to 32×64 so the first frame's latents are 2×4, three denoising steps) and the frozen
components' configs (registered under the checkpoint's name for the test), so the same adapter code runs
in seconds in the policy's bf16; the full-size configs are checked as data (sizes on the meta device),
never built with real weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from lerobot.configs import FeatureType
from test_vla_adapters import check_plan, data_dependent_ops, timed

from coverfarm.offline_causes import NO_OFFLINE_BUILD
from worker.trace.policies import registry
from worker.trace.policies.adapters import _wan, fastwam
from worker.trace.policies.adapters._common import Features
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import wan2_2
from worker.trace.policies.offline.hub import MissingOfflineConfig

SMALL_FEATURES: Features = {
    fastwam.CAMERAS[0]: (FeatureType.VISUAL, (3, 32, 32)),
    fastwam.CAMERAS[1]: (FeatureType.VISUAL, (3, 32, 32)),
    "observation.state": (FeatureType.STATE, (8,)),
    "action": (FeatureType.ACTION, (7,)),
}
SMALL_VIDEO_DIT = {"hidden_dim": 64, "ffn_dim": 128, "freq_dim": 32, "text_dim": 32, "num_heads": 2}
SMALL_VIDEO_DIT |= {"attn_head_dim": 32, "num_layers": 2}
SMALL_ACTION_DIT = {"hidden_dim": 48, "ffn_dim": 96, "freq_dim": 32, "text_dim": 32, "num_heads": 2}
SMALL_ACTION_DIT |= {"attn_head_dim": 32, "num_layers": 2}
SMALL_VAE = {"base_dim": 8, "decoder_base_dim": 8, "num_res_blocks": 1}  # still 48 latents, 16x down
SMALL_UMT5 = {"d_model": 32, "d_ff": 64, "d_kv": 8, "num_heads": 4, "num_layers": 2, "num_decoder_layers": 2}


def small_overrides(**extra: Any) -> dict[str, Any]:
    from lerobot.policies.fastwam.configuration_fastwam import (
        default_action_dit_config,
        default_video_dit_config,
    )

    return {
        "image_size": (32, 64),
        "num_inference_steps": 3,
        "video_dit_config": default_video_dit_config(7) | SMALL_VIDEO_DIT,
        "action_dit_config": default_action_dit_config(7) | SMALL_ACTION_DIT,
        **extra,
    }


def small_components() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    name = wan2_2.WAN2_2_TI2V_5B_DIFFUSERS
    return {name: wan2_2.WAN2_2_VAE_CONFIG | SMALL_VAE}, {name: wan2_2.UMT5_XXL_CONFIG | SMALL_UMT5}


def trace_small(**extra: Any) -> TracedPolicy:
    vaes, encoders = small_components()
    return fastwam.trace_fastwam_with(
        seed=0,
        checkpoint=None,
        overrides=small_overrides(**extra),
        features=SMALL_FEATURES,
        vae_configs=vaes,
        text_encoder_configs=encoders,
    )


@pytest.fixture(scope="module")
def small() -> Iterator[TracedPolicy]:
    """FastWAM on the small experts, traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        yield timed("fastwam (small)", trace_small)


def lerobot_policy(traced: TracedPolicy) -> Any:
    prefix: Any = traced.eager["prefix"]
    return prefix.owner


# --- offline data ---------------------------------------------------------------------------------------


def test_fastwam_is_registered_and_has_no_offline_cause() -> None:
    assert "fastwam" in registry.supported() and "fastwam" not in NO_OFFLINE_BUILD
    assert registry.get_adapter("fastwam") is fastwam.trace_fastwam_with


def test_wan2_2_frozen_components_have_the_published_sizes() -> None:
    from diffusers import AutoencoderKLWan
    from lerobot.policies.fastwam.wan import WanVideoVAE38
    from transformers import UMT5Config, UMT5EncoderModel

    config: Any = UMT5Config(**wan2_2.UMT5_XXL_CONFIG)
    assert (config.d_model, config.num_layers, config.num_heads, config.d_kv) == (4096, 24, 64, 64)
    assert (config.d_ff, config.vocab_size, config.is_gated_act) == (10240, 256384, True)
    with torch.device("meta"):
        encoder = UMT5EncoderModel(config)
        vae: Any = AutoencoderKLWan(**wan2_2.WAN2_2_VAE_CONFIG)
    assert 5.6e9 < sum(p.numel() for p in encoder.parameters()) < 5.8e9
    assert vae.config.z_dim == WanVideoVAE38.z_dim == len(vae.config.latents_mean) == 48
    assert len(vae.config.latents_std) == 48
    assert (vae.config.patch_size, vae.config.scale_factor_spatial) == (2, WanVideoVAE38.upsampling_factor)
    assert wan2_2.VAE_CONFIGS[wan2_2.LINGBOT_VA_BASE] is wan2_2.VAE_CONFIGS[wan2_2.WAN2_2_TI2V_5B_DIFFUSERS]


def test_fastwam_experts_have_the_checkpoint_sizes() -> None:
    from lerobot.policies.fastwam.configuration_fastwam import (
        default_action_dit_config,
        default_video_dit_config,
    )
    from lerobot.policies.fastwam.wan import ActionDiT, WanVideoDiT

    with torch.device("meta"):
        video = WanVideoDiT(**default_video_dit_config(7))
        action = ActionDiT(**default_action_dit_config(7))
    assert 4.9e9 < sum(p.numel() for p in video.parameters()) < 5.1e9
    assert 0.9e9 < sum(p.numel() for p in action.parameters()) < 1.1e9


def test_stand_in_umt5_tokenizer_pads_to_max_length() -> None:
    tokenizer = wan2_2.StandInUMT5Tokenizer()
    encoded = tokenizer(["Pick up the cube"], padding="max_length", truncation=True, max_length=8)
    ids, mask = encoded.input_ids, encoded["attention_mask"]
    assert ids.shape == mask.shape == (1, 8) and ids.dtype == mask.dtype == torch.long
    assert ids[0, 4] == 1 and (ids[0, 5:] == 0).all() and mask[0].tolist() == [1] * 5 + [0] * 3
    assert ((ids[0, :4] >= 3) & (ids[0, :4] < 256000)).all()
    truncated = tokenizer("a b c d e f g h i", padding="max_length", truncation=True, max_length=4)
    assert truncated.input_ids[0, -1] == 1 and truncated.attention_mask.all()


def test_the_scheduled_plan_reads_a_time_and_a_step_size_per_step() -> None:
    from worker.trace.policies.adapters._common import prefix_then_steps_plan
    from worker.trace.policies.base import Call

    times = [torch.tensor([1000.0]), torch.tensor([500.0])]
    deltas = [torch.tensor(-0.5), torch.tensor(-0.5)]
    prefix = Call("prefix", ("a",), ("c",))
    steps = {"first_sample": "noise", "sample": "x", "chunk": "action", "times": times}
    plan = prefix_then_steps_plan(prefix, ("c",), **steps, per_step={"dt": deltas})
    assert plan.frame_inputs == ("a", "noise") and plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 2}
    assert plan.calls[1].inputs == ("c", "noise", "t.00", "dt.00")
    assert plan.calls[2].outputs == ("x.02", "action")
    assert torch.equal(plan.constants["dt.01"], deltas[1])
    with pytest.raises(ValueError, match="2 times but 1 values of 'dt'"):
        prefix_then_steps_plan(prefix, ("c",), **steps, per_step={"dt": deltas[:1]})


def test_real_rotation_is_the_complex_product_bit_for_bit() -> None:
    from lerobot.policies.fastwam.wan.model import rope_apply, rope_params

    freqs = torch.cat([rope_params(64, 8), rope_params(64, 4), rope_params(64, 4)], dim=1)  # head_dim 16
    grid = (1, 3, 5)
    x = torch.randn(2, 15, 2, 16)
    expected = rope_apply(x, torch.tensor([grid, grid]), freqs)
    rotation = _wan.grid_rotation(freqs, grid, 16)
    got = _wan.static_rope_apply(rotation, 15)(x, torch.tensor([grid, grid]), freqs)
    assert torch.equal(expected, got)


# --- the small policy -----------------------------------------------------------------------------------


def test_fastwam_small_builds_offline_in_the_policys_dtypes(small: TracedPolicy) -> None:
    assert small.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    assert small.substitutions == fastwam.SUBSTITUTIONS
    assert small.program("prefix").input_names == fastwam.PROGRAM_INPUTS
    assert small.program("prefix").output_names == fastwam.PREFIX_OUTPUTS
    assert small.config["video_token_grid"] == [1, 1, 2] and small.config["base_model_id"] is None
    assert small.config["model_dtype"] == "torch.bfloat16" and "stand-in" in str(small.config["tokenizer"])
    model = lerobot_policy(small).model
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.vae.parameters()} == {p.dtype for p in model.text_encoder.parameters()}
    assert next(model.vae.parameters()).dtype == torch.bfloat16
    assert model.vae.latents_mean.dtype == torch.float32  # the latent statistics stay fp32
    assert not model.text_encoder.model.training and not model.vae.vae.training  # as from_pretrained
    times = [small.plan.constants[f"t.{k:02d}"] for k in range(3)]
    assert [t.dtype for t in times] == [torch.bfloat16] * 3 and times[0].item() == 1000.0


def test_fastwam_small_has_no_data_dependent_or_complex_ops(small: TracedPolicy) -> None:
    assert not data_dependent_ops(small, "complex")


def test_fastwam_small_denoise_step_to_edge(small: TracedPolicy) -> None:
    from executorch.exir import to_edge

    to_edge(small.program("denoise_step").exported)


@pytest.mark.parametrize("frame_index", [0, 1])
def test_fastwam_small_plan_equals_predict_action_chunk(small: TracedPolicy, frame_index: int) -> None:
    # The plan through the exported programs, through the eager modules and the policy's own
    # predict_action_chunk (its original code, fed the frame's noise, tokenizing the task itself) agree.
    action = check_plan(small, frame_index, exact_eager_chunk=True)
    assert action.shape == (1, 32, 7) and action.dtype == torch.float32


def test_fastwam_static_prefix_is_checked(small: TracedPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = lerobot_policy(small)
    frame = small.make_frame(0)
    prompt = policy.config.prompt_template.format(task=fastwam.TASK)
    prefix: Any = small.eager["prefix"]
    with torch.no_grad():
        static = prefix(*(frame[key] for key in fastwam.PROGRAM_INPUTS))
    fastwam.check_static_prefix(policy, frame, prompt, static)
    keys = static[2]
    with pytest.raises(SubstitutionMismatch, match="video_keys"):
        fastwam.check_static_prefix(policy, frame, prompt, (*static[:2], keys + 1e-2, static[3]))
    real_zeroed = _wan.zeroed_after
    monkeypatch.setattr(_wan, "zeroed_after", lambda e, n: real_zeroed(e, n - 1))
    with torch.no_grad():
        shifted = prefix(*(frame[key] for key in fastwam.PROGRAM_INPUTS))
    with pytest.raises(SubstitutionMismatch, match="context"):
        fastwam.check_static_prefix(policy, frame, prompt, shifted)


def test_fastwam_traces_with_fake_weights(tmp_path: Path) -> None:
    from worker.fake_programs import to_meta
    from worker.trace.fake_weights import building_fake, is_fake

    with building_fake():
        policy = trace_small(num_inference_steps=2)
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 2}
    assert is_fake(next(iter(policy.program("denoise_step").exported.state_dict.values())))
    for program in policy.programs:  # the trace stage saves them with meta weights, the lower stage loads
        torch.export.save(to_meta(program.exported), tmp_path / f"{program.name}.pt2")
        loaded = torch.export.load(tmp_path / f"{program.name}.pt2")
        assert len(list(loaded.graph.nodes)) == len(list(program.exported.graph.nodes))


def test_fastwam_unknown_vae_is_a_one_line_cause() -> None:
    _, encoders = small_components()
    vaes: Mapping[str, dict[str, Any]] = {"someone/other-wan": wan2_2.WAN2_2_VAE_CONFIG}
    with pytest.raises(MissingOfflineConfig, match="no offline VAE config for 'Wan-AI/") as error:
        fastwam.trace_fastwam_with(
            seed=0,
            checkpoint=None,
            overrides=small_overrides(),
            features=SMALL_FEATURES,
            vae_configs=vaes,
            text_encoder_configs=encoders,
        )
    assert "\n" not in str(error.value)


def test_fastwam_small_config_is_recorded(small: TracedPolicy) -> None:
    assert small.config["type"] == "fastwam" and small.config["task"] == fastwam.TASK
    assert small.config["num_inference_steps"] == 3 and small.config["torch_dtype"] == "bfloat16"
    assert dataclasses.asdict(small.plan.calls[0])["program"] == "prefix"
