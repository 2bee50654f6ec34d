"""Deterministic example observations built from a policy config's input features.

Frame ``i`` of a policy is a pure function of ``(seed, i, feature name)``: every feature gets its own
generator, so adding a feature never changes the others. Images (``VISUAL``) are uniform in [0, 1];
state and environment vectors are standard normal. Shapes are the feature shapes with a batch
dimension of 1 in front, and a time dimension of ``n_obs_steps`` after it when the policy stacks
observation history (diffusion, vqbet, multi_task_dit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import torch
from lerobot.configs import FeatureType, PolicyFeature

_FLOAT_FEATURES = (FeatureType.VISUAL, FeatureType.STATE, FeatureType.ENV)


def frame_generator(seed: int, index: int, name: str) -> torch.Generator:
    """A CPU generator seeded from ``(seed, index, name)`` alone (stable across processes)."""
    digest = hashlib.sha256(f"{seed}:{index}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def feature_tensor(
    feature: PolicyFeature,
    shape: Sequence[int],
    *,
    seed: int,
    index: int,
    name: str,
) -> torch.Tensor:
    generator = frame_generator(seed, index, name)
    if feature.type is FeatureType.VISUAL:
        return torch.rand(tuple(shape), generator=generator, dtype=torch.float32)
    return torch.randn(tuple(shape), generator=generator, dtype=torch.float32)


def example_observation(
    features: Mapping[str, PolicyFeature],
    index: int,
    *,
    seed: int = 0,
    n_obs_steps: int | None = None,
    batch_size: int = 1,
) -> dict[str, torch.Tensor]:
    """Frame ``index``'s observation tensors, one per float input feature, in the features' order."""
    observation: dict[str, torch.Tensor] = {}
    for name, feature in features.items():
        if feature.type not in _FLOAT_FEATURES:
            continue  # language and other non-tensor features are the adapter's business
        steps = () if n_obs_steps is None else (n_obs_steps,)
        shape = (batch_size, *steps, *feature.shape)
        observation[name] = feature_tensor(feature, shape, seed=seed, index=index, name=name)
    return observation


def standard_normal(shape: Sequence[int], *, seed: int, index: int, name: str) -> torch.Tensor:
    """A deterministic standard-normal tensor (initial noise and other per-frame randomness)."""
    return torch.randn(tuple(shape), generator=frame_generator(seed, index, name), dtype=torch.float32)
