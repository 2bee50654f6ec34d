"""GR00T N1.7: a ``backbone`` program (the Cosmos-Reason2 / Qwen3-VL vision-language model over the images
and the prompt, the VL self-attention and the state encoder, once) and a ``denoise_step`` program (the
flow-matching DiT action head) run ``num_inference_timesteps`` (4) times.

``GrootPolicy`` asks ``GR00TN17.from_pretrained('nvidia/GR00T-N1.7-3B')`` for the whole checkpoint
(``snapshot_download``); offline the adapter builds the same model from LeRobot's own
``GR00TN17Config`` defaults (which mirror the checkpoint's config) with
``GR00TN17(config, load_backbone_weights=False)``, whose backbone LeRobot builds from its hard-coded copy
of Cosmos-Reason2-2B's config, with random weights from the seed. The policy's defaults stay: parameters
in fp32 (``model_params_fp32``) and inference under bf16 autocast (``use_bf16``), so both programs are
traced under the same ``torch.autocast`` as ``predict_action_chunk`` and compute in bf16 where it does.

The frame is what LeRobot's GR00T preprocessor makes of the observation (its own pipeline from
``make_groot_pre_post_processors``, without checkpoint statistics): the Qwen3-VL processor it needs
(Cosmos-Reason2-2B's tokenizer) is ``worker.trace.policies.offline.cosmos_reason2``'s stand-in, with the real
image processing and a tokenizer of the Qwen3 vocabulary. Features are LIBERO's layout: two 3×256×256
cameras (64 visual tokens each at the N1.7 target size), an 8-dim state, 7-dim actions; the embodiment is
the default ``new_embodiment``.

One step is one iteration of ``GR00TN17ActionHead.get_action_with_features``: ``(backbone features,
state features, image mask, attention mask, embodiment, actions, t) -> (actions + dt · v, chunk)`` with
``t`` the discretised time ``int(k / steps · num_timestep_buckets)`` (plan constants) and ``chunk`` the
policy's slice of the actions to its horizon and action dimension. The initial noise (the one
``torch.randn`` of ``get_action_with_features``) is a frame input. Real-time chunking is not traced
(``vel_strength`` is all ones without it, so the step omits it).

Static variants (the ``backbone`` program only; ``torch.export`` cannot trace the originals with static
shapes). The policy's own ``predict_action_chunk`` runs the original code; the static backbone is checked
equal to the original on the example frame (``check_static_backbone``), and the tests compare the plan
with ``predict_action_chunk``:

* ``image_grid_thw`` is fixed by the image size, so it is a constant of the program, not an input. The
  vision tower reads per-image counts from it through tensors (``lengths.tolist()`` for the per-image
  attention splits, ``(grid.prod(-1) // 4).tolist()`` for the token split, ``repeat_interleave`` over the
  frames): data-dependent sizes under ``torch.export``. They are Python ints from the grid instead.
* ``fast_pos_embed_interpolate`` builds its bilinear index and weight tables in Python from ``.tolist()``
  of grid-derived tensors (one data-dependent scalar per element). The tables are built once by its own
  code and are constants of the program; the embedding lookup and weighted sum stay in it.
* The multimodal RoPE position ids come from ``Qwen3VLModel.get_rope_index``, which walks the token types
  in Python (``itertools.groupby`` over ``.tolist()``) and selects with ``attention_mask.bool()``. The
  frame carries them as an input, computed on the host by the backbone's own
  ``_ensure_legacy_qwen3_position_ids`` from the frame's tokens.
* ``get_placeholder_mask`` checks ``inputs_embeds[mask].numel()`` (a boolean-mask index) and DeepStack
  adds the visual features with ``hidden[mask, :] += embeds`` (a boolean-mask index and assignment). The
  token count is checked on the host; the features are added with
  ``torch.where(mask, hidden + embeds[cumsum(mask) - 1], hidden)``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import prefix_then_steps_plan
from worker.trace.policies.adapters._qwen3_vl import static_pos_embed, static_qwen3_vl
from worker.trace.policies.adapters._qwen_vl import overridden
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.offline import cosmos_reason2
from worker.trace.policies.offline.hub import known

GROOT_N1_7_3B = "nvidia/GR00T-N1.7-3B"


PROGRAM_INPUTS = ("input_ids", "attention_mask", "pixel_values", "position_ids", "state", "embodiment_id")
BACKBONE_OUTPUTS = ("backbone_features", "state_features", "image_mask", "backbone_attention_mask")

SUBSTITUTION = (
    "Qwen3VL backbone: image_grid_thw a program constant fixed by the image size, and the per-image counts "
    "the vision tower reads from it through tensors (.tolist() split sizes, repeat_interleave length) Python "
    "ints; fast_pos_embed_interpolate's bilinear index/weight tables (Python lists from .tolist()) constants "
    "built once by its own code; get_rope_index (itertools.groupby over .tolist(), boolean selection) -> "
    "position ids a frame input computed on the host by Qwen3Backbone._ensure_legacy_qwen3_position_ids; "
    "get_placeholder_mask's inputs_embeds[mask].numel() check -> checked on the host; DeepStack's "
    "hidden[mask, :] += embeds -> torch.where(mask, hidden + embeds[cumsum(mask) - 1], hidden) "
    "(checked equal to the original backbone on the example frame)"
)
GROOT = Declared(
    "groot",
    {
        "observation.images.image": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.images.image2": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.state": (FeatureType.STATE, (8,)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=[SUBSTITUTION],
)


def _offline_model(overrides: Mapping[str, Any]) -> Any:
    """A stand-in for ``modeling_groot.GR00TN17`` whose ``from_pretrained`` builds the model locally."""
    from lerobot.policies.groot.groot_n1_7 import GR00TN17, GR00TN17Config

    class OfflineGR00TN17:
        @staticmethod
        def from_pretrained(pretrained_model_name_or_path: str, **kwargs: Any) -> Any:
            """``GR00TN17.from_pretrained`` without the download: the kwargs it reads, the rest as
            config overrides, and the backbone built from its config (``load_backbone_weights=False``)."""
            known({GROOT_N1_7_3B: None}, str(pretrained_model_name_or_path))
            tune = {
                key: kwargs.pop(key, default)
                for key, default in (
                    ("tune_visual", True),
                    ("tune_llm", False),
                    ("tune_projector", True),
                    ("tune_diffusion_model", True),
                    ("tune_vlln", True),
                )
            }
            loading = kwargs.pop("transformers_loading_kwargs", None) or {"trust_remote_code": True}
            config = GR00TN17Config(**{**copy.deepcopy(dict(overrides)), **kwargs})
            model = GR00TN17(config, transformers_loading_kwargs=loading, load_backbone_weights=False)
            model.backbone.set_trainable_parameters(
                tune_visual=tune["tune_visual"],
                tune_llm=tune["tune_llm"],
                tune_top_llm_layers=config.tune_top_llm_layers,
            )
            model.action_head.set_trainable_parameters(
                tune_projector=tune["tune_projector"],
                tune_diffusion_model=tune["tune_diffusion_model"],
                tune_vlln=tune["tune_vlln"],
            )
            return model

    return OfflineGR00TN17


@contextlib.contextmanager
def offline_groot(model_overrides: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Build GR00T N1.7 without the hub while the policy is constructed.

    Upstream behaviour worked around: ``GrootPolicy._create_groot_model`` calls
    ``GR00TN17.from_pretrained(base_model_path)``, which ``snapshot_download``s the whole checkpoint even
    though the policy's own constructor could build the architecture from ``GR00TN17Config``.
    """
    from lerobot.policies.groot import modeling_groot

    with mock.patch.object(modeling_groot, "GR00TN17", _offline_model(model_overrides or {})):
        yield


