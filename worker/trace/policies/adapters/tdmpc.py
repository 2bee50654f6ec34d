"""TD-MPC: one ``forward`` program: encode, CEM planning over the latent model (``plan``), clamp to [-1, 1].

Features are those of the xarm lift task TD-MPC's defaults are tuned for: one 3×84×84 camera, a 4-dim
state, 4-dim actions. Planning samples (policy-prior noise, CEM Gaussian noise, the random pair of Q heads,
the final elite pick): every draw is a program input (see ``_sampled``), and the final elite pick's
``torch.multinomial`` becomes its exponential-race formulation. The chunk is the planned trajectory,
(horizon, batch, action) as ``predict_action_chunk`` returns it, for a freshly reset policy (no warm start).
"""

from __future__ import annotations

from pathlib import Path

import torch
from lerobot.configs import FeatureType

from worker.trace.policies.adapters._common import Features, build_policy, config_dict
from worker.trace.policies.adapters._sampled import MULTINOMIAL_SUBSTITUTION, trace_sampling_policy
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.registry import register

FEATURES: Features = {
    "observation.image": (FeatureType.VISUAL, (3, 84, 84)),
    "observation.state": (FeatureType.STATE, (4,)),
    "action": (FeatureType.ACTION, (4,)),
}


@register("tdmpc")
def trace_tdmpc(*, seed: int, checkpoint: Path | None) -> TracedPolicy:
    policy = build_policy("tdmpc", seed=seed, checkpoint=checkpoint, features=FEATURES)
    features = policy.config.input_features

    def chunk(observation: dict[str, torch.Tensor]) -> torch.Tensor:
        # predict_action_chunk without its observation queue: encode, plan, clamp.
        z = policy.model.encode(observation)
        actions = policy.plan(z) if policy.config.use_mpc else policy.model.pi(z).unsqueeze(0)
        return torch.clamp(actions, -1, +1)

    return trace_sampling_policy(
        "tdmpc",
        policy=policy,
        observation=lambda index: example_observation(features, index, seed=seed),
        chunk_fn=chunk,
        reset=policy.reset,
        seed=seed,
        checkpoint=checkpoint,
        config=config_dict(policy),
        substitutions=[
            "TDMPCPolicy.plan's random draws (torch.randn, torch.randn_like, torch.randint) -> program "
            "inputs recorded from the policy's own run on the seeded global RNG",
            "TDMPCPolicy.plan's elite pick elite_actions[:, pick.squeeze(), arange(B)] (0-dim index read "
            "with .item()) -> the same pick as a 1-element index tensor (a static gather, same elements)",
            MULTINOMIAL_SUBSTITUTION,
        ],
    )
