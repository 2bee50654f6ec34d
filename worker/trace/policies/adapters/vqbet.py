"""VQ-BeT: one ``forward`` program: ResNet-18 encoder, GPT, and the code-sampling head (``rollout=True``).

Features are those of LeRobot's ``pusht`` environment (the 96×96 image of the pusht dataset, 2-dim state
and action) with ``n_obs_steps`` frames of history stacked on dim 1. The ImageNet backbone weights cannot
be downloaded here: ``pretrained_backbone_weights`` is None. The head samples its residual-VQ codes with
``torch.multinomial``: the Exp(1) draws behind it are program inputs (see ``_sampled``). The chunk is
``predict_action_chunk``'s: the first ``action_chunk_size`` actions of the model's rollout.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_IMAGES

from worker.trace.policies.adapters._common import Features, build_policy, config_dict
from worker.trace.policies.adapters._sampled import MULTINOMIAL_SUBSTITUTION, trace_sampling_policy
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.registry import register

FEATURES: Features = {
    "observation.image": (FeatureType.VISUAL, (3, 96, 96)),
    "observation.state": (FeatureType.STATE, (2,)),
    "action": (FeatureType.ACTION, (2,)),
}


@register("vqbet")
def trace_vqbet(*, seed: int, checkpoint: Path | None) -> TracedPolicy:
    policy = build_policy(
        "vqbet",
        seed=seed,
        checkpoint=checkpoint,
        features=FEATURES,
        overrides={"pretrained_backbone_weights": None},
    )
    config = policy.config

    def chunk(observation: dict[str, torch.Tensor]) -> torch.Tensor:
        # select_action's camera stacking, then predict_action_chunk on the stacked history.
        batch = dict(observation)
        batch[OBS_IMAGES] = torch.stack([batch[key] for key in config.image_features], dim=-4)
        actions: torch.Tensor = policy.vqbet(batch, rollout=True)[:, : config.action_chunk_size]
        return actions

    return trace_sampling_policy(
        "vqbet",
        policy=policy,
        observation=lambda index: example_observation(
            config.input_features, index, seed=seed, n_obs_steps=config.n_obs_steps
        ),
        chunk_fn=chunk,
        reset=policy.reset,
        seed=seed,
        checkpoint=checkpoint,
        config=config_dict(policy),
        substitutions=[MULTINOMIAL_SUBSTITUTION],
    )
