"""EO1: a ``prefix`` program (the Qwen2.5-VL vision-language model over the images, the state and the prompt
up to the action tokens, once) and an Euler ``denoise_step`` program (the same language model over the
chunk's action tokens, reading the prefix's key/value cache) run ``num_denoise_steps`` (10) times; see
``_flow``.

``EO1Config.__post_init__`` asks the hub for Qwen2.5-VL-3B-Instruct's config unless ``vlm_config`` is set,
and ``EO1Policy`` downloads the checkpoint's weights (``Qwen2_5_VLForConditionalGeneration
.from_pretrained``) unless ``pretrained_path`` is set. Offline the adapter passes the published config
(``worker.trace.policies.offline.qwen2_5_vl``) as ``vlm_config``, and the backbone is built the way the policy
builds it for a saved EO1 checkpoint, ``_from_config`` of that config, with random weights from the
seed. The policy's defaults stay: the backbone in the checkpoint's dtype (``dtype="auto"``: bf16; the
fp32 cast of ``build_policy`` is undone, parameter by parameter, back to the dtypes the constructor
gave) and the flow head (state and action projections, time MLP) in fp32 without autocast
(``force_fp32_autocast``). Qwen2.5-VL-3B is ~3.8 B parameters: ~7.5 GB of real bf16 weights.

The frame is what LeRobot's EO1 preprocessor makes of the observation (its own pipeline from
``make_eo1_pre_post_processors``, without dataset statistics): the Qwen2.5-VL processor it loads is
``worker.trace.policies.offline.qwen2_5_vl``'s stand-in, with the real image processing (EO1's pixel budget
64–128 × 28², so a 256×256 camera becomes 252×252: 18×18 patches, 81 visual tokens) and a tokenizer of
the Qwen2 vocabulary plus EO1's seven added tokens. The prompt is EO1's template: a system turn, the user
turn with each image, ``<|state_start|><|state_pad|><|state_end|>``, the task and ``<|vla|>``, and the
assistant turn of ``chunk_size`` ``<|action_pad|>`` tokens. Features are LIBERO's layout (EO1's
experiments): two 3×256×256 cameras, an 8-dim state, 7-dim actions, padded to 32 by the policy.

One step is one call of ``sample_actions``' ``denoise_fn`` followed by the Euler update: the action
tokens' embeddings ``embed_suffix(t, x_t)`` (cast to the backbone's dtype, as ``denoise_fn`` writes them
into ``inputs_embeds[:, act_slice]`` and reads that slice back), the language model over them with the
prefix's cache, and the fp32 ``action_out_proj`` of their hidden states. The prefix program also
returns the two slices of its inputs that ``denoise_fn`` reads, ``attention_mask[:, :act_end]`` and
``position_ids[..., act_start:act_end]``, so the step reads only the prefix's outputs. The action span
``act_start:act_end`` is fixed by the prompt's layout: found on the host, as ``sample_actions`` finds it
(``.item()`` of an argmax, after checking ``chunk_size`` contiguous action tokens), it is a constant of
both programs. The initial noise (``sample_actions``' one ``torch.normal`` draw, through
``EO1VisionFlowMatchingModel.sample_noise``) is a frame input; ``eager_chunk`` hands it to the policy's
own ``predict_action_chunk`` through that method.

Static variants (the ``prefix`` program only; ``torch.export`` cannot trace the originals with static
shapes). The policy's own ``predict_action_chunk`` runs the original code; the static prefix is checked
equal to the original on the example frame (``check_static_prefix``), and the tests compare the plan
with ``predict_action_chunk``:

* ``image_grid_thw`` is fixed by the image size, so it is a constant of the program, not an input. The
  Qwen2.5-VL vision tower builds its tables from it in Python: ``rot_pos_emb`` (a loop over
  ``grid_thw.tolist()``, and ``arange`` up to a tensor maximum), ``get_window_index`` (a loop over
  ``.tolist()``, window boundaries as a Python list) followed by ``unique_consecutive``, and
  ``cu_seqlens`` by ``repeat_interleave`` over the grid; each attention block splits by
  ``cu_seqlens`` read with ``.tolist()``; ``get_image_features`` splits by ``(grid.prod(-1) //
  4).tolist()``. The window index, the window and image boundaries, the rotary position ids and the
  token counts are built once from the grid (the window tables by transformers' own
  ``get_window_index``) and are constants of the program; the tower's ``forward`` and its attention's
  (non-flash) ``forward`` are restated with them, the same ops in the same order: the patch embedding,
  the rotary table and its lookup, the window permutation and its inverse (``argsort``), the blocks,
  their per-window and per-image attention and the merger stay in the program. The static tower is also
  checked equal (bit for bit) to the original on its own, and its rotary ids to ``rot_pos_emb``'s.
* The multimodal RoPE position ids come from ``Qwen2_5_VLModel.get_rope_index``, which walks the token
  types in Python (``itertools.groupby`` over ``.tolist()``) and selects with ``attention_mask.bool()``;
  ``sample_actions`` computes them before the prefix. The frame carries them as an input, computed on
  the host by that same ``get_rope_index`` from the frame's tokens; ``mm_token_type_ids``, read only
  there, is not a program input.
* Qwen2.5-VL's ``get_placeholder_mask`` and EO1's own check the placeholder count with
  ``inputs_embeds[mask].numel()`` (a boolean-mask index). The counts (image tokens against the grid, one
  state token, ``chunk_size`` contiguous action tokens) are checked on the host; the masks are the
  same comparisons of the ids without the index.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_STATE

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters._along_plan import predicted_chunk
from worker.trace.policies.adapters._common import (
    field_default,
    recorded_dtypes,
    restore_dtypes,
)
from worker.trace.policies.adapters._flow import EulerStep, dynamic_cache, flow_matching, stacked_cache
from worker.trace.policies.adapters._qwen2_5_vl import (
    VisionTables,
    check_static_rotary,
    static_vision_overrides,
    vision_tables,
)
from worker.trace.policies.adapters._qwen_vl import overridden, placeholder_mask
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Declared
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.offline import qwen2_5_vl
from worker.trace.policies.offline.hub import known, redirected

PROGRAM_INPUTS = ("input_ids", "attention_mask", "pixel_values", "position_ids", OBS_STATE)
PREFIX_OUTPUTS = ("prefix_keys", "prefix_values", "action_attention_mask", "action_position_ids")

SUBSTITUTION = (
    "Qwen2.5-VL backbone: image_grid_thw a program constant fixed by the image size, and the vision "
    "tower's tables built from it in Python (rot_pos_emb's position ids and arange bound, "
    "get_window_index's window index and boundaries after unique_consecutive, cu_seqlens' "
    "repeat_interleave, the blocks' cu_seqlens.tolist() splits, get_image_features' .tolist() token "
    "split) constants built once from the grid; get_rope_index (itertools.groupby over .tolist(), "
    "boolean selection) -> position ids a frame input computed on the host by the same get_rope_index; "
    "Qwen2.5-VL's and EO1's get_placeholder_mask inputs_embeds[mask].numel() checks -> checked on the "
    "host; the action span (argmax(...).item()) a constant found on the host (checked equal to the "
    "original prefix on the example frame)"
)
EO1 = Declared(
    "eo1",
    {
        "observation.images.image": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.images.image2": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.state": (FeatureType.STATE, (8,)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=[SUBSTITUTION],
)


def default_vlm_base() -> str:
    """``EO1Config.vlm_base``'s default (the backbone checkpoint the policy asks the hub for)."""
    from lerobot.policies.eo1.configuration_eo1 import EO1Config

    return field_default(EO1Config, "vlm_base")


