"""ACT: one ``forward`` program computing ``predict_action_chunk`` (ResNet-18 + transformer decoder).

Features are those of LeRobot's ``aloha`` environment that ACT's defaults are tuned for: the top camera
(3×480×640) and the 14-dim joint state, 14-dim actions. The ImageNet backbone weights cannot be downloaded
here, so ``pretrained_backbone_weights`` is None (random backbone), as recorded in the config.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lerobot.configs import FeatureType

from worker.trace.policies.adapters._common import (
    Features,
    Positional,
    build_policy,
    config_dict,
    export_program,
    single_program_plan,
)
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.registry import register

FEATURES: Features = {
    "observation.images.top": (FeatureType.VISUAL, (3, 480, 640)),
    "observation.state": (FeatureType.STATE, (14,)),
    "action": (FeatureType.ACTION, (14,)),
}


@register("act")
def trace_act(*, seed: int, checkpoint: Path | None) -> TracedPolicy:
    policy = build_policy(
        "act",
        seed=seed,
        checkpoint=checkpoint,
        features=FEATURES,
        overrides={"pretrained_backbone_weights": None},
    )
    features = policy.config.input_features

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        return example_observation(features, index, seed=seed)

    names = tuple(make_frame(0))
    module = Positional(policy, names, policy.predict_action_chunk)
    program = export_program("forward", module, tuple(make_frame(0).values()), names, ("action",))

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {"action": policy.predict_action_chunk(dict(frame))}

    return TracedPolicy(
        policy="act",
        programs=[program],
        plan=single_program_plan(names, ("action",)),
        eager={"forward": module},
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        config=config_dict(policy),
        seed=seed,
        checkpoint=None if checkpoint is None else str(checkpoint),
    )