@contextlib.contextmanager
def static_backbone(
    backbone: Any,
    position_ids: torch.Tensor,
    image_grid_thw: list[list[int]],
    pos_embed: Callable[[torch.Tensor], torch.Tensor],
) -> Iterator[None]:
    """Inside the block the backbone takes the given position ids, reads the image grid as Python
    counts, and indexes no boolean masks."""

    def given_position_ids(model_input: dict[str, Any]) -> None:
        model_input["position_ids"] = position_ids

    qwen = getattr(backbone.model, "model", backbone.model)
    with (
        overridden({(backbone, "_ensure_legacy_qwen3_position_ids"): given_position_ids}),
        static_qwen3_vl(qwen, image_grid_thw, pos_embed),
    ):
        yield


class _Backbone(torch.nn.Module):
    """Frame inputs -> (backbone features, state features, image mask, backbone attention mask)."""

    def __init__(self, policy: Any, image_grid_thw: list[list[int]]) -> None:
        super().__init__()
        self.policy = policy
        self.grid = image_grid_thw
        self.pos_embed = static_pos_embed(policy._groot_model.backbone.visual, image_grid_thw)
        with real_tensors():  # a constant of the program: the vision tower reads it with .tolist()
            self.image_grid_thw = torch.tensor(image_grid_thw, dtype=torch.long)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers.feature_extraction_utils import BatchFeature

        batch = dict(zip(PROGRAM_INPUTS, args, strict=True))
        model = self.policy._groot_model
        position_ids = batch.pop("position_ids")
        vl_input = BatchFeature(
            data={
                **{key: batch[key] for key in ("input_ids", "attention_mask")},
                "pixel_values": batch["pixel_values"].to(dtype=model.dtype),
                "image_grid_thw": self.image_grid_thw,
            }
        )
        action_input = BatchFeature(
            data={"state": batch["state"].to(dtype=model.dtype), "embodiment_id": batch["embodiment_id"]}
        )
        with _autocast(self.policy), static_backbone(model.backbone, position_ids, self.grid, self.pos_embed):
            backbone_output = model.backbone(vl_input)
            features = model.action_head._encode_features(backbone_output, action_input)
        return (
            features.backbone_features,
            features.state_features,
            backbone_output.image_mask,
            backbone_output.backbone_attention_mask,
        )