def _offline_backbone(dtypes: dict[str, torch.dtype]) -> Any:
    """A stand-in for ``Qwen2_5_VLForConditionalGeneration`` whose ``from_pretrained`` builds locally; both
    constructors record every parameter's and buffer's dtype in ``dtypes``."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    def recorded(model: Any) -> Any:
        dtypes.update(recorded_dtypes(model))
        return model

    class OfflineQwen2_5_VL:
        @staticmethod
        def from_pretrained(
            pretrained_model_name_or_path: str,
            *,
            dtype: str | torch.dtype = "auto",
            attn_implementation: str | None = None,
        ) -> Any:
            """``from_pretrained`` without the download: the architecture from the offline config, random
            weights (``_from_config``) in the dtype the checkpoint would load in."""
            name = str(pretrained_model_name_or_path)
            config = Qwen2_5_VLConfig(**copy.deepcopy(known(qwen2_5_vl.CONFIGS, name)))
            return recorded(
                Qwen2_5_VLForConditionalGeneration._from_config(
                    config,
                    dtype=config.dtype if dtype == "auto" else dtype,
                    attn_implementation=attn_implementation,
                )
            )

        @staticmethod
        def _from_config(config: Any, **kwargs: Any) -> Any:
            """The policy's own path for a saved EO1 checkpoint (``pretrained_path`` set), unchanged."""
            return recorded(Qwen2_5_VLForConditionalGeneration._from_config(config, **kwargs))

    return OfflineQwen2_5_VL


