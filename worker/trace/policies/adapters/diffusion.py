"""Diffusion Policy: an ``observation`` program (ResNet-18 encoders -> global conditioning) and a
``denoise_step`` program (1D conditional U-Net + DDPM update) run ``num_inference_steps`` times (``_ddpm``).

Features are those of LeRobot's ``pusht`` environment that the defaults are tuned for (the 96×96 image of
the pusht dataset, 2-dim state and action), with ``n_obs_steps`` frames of history stacked on dim 1. The
ImageNet backbone weights cannot be downloaded here: ``pretrained_backbone_weights`` is None.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_IMAGES

from worker.trace.policies.adapters._common import Features, Positional, build_policy, config_dict
from worker.trace.policies.adapters._ddpm import DDPMStep, trace_denoiser
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.registry import register

FEATURES: Features = {
    "observation.image": (FeatureType.VISUAL, (3, 96, 96)),
    "observation.state": (FeatureType.STATE, (2,)),
    "action": (FeatureType.ACTION, (2,)),
}


@register("diffusion")
def trace_diffusion(*, seed: int, checkpoint: Path | None) -> TracedPolicy:
    policy = build_policy(
        "diffusion",
        seed=seed,
        checkpoint=checkpoint,
        features=FEATURES,
        overrides={"pretrained_backbone_weights": None},
    )
    config = policy.config
    model = policy.diffusion

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        return example_observation(config.input_features, index, seed=seed, n_obs_steps=config.n_obs_steps)

    def conditioning(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # predict_action_chunk's preparation of an offline batch, then generate_actions' conditioning.
        if config.image_features:
            batch[OBS_IMAGES] = torch.stack([batch[key] for key in config.image_features], dim=-4)
        return model._prepare_global_conditioning(batch)

    def policy_chunk(frame: dict[str, torch.Tensor]) -> torch.Tensor:
        policy.reset()
        batch = {key: frame[key] for key in names}
        return policy.predict_action_chunk(batch, noise=frame["noise"])

    names = tuple(make_observation(0))
    start = config.n_obs_steps - 1
    step = DDPMStep(
        policy,
        lambda x, t, cond: model.unet(x, t, global_cond=cond),
        model.noise_scheduler,
        model.num_inference_steps,
        slice(start, start + config.n_action_steps),
    )
    return trace_denoiser(
        "diffusion",
        observation_module=Positional(policy, names, conditioning),
        observation_names=names,
        make_observation=make_observation,
        step=step,
        noise_shape=(1, config.horizon, config.action_feature.shape[0]),
        policy_chunk=policy_chunk,
        draws_initial_noise=False,
        seed=seed,
        checkpoint=checkpoint,
        config=config_dict(policy),
    )