class _Step(torch.nn.Module):
    """One iteration of ``get_action_with_features``: ``(features…, embodiment, actions, t)`` to
    ``(actions', chunk)``."""

    def __init__(self, policy: Any, horizon: int, action_dim: int) -> None:
        super().__init__()
        self.policy = policy
        self.horizon = horizon
        self.action_dim = action_dim

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        vl_embeds, state_features, image_mask, attention_mask, embodiment_id, actions, timesteps = args
        head = self.policy._groot_model.action_head
        with _autocast(self.policy):
            action_features = head.action_encoder(actions, timesteps, embodiment_id)
            if head.config.add_pos_embed:
                pos_ids = torch.arange(action_features.shape[1], dtype=torch.long, device=actions.device)
                action_features = action_features + head.position_embedding(pos_ids).unsqueeze(0)
            sa_embs = torch.cat((state_features, action_features), dim=1)
            if head.config.use_alternate_vl_dit:
                model_output = head.model(
                    hidden_states=sa_embs,
                    encoder_hidden_states=vl_embeds,
                    timestep=timesteps,
                    image_mask=image_mask,
                    backbone_attention_mask=attention_mask,
                )
            else:
                model_output = head.model(
                    hidden_states=sa_embs, encoder_hidden_states=vl_embeds, timestep=timesteps
                )
            pred = head.action_decoder(model_output, embodiment_id)
            dt = 1.0 / head.num_inference_timesteps
            actions = actions + dt * pred[:, -head.action_horizon :]
        return actions, actions[:, : self.horizon, : self.action_dim]


def _autocast(policy: Any) -> torch.autocast:
    """The autocast ``predict_action_chunk`` runs the model under (bf16 by default)."""
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=policy.config.use_bf16)


def discretized_times(steps: int, buckets: int) -> list[int]:
    """The timesteps ``get_action_with_features`` feeds the DiT at each step."""
    return [int(step / float(steps) * buckets) for step in range(steps)]


