"""The policy adapters: each of the six policies builds offline, exports, and its plan computes the chunk.

For every policy, running the chunk plan with the exported programs (``ExportedProgram.module()``) must
equal running it with the eager modules on frame 0, and the policy's own chunk computation
(``eager_chunk``) must equal the plan's output. The denoising policies run their default 100 DDPM steps
far too slowly for a test here, so at the default config only the plan's first calls are compared, and the
whole plan and ``eager_chunk`` are checked on a small checkpoint of the same policy (a few inference
steps, a tiny CLIP for multi_task_dit), which also covers loading a local checkpoint. Every trace of a
policy at its full default size is marked ``real_policy``; the small checkpoints are not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers import DDPMScheduler
from lerobot.configs import FeatureType, PolicyFeature
from small_checkpoints import SMALL_DIFFUSION, SMALL_DIFFUSION_FEATURES, save_small_checkpoint

from worker.trace.policies.adapters._common import Features, policy_features
from worker.trace.policies.adapters._ddpm import DDPMStep
from worker.trace.policies.adapters._randomness import SubstitutionMismatch, record, replay
from worker.trace.policies.base import ChunkPlan, TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.offline_configs import (
    CLIP_TEXT,
    CLIP_VISION,
    CLIP_VIT_BASE_PATCH16_TEXT,
    CLIP_VIT_BASE_PATCH16_VISION,
)
from worker.trace.policies.registry import UnsupportedPolicyError, get_adapter, supported

SIX = ("act", "diffusion", "gaussian_actor", "multi_task_dit", "tdmpc", "vqbet")


def traced(name: str, checkpoint: Path | None = None) -> TracedPolicy:
    """Trace with seed 0 and print how long the adapter took (run pytest with -s to see it)."""
    start = time.monotonic()
    policy = get_adapter(name)(seed=0, checkpoint=checkpoint)
    label = name if checkpoint is None else f"{name} (small checkpoint)"
    print(f"\ntrace {label}: {time.monotonic() - start:.1f} s")
    return policy


def exported_modules(policy: TracedPolicy) -> dict[str, Callable[..., object]]:
    return {program.name: program.exported.module() for program in policy.programs}


def check_record(policy: TracedPolicy) -> None:
    json.dumps(policy.config)
    assert policy.seed == 0
    for program in policy.programs:
        signature = program.exported.graph_signature
        assert len(signature.user_inputs) == len(program.input_names)
        assert len(signature.user_outputs) == len(program.output_names)


def data_dependent_or_random_ops(policy: TracedPolicy) -> set[str]:
    suspects = ("rand", "normal", "multinomial", "exponential", "aten.item", "scalar_dense", "nonzero")
    return {
        str(node.target)
        for program in policy.programs
        for node in program.exported.graph.nodes
        if node.op == "call_function" and any(s in str(node.target) for s in suspects)
    }


def check_whole_plan(policy: TracedPolicy) -> None:
    check_record(policy)
    frame = policy.make_frame(0)
    assert set(frame) == set(policy.plan.frame_inputs)
    exported = policy.plan.run(exported_modules(policy), frame)
    eager = policy.plan.run(policy.eager, frame)
    torch.testing.assert_close(exported, eager)
    if policy.eager_chunk is not None:
        torch.testing.assert_close(policy.eager_chunk(frame), exported)


def check_first_calls(policy: TracedPolicy, calls: int) -> None:
    check_record(policy)
    plan = policy.plan
    head = ChunkPlan(plan.frame_inputs, plan.calls[:calls], plan.calls[calls - 1].outputs, plan.constants)
    frame = policy.make_frame(0)
    torch.testing.assert_close(head.run(exported_modules(policy), frame), head.run(policy.eager, frame))


# --- registry -------------------------------------------------------------------------------------------


def test_unknown_policy_lists_the_six() -> None:
    with pytest.raises(UnsupportedPolicyError) as raised:
        get_adapter("no_such_policy")
    for name in SIX:
        assert name in str(raised.value)
    assert set(SIX) <= set(supported())


def test_unreadable_checkpoint_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=str(tmp_path)):
        get_adapter("act")(seed=0, checkpoint=tmp_path)


# --- observation helper ---------------------------------------------------------------------------------

FEATURES = policy_features(
    {
        "observation.images.top": (FeatureType.VISUAL, (3, 8, 6)),
        "observation.state": (FeatureType.STATE, (5,)),
        "action": (FeatureType.ACTION, (5,)),
    }
)


def test_observation_is_deterministic_per_index() -> None:
    a = example_observation(FEATURES, 3, seed=7)
    b = example_observation(FEATURES, 3, seed=7)
    assert list(a) == ["observation.images.top", "observation.state"]
    assert a["observation.images.top"].shape == (1, 3, 8, 6)
    for key in a:
        assert torch.equal(a[key], b[key])
    image = a["observation.images.top"]
    assert image.min() >= 0.0 and image.max() <= 1.0


def test_observation_differs_between_indices_and_seeds() -> None:
    a = example_observation(FEATURES, 0, seed=0)
    for other in (example_observation(FEATURES, 1, seed=0), example_observation(FEATURES, 0, seed=1)):
        for key in a:
            assert not torch.equal(a[key], other[key])


def test_observation_history_dimension() -> None:
    frame = example_observation(FEATURES, 0, seed=0, n_obs_steps=2)
    assert frame["observation.state"].shape == (1, 2, 5)
    single = {"observation.state": PolicyFeature(FeatureType.STATE, (5,))}
    assert example_observation(single, 0)["observation.state"].shape == (1, 5)


# --- the substitutions, on their own --------------------------------------------------------------------


def test_multinomial_and_draws_replay_equal_the_real_run() -> None:
    logits = torch.randn(6, 16) * 3

    def sample() -> torch.Tensor:
        noise = torch.randn(6, 16) + torch.randn_like(logits)
        pick = torch.multinomial(torch.softmax(logits + noise, -1), 1)
        return pick.float() + torch.randint(0, 5, (6, 1)).float()

    expected, draws, kinds = record(sample, seed=123)
    assert kinds == ["randn", "randn_like", "multinomial", "randint"]
    assert torch.equal(replay(sample, draws), expected)
    with pytest.raises(RuntimeError, match="unused"):
        replay(sample, [*draws, torch.zeros(1)])


def test_recording_notices_a_wrong_multinomial_formulation(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.trace.policies.adapters import _randomness

    monkeypatch.setattr(_randomness, "_exponential_race", lambda p, q: torch.argmin(p / q, -1, keepdim=True))
    probs = torch.softmax(torch.randn(8, 32) * 3, -1)
    with pytest.raises(SubstitutionMismatch):
        record(lambda: torch.multinomial(probs, 1), seed=0)


@pytest.mark.parametrize("steps", [100, 7])
def test_ddpm_step_equals_diffusers_step(steps: int) -> None:
    scheduler: Any = DDPMScheduler(
        num_train_timesteps=100,
        beta_schedule="squaredcos_cap_v2",
        clip_sample=True,
        prediction_type="epsilon",
    )
    owner = torch.nn.Linear(1, 1)

    def predict(x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return torch.sin(x * (t.float().reshape(-1, 1, 1) + 1) + cond.reshape(-1, 1, 1))

    step = DDPMStep(owner, predict, scheduler, steps, slice(1, 3))
    cond = torch.randn(1)
    x = torch.randn(1, 8, 2)
    for t in step.timesteps:
        z = torch.randn(1, 8, 2)
        t_in = torch.full((1,), t, dtype=torch.long)
        output = predict(x, t_in, cond)
        draws = [z] if t > 0 else []
        expected = replay(lambda: scheduler.step(output, t, x).prev_sample, draws)  # noqa: B023
        ours, chunk = step(cond, x, t_in, z)
        torch.testing.assert_close(ours, expected, rtol=1e-6, atol=1e-6)
        assert torch.equal(chunk, ours[:, 1:3])
        x = expected


# --- the six policies -----------------------------------------------------------------------------------


@pytest.mark.real_policy
def test_act() -> None:
    policy = traced("act")
    assert policy.plan.runs_per_chunk() == {"forward": 1}
    assert policy.config["pretrained_backbone_weights"] is None
    check_whole_plan(policy)
    assert policy.eager_chunk is not None
    assert policy.eager_chunk(policy.make_frame(0))["action"].shape == (1, 100, 14)


@pytest.mark.real_policy
def test_gaussian_actor() -> None:
    policy = traced("gaussian_actor")
    assert not data_dependent_or_random_ops(policy)
    assert policy.plan.runs_per_chunk() == {"forward": 1}
    assert len(policy.substitutions) == 1
    check_whole_plan(policy)
    frame = policy.make_frame(1)
    assert policy.eager_chunk is not None
    torch.testing.assert_close(policy.eager_chunk(frame), policy.plan.run(policy.eager, frame))


@pytest.mark.real_policy
def test_tdmpc() -> None:
    policy = traced("tdmpc")
    assert policy.plan.runs_per_chunk() == {"forward": 1}
    assert any("multinomial" in line for line in policy.substitutions)
    assert not data_dependent_or_random_ops(policy)
    # The eager module already ran once at trace time (the substitution check), so this also shows that
    # the CEM warm start does not leak from one chunk into the next: the exported program has no state.
    check_whole_plan(policy)


@pytest.mark.real_policy
def test_vqbet() -> None:
    policy = traced("vqbet")
    assert policy.plan.runs_per_chunk() == {"forward": 1}
    assert not data_dependent_or_random_ops(policy)
    check_whole_plan(policy)
    assert policy.plan.run(policy.eager, policy.make_frame(1))["action"].shape == (1, 5, 2)


@pytest.mark.real_policy
def test_diffusion_default() -> None:
    policy = traced("diffusion")
    assert policy.plan.runs_per_chunk() == {"observation": 1, "denoise_step": 100}
    check_first_calls(policy, 2)


@pytest.mark.real_policy
def test_multi_task_dit_default() -> None:
    policy = traced("multi_task_dit")
    assert policy.plan.runs_per_chunk() == {"observation": 1, "denoise_step": 100}
    assert policy.config["vision_encoder_name"] == "openai/clip-vit-base-patch16"
    check_first_calls(policy, 2)


# --- small checkpoints of the denoisers: the whole plan and the policy's own sampling loop -------------


@pytest.fixture
def small_checkpoint(tmp_path: Path) -> Callable[..., Path]:
    def save(policy_type: str, features: Features, **overrides: object) -> Path:
        return save_small_checkpoint(tmp_path / policy_type, policy_type, features, **overrides)

    return save


def test_diffusion_small_checkpoint(small_checkpoint: Callable[..., Path]) -> None:
    path = small_checkpoint("diffusion", SMALL_DIFFUSION_FEATURES, **SMALL_DIFFUSION)
    policy = traced("diffusion", path)
    assert policy.checkpoint == str(path)
    assert policy.plan.runs_per_chunk() == {"observation": 1, "denoise_step": 4}
    assert [int(policy.plan.constants[f"t.{k:02d}"]) for k in range(4)] == [75, 50, 25, 0]
    check_whole_plan(policy)


TINY_CLIP = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "projection_dim": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "patch_size": 32,
}


def test_multi_task_dit_small_checkpoint(
    small_checkpoint: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    features: Features = {
        "observation.images.top": (FeatureType.VISUAL, (3, 224, 224)),
        "observation.state": (FeatureType.STATE, (6,)),
        "action": (FeatureType.ACTION, (6,)),
    }
    # A tiny CLIP of the same family under a test-only name, so that the whole plan runs in seconds.
    monkeypatch.setitem(CLIP_VISION, "test/tiny-clip", {**CLIP_VIT_BASE_PATCH16_VISION, **TINY_CLIP})
    monkeypatch.setitem(CLIP_TEXT, "test/tiny-clip", {**CLIP_VIT_BASE_PATCH16_TEXT, **TINY_CLIP})
    path = small_checkpoint(
        "multi_task_dit",
        features,
        vision_encoder_name="test/tiny-clip",
        text_encoder_name="test/tiny-clip",
        num_inference_steps=3,
        num_layers=1,
        hidden_dim=64,
    )
    policy = traced("multi_task_dit", path)
    assert policy.plan.runs_per_chunk() == {"observation": 1, "denoise_step": 3}
    check_whole_plan(policy)
