"""Gaussian actor (SAC-style): one ``forward`` program computing ``select_action`` with its noise as an input.

``select_action`` samples ``TanhMultivariateNormalDiag(mean, std)``. Exporting the distribution leaves
non-core ops (``linalg_cholesky_ex``, ``normal_functional``) and an RNG op that ``to_executorch`` cannot
take. The program computes the same reparameterised sample in closed form, with the standard-normal draw
as the input ``noise``. LeRobot builds the base distribution as ``MultivariateNormal(mean,
diag_embed(std))``, whose second argument is the *covariance*, so the sample is ``tanh(mean + sqrt(std) *
noise)``; ``eager_chunk`` runs the policy's own ``select_action`` with its draw replaced by the same noise,
which checks the closed form on every frame compared.

Features follow the policy's default ``dataset_stats``: one 3-channel camera (128×128, the HIL-SERL crop
size), a 2-dim state, 3-dim actions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lerobot.configs import FeatureType

from worker.trace.policies.adapters._common import (
    Features,
    build_policy,
    config_dict,
    export_program,
    single_program_plan,
)
from worker.trace.policies.adapters._randomness import replay
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.registry import register

FEATURES: Features = {
    "observation.image": (FeatureType.VISUAL, (3, 128, 128)),
    "observation.state": (FeatureType.STATE, (2,)),
    "action": (FeatureType.ACTION, (3,)),
}

SUBSTITUTION = (
    "TanhMultivariateNormalDiag(mean, std).rsample() in select_action -> tanh(mean + sqrt(std) * noise) "
    "with the standard-normal draw as the input 'noise' (MultivariateNormal's cholesky and RNG ops removed; "
    "equal to select_action given the same draw)"
)


class _ActorSample(torch.nn.Module):
    """The actor's reparameterised sample with its noise given: ``select_action`` without the RNG."""

    policy: Any  # GaussianActorPolicy: its actor's parts are read by name

    def __init__(self, policy: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.policy = policy
        self.names = names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        *observation, noise = args
        batch = dict(zip(self.names, observation, strict=True))
        actor = self.policy.actor
        cache = None
        if self.policy.shared_encoder and actor.encoder.has_images:
            cache = actor.encoder.get_cached_image_features(batch)
        hidden = actor.network(actor.encoder(batch, cache=cache, detach=actor.encoder_is_shared))
        mean = actor.mean_layer(hidden)
        if actor.fixed_std is None:
            std = torch.clamp(torch.exp(actor.std_layer(hidden)), actor.std_min, actor.std_max)
        else:
            std = actor.fixed_std.expand_as(mean)
        # std is used as the covariance's diagonal upstream, hence the square root.
        return torch.tanh(mean + torch.sqrt(std) * noise)


@register("gaussian_actor")
def trace_gaussian_actor(*, seed: int, checkpoint: Path | None) -> TracedPolicy:
    policy = build_policy("gaussian_actor", seed=seed, checkpoint=checkpoint, features=FEATURES)
    if policy.config.num_discrete_actions is not None:
        raise NotImplementedError(
            "gaussian_actor with discrete actions (num_discrete_actions) is not traced yet"
        )
    features = policy.config.input_features
    action_dim = policy.config.output_features["action"].shape[0]

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        frame = example_observation(features, index, seed=seed)
        frame["noise"] = standard_normal((1, action_dim), seed=seed, index=index, name="noise")
        return frame

    names = tuple(make_frame(0))
    observation_names = names[:-1]
    module = _ActorSample(policy, observation_names)
    program = export_program("forward", module, tuple(make_frame(0).values()), names, ("action",))

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch = {name: frame[name] for name in observation_names}
        with torch.no_grad():
            action = replay(lambda: policy.select_action(batch), [frame["noise"]])
        return {"action": action}

    return TracedPolicy(
        policy="gaussian_actor",
        programs=[program],
        plan=single_program_plan(names, ("action",)),
        eager={"forward": module},
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        config=config_dict(policy),
        substitutions=[SUBSTITUTION],
        seed=seed,
        checkpoint=None if checkpoint is None else str(checkpoint),
    )
