"""X-VLA: a ``vlm`` program (Florence-2 image and text encoder, once) and a ``denoise_step`` program (the
soft-prompted transformer predicting the clean action chunk) run ``num_denoising_steps`` (10) times.

XVLAConfig's default ``florence_config`` is empty (``ValueError: vision_config is required``); the
adapter gives it Florence-2-large's config from ``worker.trace.policies.offline.florence2`` (X-VLA-0.9B's
backbone), so LeRobot builds the backbone with random weights from the seed, in the config's default
dtype (fp32). The task is tokenized by a stand-in with BART-large's vocabulary, padded to
``tokenizer_max_length``.

One step maps ``(vlm features, aux views, proprio, x1, action, t) -> (action', chunk)`` exactly as one
iteration of ``XVLAModel.generate_actions``: ``x_t = x1·t + action·(1 - t)``, the action space's
``preprocess``, the transformer; ``chunk`` is the action space's ``postprocess`` of ``action'``. The
initial noise ``x1`` (the one ``torch.randn`` of ``generate_actions``) is a frame input; the first
``action`` is zeros and the times ``i / steps`` are plan constants.

Features: two 3×224×224 cameras and a 20-dim state, 20-dim actions (the ``ee6d`` action space's size).

Substitution: ``forward_vlm`` counts the present camera views with ``int(mask.sum().item())`` and
selects them with boolean indexing (data dependent); every view is present here (no empty cameras), so
the adapter encodes all views directly, checked equal to ``forward_vlm`` on the example frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_LANGUAGE_TOKENS

from worker.trace.fake_weights import is_fake
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import prefix_then_steps_plan
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.offline import florence2
from worker.trace.policies.offline.hub import known

SUBSTITUTION = (
    "XVLAModel.forward_vlm: int(image_mask.sum().item()) and boolean indexing over present views -> every "
    "view encoded directly (all views present, no empty cameras; checked equal to forward_vlm on the example "
    "frame)"
)
XVLA = Declared(
    "xvla",
    {
        "observation.images.image": (FeatureType.VISUAL, (3, 224, 224)),
        "observation.images.image2": (FeatureType.VISUAL, (3, 224, 224)),
        "observation.state": (FeatureType.STATE, (20,)),
        "action": (FeatureType.ACTION, (20,)),
    },
    substitutions=[SUBSTITUTION],
)


def static_forward_vlm(
    model: Any, input_ids: torch.Tensor, pixel_values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``forward_vlm`` with every view present: no count, no boolean selection."""
    batch_size, num_views = pixel_values.shape[:2]
    feats = model.vlm.get_image_features(pixel_values.flatten(0, 1)).pooler_output
    tokens_per_view, hidden_dim = feats.shape[1:]
    image_features = feats.view(batch_size, num_views, tokens_per_view, hidden_dim)
    inputs_embeds = model.vlm.get_input_embeddings()(input_ids)
    merged = torch.cat([image_features[:, 0], inputs_embeds], dim=1)
    attention_mask = torch.ones(merged.shape[:2], dtype=torch.long, device=merged.device)
    encoded = model.vlm.language_model.encoder(attention_mask=attention_mask, inputs_embeds=merged)[0]
    return encoded, image_features[:, 1:].reshape(batch_size, -1, hidden_dim)


def check_static_vlm(policy: Any, batch: dict[str, torch.Tensor], static: tuple[torch.Tensor, ...]) -> None:
    """The all-views-present encoder equals ``forward_vlm`` on ``batch``, or ``SubstitutionMismatch``."""
    model = policy.model
    with torch.no_grad():
        inputs = policy._build_model_inputs(batch)
        dtype = model._get_target_dtype()
        original = model.forward_vlm(
            inputs["input_ids"], inputs["image_input"].to(dtype), inputs["image_mask"]
        )
    if not (
        torch.equal(original["vlm_features"], static[0])
        and torch.equal(original["aux_visual_inputs"], static[1])
    ):
        raise SubstitutionMismatch(
            "xvla: the all-views-present encoder differs from forward_vlm on the example frame"
        )


