"""Small local checkpoints of real LeRobot policies, saved by LeRobot's own ``save_pretrained``.

A checkpoint is a policy at its own code path with a few sizes shrunk (fewer layers, narrower widths,
fewer denoising steps), so that tests whose subject is not the policy's size (the engine's weighting of a
step program by its runs, a runner on a real bundle) lower it in seconds instead of minutes; the full-size
policies keep their own tests.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lerobot.configs import FeatureType
from lerobot.policies.factory import get_policy_class

from worker.trace.policies.adapters._common import Features, default_config

# diffusion with a 64x64 camera, a two-level U-Net and four DDPM steps
SMALL_DIFFUSION_FEATURES: Features = {
    "observation.image": (FeatureType.VISUAL, (3, 64, 64)),
    "observation.state": (FeatureType.STATE, (2,)),
    "action": (FeatureType.ACTION, (2,)),
}
SMALL_DIFFUSION: dict[str, object] = {
    "pretrained_backbone_weights": None,
    "down_dims": (32, 64),
    "horizon": 16,
    "n_action_steps": 8,
    "num_inference_steps": 4,
}

# act with a 96x96 camera and a one-layer, 64-wide transformer
SMALL_ACT_FEATURES: Features = {
    "observation.images.top": (FeatureType.VISUAL, (3, 96, 96)),
    "observation.state": (FeatureType.STATE, (6,)),
    "action": (FeatureType.ACTION, (6,)),
}
SMALL_ACT: dict[str, object] = {
    "pretrained_backbone_weights": None,
    "dim_model": 64,
    "dim_feedforward": 128,
    "n_heads": 2,
    "n_encoder_layers": 1,
    "n_decoder_layers": 1,
    "chunk_size": 10,
    "n_action_steps": 10,
}


def save_small_checkpoint(path: Path, policy_type: str, features: Features, **overrides: object) -> Path:
    """Build ``policy_type`` from its default config with ``overrides`` (seed 1) and save it at ``path``."""
    from worker.trace.policies.adapters import multi_task_dit

    config = default_config(policy_type, features, overrides)
    torch.manual_seed(1)
    with multi_task_dit.offline_clip_towers():
        policy = get_policy_class(policy_type)(config=config)
    policy.save_pretrained(path)
    return path