def trace_groot_with(
    *,
    seed: int,
    checkpoint: Path | None,
    overrides: Mapping[str, Any] | None = None,
    model_overrides: Mapping[str, Any] | None = None,
) -> TracedPolicy:
    """The adapter, with ``GrootConfig`` and ``GR00TN17Config`` overrides (the tests' small configs)."""
    from lerobot.policies.groot.processor_groot import GrootN17VLMEncodeStep, make_groot_pre_post_processors

    policy: Any = GROOT.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_groot(model_overrides)
    )
    config = policy.config
    if config.use_relative_actions:
        raise NotImplementedError("groot is traced with absolute actions (use_relative_actions=False) only")
    model = policy._groot_model
    head = model.action_head
    preprocessor, _ = make_groot_pre_post_processors(config)
    for step in preprocessor.steps:
        if isinstance(step, GrootN17VLMEncodeStep):
            known({cosmos_reason2.COSMOS_REASON2_2B: None}, step.model_name, "processor")
            step._proc = cosmos_reason2.StandInQwen3VLProcessor()

    def preprocess(index: int) -> dict[str, Any]:
        with real_tensors():
            observation: dict[str, Any] = example_observation(config.input_features, index, seed=seed)
            observation["task"] = TASK
            batch: dict[str, Any] = preprocessor(observation)
            vl_input = {
                key: batch[key]
                for key in ("input_ids", "attention_mask", "image_grid_thw", "mm_token_type_ids")
            }
            model.backbone._ensure_legacy_qwen3_position_ids(vl_input)
            batch["position_ids"] = vl_input["position_ids"]
        return batch

    batch0 = preprocess(0)
    with real_tensors():
        image_grid_thw: list[list[int]] = batch0["image_grid_thw"].tolist()
        image_tokens = int((batch0["input_ids"] == model.backbone.model.config.image_token_id).sum())
    merge = model.backbone.visual.spatial_merge_size**2
    if image_tokens != sum(t * h * w for t, h, w in image_grid_thw) // merge:
        raise ValueError(f"groot: {image_tokens} image tokens in the prompt for grids {image_grid_thw}")

    fake = is_fake(next(iter(model.parameters())))
    steps = int(head.num_inference_timesteps)
    noise_shape = (1, head.action_horizon, head.action_dim)
    horizon = policy._resolve_prediction_horizon(torch.empty(noise_shape, device="meta"))
    action_dim = config.output_features["action"].shape[0]
    noise_dtype: list[torch.dtype] = []  # the backbone features': get_action_with_features draws in it

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        batch = batch0 if index == 0 else preprocess(index)
        frame = {key: batch[key] for key in PROGRAM_INPUTS}
        frame["noise"] = standard_normal(noise_shape, seed=seed, index=index, name="noise").to(noise_dtype[0])
        return frame

    def step_example(env: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The backbone's features, frame 0's embodiment and noise (in the features' dtype), ``t.00``."""
        noise_dtype.append(env[BACKBONE_OUTPUTS[0]].dtype)
        features = tuple(env[key] for key in BACKBONE_OUTPUTS)
        return (*features, env["embodiment_id"], make_frame(0)["noise"], env["t.00"])

    plan = prefix_then_steps_plan(
        Call("backbone", PROGRAM_INPUTS, BACKBONE_OUTPUTS),
        (*BACKBONE_OUTPUTS, "embodiment_id"),
        first_sample="noise",
        sample="actions",
        chunk="chunk",
        times=[
            torch.full((1,), t, dtype=torch.long) for t in discretized_times(steps, head.num_timestep_buckets)
        ],
    )

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch = {
            key: frame[key]
            for key in ("input_ids", "attention_mask", "pixel_values", "state", "embodiment_id")
        }
        batch["image_grid_thw"] = torch.tensor(image_grid_thw, dtype=torch.long)
        return predicted_chunk(policy, batch, draws=[frame["noise"]])

    along = Along(
        [
            # Fake weights: the exported program (static split sizes) gives the step's example inputs; the
            # eager backbone reads per-image counts from fake tensors, which hold no values. Fake weights
            # hold no values to compare either: the static backbone is checked with real weights.
            Program(
                "backbone",
                _Backbone(policy, image_grid_thw),
                outputs_from="exported" if fake else "eager",
                check=None if fake else lambda features: check_static_backbone(policy, batch0, features),
            ),
            Program(
                "denoise_step",
                _Step(policy, horizon, action_dim),
                (*BACKBONE_OUTPUTS, "embodiment_id", "actions", "t"),
                ("actions_next", "chunk"),
                example=step_example,
            ),
        ],
        plan,
        frame={key: batch0[key] for key in PROGRAM_INPUTS},
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            model=GROOT_N1_7_3B,
            model_config={key: getattr(model.config, key) for key in sorted(type(model.config)._defaults)},
            processor=f"stand-in ({cosmos_reason2.COSMOS_REASON2_2B}: Qwen3-VL image processing, tokenizer "
            f"vocabulary {cosmos_reason2.TOKENIZER.vocab_size})",
            image_grid_thw=image_grid_thw,
        ),
    )
    return GROOT.trace(policy, along, seed=seed, checkpoint=checkpoint)


def check_static_backbone(policy: Any, batch: dict[str, Any], static: tuple[torch.Tensor, ...]) -> None:
    """The static backbone equals the original one on ``batch``, or ``SubstitutionMismatch``."""
    model = policy._groot_model
    keys = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "state", "embodiment_id")
    with torch.no_grad(), _autocast(policy):
        backbone_input, action_input = model.prepare_input({key: batch[key] for key in keys})
        output = model.backbone(backbone_input)
        features = model.action_head._encode_features(output, action_input)
    original = (
        features.backbone_features,
        features.state_features,
        output.image_mask,
        output.backbone_attention_mask,
    )
    for name, expected, got in zip(BACKBONE_OUTPUTS, original, static, strict=True):
        if not torch.equal(expected, got):
            raise SubstitutionMismatch(f"groot: the static backbone's {name} differs from the original's")


GROOT.register(trace_groot_with)
