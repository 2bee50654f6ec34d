"""SmolVLA: a ``prefix`` program (SmolVLM2 vision + language model over images, task and state, once) and
an Euler ``denoise_step`` program (the action expert reading the prefix's key/value cache) run
``num_steps`` (10) times; see ``_flow``.

The constructor asks the hub for SmolVLM2-500M's config and processor (``AutoConfig`` /
``AutoProcessor.from_pretrained`` in ``smolvlm_with_expert``); offline they come from
``worker.trace.policies.offline.smolvlm2`` (the published config, and the processor's two image token ids,
the only part of it the policy reads). With the default ``load_vlm_weights=False`` the VLM has random
weights from the seed, in fp32. The task is tokenized by a stand-in with SmolVLM2's vocabulary, padded
to ``tokenizer_max_length``.

Features are those of ``lerobot/smolvla_base``: three 3×256×256 cameras, a 6-dim state, 6-dim actions.

Substitution: SmolVLM's vision embeddings write their position ids with a boolean mask
(``position_ids[mask] = pos_ids[mask]``), a data-dependent index that ``to_edge_transform_and_lower``
cannot lower, after ``torch.bucketize`` (not Core ATen: ``to_edge`` rejects it); the adapter computes the
same ids with ``torch.where(mask, pos_ids, position_ids)`` and the bucket index as a count of boundaries,
checked equal to transformers' own forward on every image of the example frame.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS
from transformers import SmolVLMConfig

from worker.trace.fake_weights import is_fake
from worker.trace.policies.adapters._along_plan import predicted_chunk
from worker.trace.policies.adapters._flow import EulerStep, dynamic_cache, flow_matching, stacked_cache
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Declared
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.offline import smolvlm2
from worker.trace.policies.offline.hub import known, redirected

SUBSTITUTION = (
    "SmolVLMVisionEmbeddings.forward: position_ids[mask] = pos_ids[mask] (boolean-mask index, data "
    "dependent) -> position_ids = torch.where(mask, pos_ids, position_ids), and torch.bucketize(x, b, "
    "right=True) (not Core ATen) -> (x[..., None] >= b).sum(-1) (checked equal to transformers' forward on "
    "every image of the example frame)"
)
SMOLVLA = Declared(
    "smolvla",
    {
        "observation.image": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.image2": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.image3": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.state": (FeatureType.STATE, (6,)),
        "action": (FeatureType.ACTION, (6,)),
    },
    substitutions=[SUBSTITUTION],
)


def _processor(name: str) -> Any:
    known(smolvlm2.CONFIGS, name)
    tokenizer = types.SimpleNamespace(
        fake_image_token_id=smolvlm2.FAKE_IMAGE_TOKEN_ID, global_image_token_id=smolvlm2.GLOBAL_IMAGE_TOKEN_ID
    )
    return types.SimpleNamespace(tokenizer=tokenizer)


@contextlib.contextmanager
def offline_smolvlm() -> Iterator[None]:
    """Build SmolVLA's backbone from the local SmolVLM2 config instead of the hub.

    Upstream behaviour worked around: ``SmolVLMWithExpertModel.__init__`` calls
    ``AutoConfig.from_pretrained(model_id)`` and ``AutoProcessor.from_pretrained(model_id)`` (the hub) even
    when it does not load the VLM weights.
    """
    from lerobot.policies.smolvla import smolvlm_with_expert

    with redirected(
        smolvlm_with_expert,
        {
            "AutoConfig": lambda name: SmolVLMConfig(**known(smolvlm2.CONFIGS, name)),
            "AutoProcessor": _processor,
        },
    ):
        yield


def _static_embeddings_forward(embeddings: Any) -> Any:
    """transformers' ``SmolVLMVisionEmbeddings.forward`` with the masked assignment as ``torch.where``."""

    def forward(pixel_values: torch.Tensor, patch_attention_mask: torch.Tensor) -> torch.Tensor:
        batch_size, _, max_im_h, max_im_w = pixel_values.shape
        patch_embeds = embeddings.patch_embedding(pixel_values)
        flat = patch_embeds.flatten(2).transpose(1, 2)
        side = embeddings.num_patches_per_side
        boundaries = torch.arange(1 / side, 1.0, 1 / side, device=pixel_values.device)
        patches = (max_im_h // embeddings.patch_size) * (max_im_w // embeddings.patch_size)
        position_ids = torch.full((batch_size, patches), 0, device=pixel_values.device)
        step_h = 1.0 / patch_attention_mask[:, :, 0].sum(dim=1)
        step_w = 1.0 / patch_attention_mask[:, 0, :].sum(dim=1)
        h = torch.arange(patch_attention_mask.size(1), device=pixel_values.device, dtype=torch.float32)
        w = torch.arange(patch_attention_mask.size(2), device=pixel_values.device, dtype=torch.float32)
        coords_h = torch.clamp(h[None, :] * step_h[:, None], max=(1.0 - 1e-6)).to(pixel_values.dtype)
        coords_w = torch.clamp(w[None, :] * step_w[:, None], max=(1.0 - 1e-6)).to(pixel_values.dtype)
        # bucketize(x, b, right=True) counts the boundaries <= x (aten.bucketize is not Core ATen).
        bucket_h = (coords_h[..., None] >= boundaries).sum(-1)
        bucket_w = (coords_w[..., None] >= boundaries).sum(-1)
        pos_ids = (bucket_h[:, :, None] * side + bucket_w[:, None, :]).reshape(batch_size, -1)
        mask = patch_attention_mask.view(batch_size, -1)
        position_ids = torch.where(mask, pos_ids, position_ids)
        return flat + embeddings.position_embedding(position_ids)

    return forward


@contextlib.contextmanager
def original_embeddings(embeddings: torch.nn.Module) -> Iterator[None]:
    """Run transformers' own vision-embeddings forward inside the block (the policy's unchanged code)."""
    static = embeddings.__dict__.pop("forward", None)
    try:
        yield
    finally:
        if static is not None:
            embeddings.forward = static


def substitute_static_embeddings(policy: Any, images: Mapping[str, torch.Tensor]) -> None:
    """Install the static position ids on the policy's vision embeddings, checked on ``images``.

    With fake weights (``weights: fake``) there are no values to compare; the check runs with real ones.
    """
    vision = policy.model.vlm_with_expert.get_vlm_model().vision_model
    embeddings = vision.embeddings
    static = _static_embeddings_forward(embeddings)
    if is_fake(embeddings.position_embedding.weight):
        embeddings.forward = static  # fake weights hold no values to compare: checked with real weights
        return
    for key, image in images.items():
        prepared, _ = policy.prepare_images({key: image})
        pixels = prepared[0].to(dtype=vision.dtype)
        side = pixels.shape[-1] // embeddings.patch_size
        mask = torch.ones((pixels.shape[0], side, side), dtype=torch.bool)
        with torch.no_grad():
            expected, got = embeddings(pixels, mask), static(pixels, mask)
        if not torch.equal(expected, got):
            raise SubstitutionMismatch(
                f"smolvla: static vision position ids differ from transformers' on {key}"
            )
    embeddings.forward = static


class _Prefix(torch.nn.Module):
    """Frame inputs -> (stacked prefix keys, stacked prefix values, prefix padding mask)."""

    def __init__(self, policy: Any, names: tuple[str, ...]) -> None:
        super().__init__()
        self.policy = policy
        self.names = names

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from lerobot.policies.common.vla_utils import make_att_2d_masks

        batch = dict(zip(self.names, args, strict=True))
        policy, model = self.policy, self.policy.model
        images, img_masks = policy.prepare_images(batch)
        state = policy.prepare_state(batch)
        embs, pad_masks, att_masks = model.embed_prefix(
            images, img_masks, batch[OBS_LANGUAGE_TOKENS], batch[OBS_LANGUAGE_ATTENTION_MASK], state=state
        )
        _, cache = model.vlm_with_expert.forward(
            attention_mask=make_att_2d_masks(pad_masks, att_masks),
            position_ids=torch.cumsum(pad_masks, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embs, None],
            use_cache=True,
        )
        keys, values = stacked_cache(cache)
        return keys, values, pad_masks


def trace_smolvla_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with config ``overrides`` (the tests' small configs use the same code path)."""
    policy: Any = SMOLVLA.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_smolvlm()
    )
    config = policy.config
    if not config.use_cache:
        raise NotImplementedError("smolvla is traced with its default key/value cache (use_cache=True) only")
    if config.rtc_config is not None and config.rtc_config.enabled:
        raise NotImplementedError("smolvla with real-time chunking (rtc_config) is not traced")
    tokenizer = known(smolvlm2.TOKENIZERS, config.vlm_model_name, "tokenizer")
    tokens, mask = tokenizer(TASK, config.tokenizer_max_length)

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        frame = example_observation(config.input_features, index, seed=seed)
        frame[OBS_LANGUAGE_TOKENS] = tokens.clone()
        frame[OBS_LANGUAGE_ATTENTION_MASK] = mask.clone()
        return frame

    frame0 = make_observation(0)
    names = tuple(frame0)
    substitute_static_embeddings(policy, {key: frame0[key] for key in config.image_features})
    model = policy.model
    action_dim = config.action_feature.shape[0]

    def velocity(
        keys: torch.Tensor, values: torch.Tensor, pad_masks: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor
    ) -> torch.Tensor:
        v_t: torch.Tensor = model.denoise_step(pad_masks, dynamic_cache(keys, values), x_t, t)
        return v_t

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        embeddings = model.vlm_with_expert.get_vlm_model().vision_model.embeddings
        batch = {key: frame[key] for key in names}
        return predicted_chunk(policy, batch, noise=frame["noise"], within=[original_embeddings(embeddings)])

    along = flow_matching(
        prefix=_Prefix(policy, names),
        prefix_inputs=names,
        prefix_outputs=("prefix_keys", "prefix_values", "prefix_pad_mask"),
        step=EulerStep(policy, velocity, config.num_steps, lambda x: x[:, :, :action_dim]),
        num_steps=config.num_steps,
        make_observation=make_observation,
        noise_shape=(1, config.chunk_size, config.max_action_dim),
        eager_chunk=eager_chunk,
        seed=seed,
        notes=lambda: dict(
            offline_backbone_config=known(smolvlm2.CONFIGS, config.vlm_model_name),
            task=TASK,
            tokenizer=f"stand-in ({tokenizer.checkpoint}: vocabulary {tokenizer.vocab_size}, right padding)",
        ),
    )
    return SMOLVLA.trace(policy, along, seed=seed, checkpoint=checkpoint)


SMOLVLA.register(trace_smolvla_with)