@contextlib.contextmanager
def offline_eo1(dtypes: dict[str, torch.dtype]) -> Iterator[None]:
    """Build EO1's backbone without the hub while the policy is constructed.

    Upstream behaviour worked around: ``EO1Policy.__init__`` calls
    ``Qwen2_5_VLForConditionalGeneration.from_pretrained(config.vlm_base)`` (the whole checkpoint) when
    ``pretrained_path`` is unset, though the config it already holds (``vlm_backbone_config``) builds the
    same architecture.
    """
    from lerobot.policies.eo1 import modeling_eo1

    with mock.patch.object(modeling_eo1, "Qwen2_5_VLForConditionalGeneration", _offline_backbone(dtypes)):
        yield


def _processor(name: str) -> Any:
    return known(qwen2_5_vl.PROCESSORS, name, "processor")()


@contextlib.contextmanager
def static_prefix(policy: Any, tables: VisionTables) -> Iterator[None]:
    """Inside the block the backbone reads the image grid as Python tables and indexes no boolean masks."""
    model = policy.model
    qwen = model.vlm_backbone.model
    config = qwen.config
    visual = qwen.visual

    def eo1_placeholder_mask(
        input_ids: torch.Tensor,
        inputs_embeds: torch.Tensor,
        state_features: torch.Tensor | None = None,
        action_features: torch.Tensor | None = None,
        *,
        state_token_id: int,
        action_token_id: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        state = (input_ids == state_token_id).unsqueeze(-1).expand_as(inputs_embeds)
        action = (input_ids == action_token_id).unsqueeze(-1).expand_as(inputs_embeds)
        return state, action

    def image_features(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor, **kwargs: Any) -> Any:
        # Qwen2_5_VLModel.get_image_features with the per-image token counts as Python ints.
        pixel_values = pixel_values.type(visual.dtype)
        output = visual(pixel_values, grid_thw=image_grid_thw, **kwargs)
        output.pooler_output = torch.split(output.pooler_output, tables.tokens)
        return output

    overrides: dict[tuple[Any, str], Callable[..., Any]] = {
        (model, "get_placeholder_mask"): eo1_placeholder_mask,
        (qwen, "get_placeholder_mask"): placeholder_mask(config),
        (qwen, "get_image_features"): image_features,
        **static_vision_overrides(visual, tables),
    }
    with overridden(overrides):
        yield


@dataclass(frozen=True)
class Prompt:
    """What ``sample_actions`` reads from the prompt's layout, found on the host."""

    state_token_id: int
    action_token_id: int
    act_start: int
    act_end: int
    chunk_size: int


class _Prefix(torch.nn.Module):
    """Frame inputs -> (stacked prefix keys, stacked prefix values, the step's attention mask and position
    ids): ``sample_actions`` up to the cache, and the slices of its inputs that ``denoise_fn`` reads."""

    def __init__(self, policy: Any, prompt: Prompt, tables: VisionTables) -> None:
        super().__init__()
        self.owner = policy  # the step's name for the policy too: the programs share their weight names
        self.prompt = prompt
        self.tables = tables
        with real_tensors():  # a constant of the program, read by no static code
            self.image_grid_thw = torch.tensor(tables.grid, dtype=torch.long)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch = dict(zip(PROGRAM_INPUTS, args, strict=True))
        model, prompt = self.owner.model, self.prompt
        input_ids, a = batch["input_ids"], prompt.act_start
        with static_prefix(self.owner, self.tables):
            inputs_embeds = model.embed_prefix(
                input_ids,
                states=self.owner.prepare_state(batch[OBS_STATE]),
                state_token_id=prompt.state_token_id,
                action_token_id=prompt.action_token_id,
            )
            outputs = model.vlm_backbone.model(
                input_ids=input_ids[:, :a],
                attention_mask=batch["attention_mask"][:, :a],
                position_ids=batch["position_ids"][..., :a],
                inputs_embeds=inputs_embeds[:, :a],
                pixel_values=batch["pixel_values"],
                image_grid_thw=self.image_grid_thw,
                use_cache=True,
                return_dict=True,
            )
        keys, values = stacked_cache(outputs.past_key_values)
        attention_mask = batch["attention_mask"][:, : prompt.act_end]
        position_ids = batch["position_ids"][..., prompt.act_start : prompt.act_end]
        return keys, values, attention_mask, position_ids


def velocity_field(policy: Any, prompt: Prompt) -> Callable[..., torch.Tensor]:
    """``sample_actions``' ``denoise_fn`` as a function of the stacked prefix cache."""
    model = policy.model

    def velocity(
        keys: torch.Tensor,
        values: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        x_t: torch.Tensor,
        t: torch.Tensor,
    ) -> torch.Tensor:
        action_time_embs = model.embed_suffix(t, x_t)
        # denoise_fn writes these into inputs_embeds[:, act_slice] and reads that slice back.
        inputs_embeds = action_time_embs.to(model.get_input_embeddings().weight.dtype)
        outputs = model.vlm_backbone.model(
            attention_mask=attention_mask,
            past_key_values=dynamic_cache(keys, values),
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            use_cache=True,
            return_dict=True,
        )
        with model.flow_head_autocast_context():
            hidden_states = outputs.last_hidden_state[:, : prompt.chunk_size]
            hidden_states = hidden_states.to(dtype=model.action_out_proj.dtype)
            v_t = model.action_out_proj(hidden_states)
        result: torch.Tensor = v_t.reshape(x_t.shape).to(x_t.dtype)
        return result

    return velocity


def find_prompt(batch: Mapping[str, Any], chunk_size: int) -> Prompt:
    """The action span and placeholder ids of a preprocessed batch, with the counts the static masks
    leave to the host: one state token, ``chunk_size`` contiguous action tokens."""
    input_ids = batch["input_ids"]
    state_id, action_id = int(batch["state_token_id"]), int(batch["action_token_id"])
    with real_tensors():
        states = int((input_ids == state_id).sum())
        positions: list[int] = (input_ids[0] == action_id).nonzero().flatten().tolist()
    if input_ids.shape[0] != 1 or states != 1:
        raise ValueError("eo1: the prompt must hold exactly one state token (batch 1)")
    if len(positions) != chunk_size or positions != list(range(positions[0], positions[0] + chunk_size)):
        raise ValueError(f"eo1: the prompt must hold {chunk_size} contiguous action tokens, got {positions}")
    return Prompt(state_id, action_id, positions[0], positions[0] + chunk_size, chunk_size)


@contextlib.contextmanager
def given_noise(model: Any, noise: torch.Tensor) -> Iterator[None]:
    """Inside the block ``sample_noise`` returns ``noise`` (the frame's), instead of drawing it."""

    def sample_noise(shape: Sequence[int], device: Any) -> torch.Tensor:
        if tuple(shape) != tuple(noise.shape):
            raise ValueError(f"eo1: noise of shape {tuple(noise.shape)} asked for {tuple(shape)}")
        return noise.to(device=device, dtype=torch.float32).clone()

    model.__dict__["sample_noise"] = sample_noise
    try:
        yield
    finally:
        model.__dict__.pop("sample_noise", None)


def trace_eo1_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with ``EO1Config`` overrides (the tests' small configs use the same code path)."""
    from lerobot.policies.eo1 import processor_eo1
    from transformers import Qwen2_5_VLConfig

    overrides = dict(overrides or {})
    if checkpoint is None and "vlm_config" not in overrides:
        base = str(overrides.get("vlm_base", default_vlm_base()))
        overrides["vlm_config"] = Qwen2_5_VLConfig(**copy.deepcopy(known(qwen2_5_vl.CONFIGS, base))).to_dict()
    dtypes: dict[str, torch.dtype] = {}
    policy: Any = EO1.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_eo1(dtypes)
    )
    config = policy.config
    model = policy.model
    restore_dtypes(model.vlm_backbone, dtypes)
    qwen = model.vlm_backbone.model
    with redirected(processor_eo1, {"Qwen2_5_VLProcessor": _processor}):
        preprocessor, _ = processor_eo1.make_eo1_pre_post_processors(config)

    def preprocess(index: int) -> dict[str, Any]:
        with real_tensors():
            observation: dict[str, Any] = example_observation(config.input_features, index, seed=seed)
            observation["task"] = TASK
            batch: dict[str, Any] = preprocessor(observation)
            batch["position_ids"], _ = qwen.get_rope_index(
                batch["input_ids"],
                image_grid_thw=batch["image_grid_thw"],
                attention_mask=batch["attention_mask"],
                mm_token_type_ids=batch["mm_token_type_ids"],
            )
        return batch

    batch0 = preprocess(0)
    prompt = find_prompt(batch0, config.chunk_size)
    with real_tensors():
        image_grid_thw: list[list[int]] = batch0["image_grid_thw"].tolist()
        image_tokens = int((batch0["input_ids"][:, : prompt.act_start] == qwen.config.image_token_id).sum())
    tables = vision_tables(qwen.visual, image_grid_thw)
    if image_tokens != sum(tables.tokens):
        raise ValueError(f"eo1: {image_tokens} image tokens in the prompt for grids {image_grid_thw}")
    check_static_rotary(qwen.visual, tables)

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        batch = batch0 if index == 0 else preprocess(index)
        if index:
            with real_tensors():
                grid = batch["image_grid_thw"].tolist()
            if find_prompt(batch, config.chunk_size) != prompt or grid != tables.grid:
                raise ValueError(f"eo1: frame {index}'s prompt layout differs from frame 0's")
        return {key: batch[key] for key in PROGRAM_INPUTS}

    prefix = _Prefix(policy, prompt, tables)
    if not is_fake(model.state_proj.weight):  # fake weights hold no values to compare: checked with real ones
        check_static_prefix(policy, batch0, prefix, tables)
    action_dim = config.output_features["action"].shape[0]

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch: dict[str, Any] = {key: frame[key] for key in PROGRAM_INPUTS if key != "position_ids"}
        batch["image_grid_thw"] = torch.tensor(tables.grid, dtype=torch.long)
        batch["mm_token_type_ids"] = (frame["input_ids"] == qwen.config.image_token_id).long()
        batch["state_token_id"], batch["action_token_id"] = prompt.state_token_id, prompt.action_token_id
        return predicted_chunk(policy, batch, within=[given_noise(model, frame["noise"])])

    along = flow_matching(
        prefix=prefix,
        prefix_inputs=PROGRAM_INPUTS,
        prefix_outputs=PREFIX_OUTPUTS,
        step=EulerStep(
            policy, velocity_field(policy, prompt), config.num_denoise_steps, lambda x: x[:, :, :action_dim]
        ),
        num_steps=config.num_denoise_steps,
        make_observation=make_observation,
        noise_shape=(1, config.chunk_size, config.max_action_dim),
        eager_chunk=eager_chunk,
        seed=seed,
        notes=lambda: dict(
            processor=f"stand-in ({config.vlm_base}: Qwen2.5-VL image processing, tokenizer vocabulary "
            f"{qwen2_5_vl.WORDS.vocab_size} with EO1's tokens)",
            image_grid_thw=tables.grid,
            action_span=[prompt.act_start, prompt.act_end],
            backbone_dtype=str(model.get_input_embeddings().weight.dtype),
        ),
    )
    return EO1.trace(policy, along, seed=seed, checkpoint=checkpoint)


def check_static_prefix(policy: Any, batch: Mapping[str, Any], prefix: _Prefix, tables: VisionTables) -> None:
    """The static prefix equals ``sample_actions``' own steps 1–2 on ``batch`` (and the static vision tower
    the original one), or ``SubstitutionMismatch``."""
    model, prompt = policy.model, prefix.prompt
    qwen = model.vlm_backbone.model
    a = prompt.act_start
    grid = batch["image_grid_thw"]
    with torch.no_grad():
        pixels = batch["pixel_values"].type(qwen.visual.dtype)
        original_vision = qwen.visual(pixels, grid_thw=grid).pooler_output
        with overridden(static_vision_overrides(qwen.visual, tables)):
            static_vision = qwen.visual(pixels, grid_thw=grid).pooler_output
        if not torch.equal(original_vision, static_vision):
            raise SubstitutionMismatch("eo1: the static vision tower differs from the original")
        inputs_embeds = model.embed_prefix(
            batch["input_ids"],
            states=policy.prepare_state(batch[OBS_STATE]),
            state_token_id=prompt.state_token_id,
            action_token_id=prompt.action_token_id,
        )
        position_ids, _ = qwen.get_rope_index(
            batch["input_ids"],
            image_grid_thw=grid,
            attention_mask=batch["attention_mask"],
            mm_token_type_ids=batch["mm_token_type_ids"],
        )
        outputs = qwen(
            input_ids=batch["input_ids"][:, :a],
            attention_mask=batch["attention_mask"][:, :a],
            position_ids=position_ids[..., :a],
            inputs_embeds=inputs_embeds[:, :a],
            pixel_values=batch["pixel_values"],
            image_grid_thw=grid,
            mm_token_type_ids=batch["mm_token_type_ids"][:, :a],
            use_cache=True,
            return_dict=True,
        )
        original = stacked_cache(outputs.past_key_values)
        static = prefix(*(batch[key] for key in PROGRAM_INPUTS))
    for name, expected, got in zip(PREFIX_OUTPUTS[:2], original, static[:2], strict=True):
        if not torch.equal(expected, got):
            raise SubstitutionMismatch(f"eo1: the static prefix's {name} differs from the original's")


EO1.register(trace_eo1_with)
