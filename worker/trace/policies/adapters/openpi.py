"""pi0 and pi05 (openpi's flow-matching VLAs on PaliGemma): a ``prefix`` program (SigLIP + Gemma 2B over
the images and the prompt, once) and an Euler ``denoise_step`` program (the Gemma 300M action expert
reading the prefix's key/value cache) run ``num_inference_steps`` (10) times; see ``_flow``.

Both build without the hub: LeRobot makes PaliGemma's config from transformers' ``CONFIG_MAPPING`` with
openpi's sizes, in the config's default dtype (``dtype="float32"``), with random weights from the seed.
They are ~3.3 B parameters: real fp32 weights take ~13 GB, so on a 24 GB worker the coverage columns come
from a trace with fake weights. The prompt is tokenized by a stand-in with PaliGemma's vocabulary, padded
to ``tokenizer_max_length`` (48 for pi0; 200 for pi05, whose processor also writes the discretised state
into the prompt — the same padded length either way).

pi0's step also reads the padded state (its suffix embeds it); pi05 has the state in the prompt and
conditions the expert with adaRMS on the time instead.

Features are openpi's base layout: three 3×224×224 cameras (base, left wrist, right wrist), a 32-dim state
and 32-dim actions (openpi's padded sizes).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

from worker.trace.policies.adapters._along_plan import predicted_chunk
from worker.trace.policies.adapters._common import Features
from worker.trace.policies.adapters._flow import EulerStep, dynamic_cache, flow_matching, stacked_cache
from worker.trace.policies.adapters._skeleton import TASK, Declared
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.offline import paligemma

FEATURES: Features = {
    "observation.images.base_0_rgb": (FeatureType.VISUAL, (3, 224, 224)),
    "observation.images.left_wrist_0_rgb": (FeatureType.VISUAL, (3, 224, 224)),
    "observation.images.right_wrist_0_rgb": (FeatureType.VISUAL, (3, 224, 224)),
    "observation.state": (FeatureType.STATE, (32,)),
    "action": (FeatureType.ACTION, (32,)),
}
DECLARED = {name: Declared(name, FEATURES) for name in ("pi0", "pi05")}


class _Prefix(torch.nn.Module):
    """Frame inputs -> (stacked prefix keys, values, prefix padding mask[, padded state for pi0])."""

    def __init__(self, policy: Any, names: tuple[str, ...], with_state: bool) -> None:
        super().__init__()
        self.policy = policy
        self.names = names
        self.with_state = with_state

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from lerobot.policies.common.vla_utils import make_att_2d_masks, prepare_attention_masks_4d

        batch = dict(zip(self.names, args, strict=True))
        policy, model = self.policy, self.policy.model
        images, img_masks = policy._preprocess_images(batch)
        tokens, masks = batch[OBS_LANGUAGE_TOKENS], batch[OBS_LANGUAGE_ATTENTION_MASK]
        embs, pad_masks, att_masks = model.embed_prefix(images, img_masks, tokens, masks)
        # sample_actions' own setting before the prefix pass.
        model.paligemma_with_expert.paligemma.model.language_model.config._attn_implementation = "eager"
        _, cache = model.paligemma_with_expert.forward(
            attention_mask=prepare_attention_masks_4d(make_att_2d_masks(pad_masks, att_masks)),
            position_ids=torch.cumsum(pad_masks, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embs, None],
            use_cache=True,
        )
        keys, values = stacked_cache(cache)
        if self.with_state:
            return keys, values, pad_masks, policy.prepare_state(batch)
        return keys, values, pad_masks


def trace_openpi(
    policy_type: str, *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """pi0 or pi05, with config ``overrides`` (the tests' small configs use the same code path)."""
    if policy_type not in DECLARED:
        raise ValueError(f"not an openpi flow-matching policy: {policy_type!r}")
    policy: Any = DECLARED[policy_type].build(seed=seed, checkpoint=checkpoint, overrides=overrides)
    config = policy.config
    if config.rtc_config is not None and config.rtc_config.enabled:
        raise NotImplementedError(f"{policy_type} with real-time chunking (rtc_config) is not traced")
    with_state = policy_type == "pi0"
    tokens, mask = paligemma.TOKENIZER(TASK, config.tokenizer_max_length)

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        frame = example_observation(config.input_features, index, seed=seed)
        if not with_state:
            frame.pop("observation.state", None)  # pi05 reads the state from the prompt only
        frame[OBS_LANGUAGE_TOKENS] = tokens.clone()
        frame[OBS_LANGUAGE_ATTENTION_MASK] = mask.clone()
        return frame

    names = tuple(make_observation(0))
    model = policy.model
    action_dim = config.output_features["action"].shape[0]
    outputs = ("prefix_keys", "prefix_values", "prefix_pad_mask") + (("state",) if with_state else ())

    def velocity(*args: torch.Tensor) -> torch.Tensor:
        if with_state:
            keys, values, pad_masks, state, x_t, t = args
            v_t: torch.Tensor = model.denoise_step(state, pad_masks, dynamic_cache(keys, values), x_t, t)
        else:
            keys, values, pad_masks, x_t, t = args
            v_t = model.denoise_step(pad_masks, dynamic_cache(keys, values), x_t, t)
        return v_t

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return predicted_chunk(policy, {key: frame[key] for key in names}, noise=frame["noise"])

    along = flow_matching(
        prefix=_Prefix(policy, names, with_state),
        prefix_inputs=names,
        prefix_outputs=outputs,
        step=EulerStep(policy, velocity, config.num_inference_steps, lambda x: x[:, :, :action_dim]),
        num_steps=config.num_inference_steps,
        make_observation=make_observation,
        noise_shape=(1, config.chunk_size, config.max_action_dim),
        eager_chunk=eager_chunk,
        seed=seed,
        notes=lambda: dict(
            tokenizer=f"stand-in ({paligemma.PALIGEMMA_3B}: vocabulary {paligemma.PALIGEMMA_VOCAB}, "
            "right padding)",
        ),
    )
    return DECLARED[policy_type].trace(policy, along, seed=seed, checkpoint=checkpoint)


for _name in DECLARED:
    DECLARED[_name].register(functools.partial(trace_openpi, _name))
