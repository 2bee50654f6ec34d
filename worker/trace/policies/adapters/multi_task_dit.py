"""Multi-task DiT: an ``observation`` program (CLIP vision and text towers -> conditioning vector) and a
``denoise_step`` program (diffusion transformer + DDPM update) run ``num_inference_steps`` times (``_ddpm``).

The policy's constructor loads its CLIP towers with ``from_pretrained`` by hub name; offline, the towers are
built from the same architecture configs kept in ``worker.trace.policies.offline_configs`` (random weights
from the seed, or the checkpoint's weights when one is given). LeRobot's model code runs unchanged; only the
``from_pretrained`` lookup is redirected, in ``offline_clip_towers``. The task text is tokenized by a small
stand-in for the CLIP tokenizer (same special tokens, vocabulary size and padded length, right padding).

Features: one 3×224×224 camera (CLIP's input size, so the centre crop keeps it all), a 6-dim state and
6-dim actions (a single SO-100 arm), ``n_obs_steps`` frames of history, and the task's tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_IMAGES, OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS
from transformers import CLIPTextConfig, CLIPTextModel, CLIPVisionConfig, CLIPVisionModel

from worker.trace.policies.adapters._common import Features, Positional, build_policy, config_dict
from worker.trace.policies.adapters._ddpm import DDPMStep, trace_denoiser
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.offline_configs import CLIP_TEXT, CLIP_TOKENIZER, CLIP_VISION
from worker.trace.policies.registry import register

FEATURES: Features = {
    "observation.images.top": (FeatureType.VISUAL, (3, 224, 224)),
    "observation.state": (FeatureType.STATE, (6,)),
    "action": (FeatureType.ACTION, (6,)),
}
TASK = "pick up the red cube and place it in the box"


class _OfflineCLIPVisionModel:
    @staticmethod
    def from_pretrained(name: str, *args: Any, **kwargs: Any) -> CLIPVisionModel:
        return CLIPVisionModel(CLIPVisionConfig(**_known(CLIP_VISION, name)))


class _OfflineCLIPTextModel:
    @staticmethod
    def from_pretrained(name: str, *args: Any, **kwargs: Any) -> CLIPTextModel:
        return CLIPTextModel(CLIPTextConfig(**_known(CLIP_TEXT, name)))


def _known(configs: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    if name not in configs:
        raise ValueError(f"no offline config for {name!r}; known: {sorted(configs)}")
    return configs[name]


@contextlib.contextmanager
def offline_clip_towers() -> Iterator[None]:
    """Build the CLIP towers from local configs instead of downloading them.

    Upstream behaviour worked around: ``CLIPVisionEncoder`` and ``CLIPTextEncoder`` in LeRobot's
    ``modeling_multi_task_dit`` call ``CLIPVisionModel.from_pretrained(name)`` /
    ``CLIPTextModel.from_pretrained(name)`` in their constructors, which needs the hub. Only those two
    names in that one module are redirected, and only while the policy is being built.
    """
    from lerobot.policies.multi_task_dit import modeling_multi_task_dit as modeling

    with (
        mock.patch.object(modeling, "CLIPVisionModel", _OfflineCLIPVisionModel),
        mock.patch.object(modeling, "CLIPTextModel", _OfflineCLIPTextModel),
    ):
        yield


def stand_in_tokens(text: str, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CLIP-tokenizer-shaped ids for ``text``: start, one id per word, end, then end-of-text padding."""
    start, end, vocab = (CLIP_TOKENIZER[k] for k in ("start_of_text", "end_of_text", "vocab_size"))
    words = [
        int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % (start - 256) + 256
        for word in text.lower().split()
    ][: max_length - 2]
    ids = [start, *words, end]
    assert all(0 <= i < vocab for i in ids)
    mask = [True] * len(ids) + [False] * (max_length - len(ids))
    ids += [end] * (max_length - len(ids))
    return torch.tensor([ids], dtype=torch.long), torch.tensor([mask], dtype=torch.bool)


@register("multi_task_dit")
def trace_multi_task_dit(*, seed: int, checkpoint: Path | None) -> TracedPolicy:
    with offline_clip_towers():
        policy = build_policy("multi_task_dit", seed=seed, checkpoint=checkpoint, features=FEATURES)
    config = policy.config
    if not config.is_diffusion or config.noise_scheduler_type != "DDPM":
        raise NotImplementedError("multi_task_dit is traced with its default DDPM diffusion objective only")
    tokens, mask = stand_in_tokens(TASK, config.tokenizer_max_length)

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        frame = example_observation(config.input_features, index, seed=seed, n_obs_steps=config.n_obs_steps)
        frame[OBS_LANGUAGE_TOKENS] = tokens.clone()
        frame[OBS_LANGUAGE_ATTENTION_MASK] = mask.clone()
        return frame

    def conditioning(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # select_action's batch preparation (camera views stacked), then the observation encoder.
        if config.image_features:
            batch[OBS_IMAGES] = torch.stack([batch[key] for key in config.image_features], dim=-4)
        cond: torch.Tensor = policy.observation_encoder.encode(batch)
        return cond

    start = config.n_obs_steps - 1
    chunk = slice(start, start + config.n_action_steps)

    def policy_chunk(frame: dict[str, torch.Tensor]) -> torch.Tensor:
        # _generate_actions through the policy's public parts: its encoder and its objective's sampler.
        cond = conditioning({key: frame[key] for key in names})
        sample = policy.objective.conditional_sample(policy.noise_predictor, 1, cond)
        return sample[:, chunk]

    names = tuple(make_observation(0))
    objective = policy.objective
    step = DDPMStep(
        policy,
        lambda x, t, cond: policy.noise_predictor(x, t, conditioning_vec=cond),
        objective.noise_scheduler,
        objective.num_inference_steps,
        chunk,
    )
    return trace_denoiser(
        "multi_task_dit",
        observation_module=Positional(policy, names, conditioning),
        observation_names=names,
        make_observation=make_observation,
        step=step,
        noise_shape=(1, config.horizon, config.action_feature.shape[0]),
        policy_chunk=policy_chunk,
        draws_initial_noise=True,
        seed=seed,
        checkpoint=checkpoint,
        config=config_dict(
            policy,
            offline_clip_configs={"vision": CLIP_VISION, "text": CLIP_TEXT},
            task=TASK,
            tokenizer="stand-in (offline_configs.CLIP_TOKENIZER)",
        ),
    )