class _VLM(torch.nn.Module):
    """Frame inputs -> (encoder features, auxiliary view features, padded proprio)."""

    def __init__(self, policy: Any, names: tuple[str, ...]) -> None:
        super().__init__()
        self.policy = policy
        self.names = names

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = dict(zip(self.names, args, strict=True))
        inputs = self.policy._build_model_inputs(batch)
        model = self.policy.model
        dtype = model._get_target_dtype()
        features, aux = static_forward_vlm(model, inputs["input_ids"], inputs["image_input"].to(dtype=dtype))
        return features, aux, inputs["proprio"].to(dtype=dtype)


class _Step(torch.nn.Module):
    """One iteration of ``generate_actions``: ``(features, aux, proprio, x1, action, t) -> (next, chunk)``."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, aux, proprio, x1, action, t = args
        model = self.policy.model
        domain_id = torch.zeros(x1.shape[0], dtype=torch.long)  # _get_domain_id without a domain feature
        x_t = x1 * t.view(-1, 1, 1) + action * (1 - t).view(-1, 1, 1)
        proprio_m, x_t_m = model.action_space.preprocess(proprio, x_t)
        action = model.transformer(
            domain_id=domain_id,
            action_with_noise=x_t_m,
            proprio=proprio_m,
            t=t,
            vlm_features=features,
            aux_visual_inputs=aux,
        )
        return action, model.action_space.postprocess(action)


def trace_xvla_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with config ``overrides`` (the tests' small configs use the same code path)."""
    settings: dict[str, Any] = {"florence_config": florence2.FLORENCE2_LARGE_CONFIG}
    settings.update(overrides or {})
    policy: Any = XVLA.build(seed=seed, checkpoint=checkpoint, overrides=settings)
    config = policy.config
    if config.empty_cameras or config.num_image_views != len(config.image_features):
        raise NotImplementedError("xvla is traced with every camera view present (no empty cameras) only")
    if config.domain_feature_key is not None:
        raise NotImplementedError("xvla is traced without a domain feature (domain 0) only")
    tokenizer = known(florence2.TOKENIZERS, config.tokenizer_name, "tokenizer")
    tokens, _ = tokenizer(TASK, config.tokenizer_max_length)
    model = policy.model
    dtype = model._get_target_dtype()
    steps = max(1, int(config.num_denoising_steps))
    noise_shape = (1, config.chunk_size, model.dim_action)

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        frame = example_observation(config.input_features, index, seed=seed)
        frame[OBS_LANGUAGE_TOKENS] = tokens.clone()
        return frame

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        frame = make_observation(index)
        frame["noise"] = standard_normal(noise_shape, seed=seed, index=index, name="noise").to(dtype)
        return frame

    names = tuple(make_observation(0))
    frame0 = make_frame(0)

    def check(static: tuple[torch.Tensor, ...]) -> None:
        if not is_fake(static[0]):  # fake weights hold no values to compare: checked with real weights
            check_static_vlm(policy, {key: frame0[key] for key in names}, static)

    outputs = ("vlm_features", "aux_visual_inputs", "proprio")
    start = torch.zeros(noise_shape, dtype=dtype)
    plan = prefix_then_steps_plan(
        Call("vlm", names, outputs),
        (*outputs, "noise"),
        first_sample="action.init",
        sample="action",
        chunk="chunk",
        times=[torch.full((1,), i / steps, dtype=dtype) for i in range(steps, 0, -1)],
        constants={"action.init": start},
    )

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return predicted_chunk(policy, {key: frame[key] for key in names}, draws=[frame["noise"]])

    along = Along(
        [
            Program("vlm", _VLM(policy, names), check=check, export_after_run=True),
            Program(
                "denoise_step",
                _Step(policy),
                (*outputs, "x1", "action", "t"),
                ("action_next", "chunk"),
            ),
        ],
        plan,
        make_frame,
        eager_chunk,
        notes=lambda: {
            "tokenizer": f"stand-in ({tokenizer.checkpoint}: vocabulary {tokenizer.vocab_size}, "
            "right padding)",
            "backbone": florence2.FLORENCE2_LARGE,
        },
        frame=frame0,
    )
    return XVLA.trace(policy, along, seed=seed, checkpoint=checkpoint)


XVLA.register(trace_xvla_with)
