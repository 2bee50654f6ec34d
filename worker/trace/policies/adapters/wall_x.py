"""Wall-X (WALL-OSS-Flow): a ``prefix`` program (the Qwen2.5-VL vision tower over the images and the input
embeddings of the whole prompt, once) and a ``denoise_step`` program (the mixture-of-experts language
model over the whole prompt with the noisy actions at the action tokens, and the Euler update) run 10
times.

``WallXPolicy.__init__`` always calls ``Qwen2_5_VLMoEForAction.from_pretrained(config
.pretrained_name_or_path)``, which reads WALL-OSS-Flow's config, processor and ``model.safetensors``
from the hub. Offline (``offline_wall_x``) the config and the processor are
``worker.trace.policies.offline.wall_x``'s (Qwen2.5-VL-3B with two MLP experts per text layer; Qwen2.5-VL's
image processing and a tokenizer of its vocabulary plus Wall-X's tokens) and the state dict is empty,
so ``from_pretrained``'s own ``load_state_dict(strict=False)`` keeps the model it built with random
weights from the seed; everything else in ``from_pretrained`` runs, including the resize of the
embedding to the tokenizer's 153,715 tokens (whose mean initialisation of the added rows
``building_fake`` skips for fake weights). The policy's dtypes stay: ``build_policy`` casts to fp32,
and the adapter then calls the policy's own ``to_bfloat16_for_selected_params`` again (the one
``WallXPolicy.__init__`` calls): bf16 everywhere but the RMSNorms and the flow head, which are fp32
(values that went through bf16, so the round trip is exact). ~4.2 B parameters, ~8.4 GB of real
weights; the constructor builds the model in fp32 first (twice the text model, transiently), so the
full size only fits with fake weights.

The frame is what the policy's own ``preprocess_inputs`` makes of LeRobot's preprocessed observation
(``make_wall_x_pre_post_processors`` without dataset statistics): each camera resized to 256 pixels and
then to a multiple of 28 (252×252: 18×18 patches, 81 visual tokens), Wall-X's prompt (system turn,
``Observation: <camera name>: <image> …``, ``Instruction:`` the task, ``Proprioception: <|propri|>``,
then the assistant turn of ``chunk_size`` (32) ``<|action|>`` tokens), the state padded to 20 channels
with its mask, the 20-channel ``dof_mask`` of the 7 real action channels, and ``moe_token_types`` (the
action tokens, routed to the action expert and attending to each other bidirectionally). Features are
the LIBERO layout of Wall-X's LIBERO example: ``face_view`` and ``right_wrist_view`` cameras of
3×256×256, an 8-dim state and 7-dim actions.

One chunk is ``predict_action_chunk`` in its default ``prediction_mode="diffusion"`` (the other mode,
``"fast"``, generates FAST tokens with ``generate``): ``Qwen2_5_VLMoEForAction.predict`` embeds the
prompt once and integrates its ``step`` velocity with ``torchdiffeq.odeint(..., method="euler")`` over
``linspace(0, 1, 11)`` from Gaussian noise. There is no key/value cache: each step runs the whole
language model over the whole prompt, with the action tokens' embeddings replaced by the flow head's
embedding of ``(x_t, t)``, and reads the velocity off the action tokens' hidden states. The step program
is one ``step`` call and the Euler update exactly as ``odeint`` computes it: ``x + (t1 - t0) · v``
with the time pair ``t.kk = [t_k, t_k+1]`` of the same ``linspace`` a plan constant (the update reads
``t1 - t0`` in fp32, not a rounded ``1/10``). The initial noise (``predict``'s one ``torch.randn``) is
a frame input; ``eager_chunk`` replays it into the policy's own ``predict_action_chunk``, whose
``preprocess_inputs`` is handed the frame's tensors.

Static variants (``torch.export`` cannot trace the originals with static shapes). The policy's own
``predict_action_chunk`` runs the original code; ``check_static`` compares the programs with the
original on the example frame, and the tests compare the plan with ``predict_action_chunk``:

* The Qwen2.5-VL vision tower, shared with eo1 (``worker.trace.policies.adapters._qwen2_5_vl``: the image grid
  a constant and its tables, rotary position ids, window index and boundaries, attention splits and
  per-image token counts, built once from it in Python). Wall-X installs its ``WallXVisionAttention``,
  which on CPU resolves to the native (non-flash) split attention that the static forward restates;
  the static tower is checked equal to the original bit for bit.
* The multimodal RoPE position ids (``get_rope_index``: ``.tolist()`` walks, ``.item()``) are a frame
  input computed on the host by the model's own ``get_rope_index``, as ``predict`` computes them.
* ``predict``'s image-token count check (``.sum().item()``) and ``step``'s ``assert action_mask.any()``
  are checked on the host, with the prompt's layout: one ``<|propri|>`` token and ``chunk_size``
  contiguous ``<|action|>`` tokens, ``moe_token_types`` exactly those, no padding.
* The boolean-mask writes and reads ``inputs_embeds[propri_mask] = …``, ``temp[action_mask] = …`` and
  ``hidden_states[action_mask]`` index the constant positions of those tokens.
* ``SparseMoeBlock``'s routing (``if mask.sum() == 0``, ``hidden_states[mask]``, ``torch.where(mask)``)
  gathers and scatters each expert's constant token positions (those of ``moe_token_types``).
* The attention mask with the action tokens' bidirectional island: ``create_causal_mask`` builds it with
  ``torch.vmap`` under ``TransformGetItemToIndex`` for any ``or_mask_function``, which exports as a
  ``flat_apply`` higher-order op that ``torch.export.save`` cannot serialize (``Unsupported getattr
  attribute function_const_func_spec0``); the island function is index-based, so the step builds the
  same mask by broadcasting it over index tensors (``use_vmap=False``, transformers' default for its own
  masks; ``broadcast_masks``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import ACTION

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import (
    field_default,
    prefix_then_steps_plan,
)
from worker.trace.policies.adapters._qwen2_5_vl import (
    VisionTables,
    check_static_rotary,
    static_vision_overrides,
    vision_tables,
)
from worker.trace.policies.adapters._qwen_vl import overridden
from worker.trace.policies.adapters._randomness import SubstitutionMismatch, replay
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.offline import wall_x as offline
from worker.trace.policies.offline.hub import known, redirected

PREFIX_INPUTS = ("input_ids", "pixel_values", "proprioception", "agent_pos_mask")
PREFIX_OUTPUTS = ("inputs_embeds",)
STEP_FRAME_INPUTS = ("attention_mask", "position_ids", "moe_token_types", "dof_mask")
FRAME_INPUTS = (*PREFIX_INPUTS, *STEP_FRAME_INPUTS)
NUM_STEPS = 10  # Qwen2_5_VLMoEForAction.predict's num_inference_timesteps, which predict_action_chunk keeps

SUBSTITUTION = (
    "Qwen2.5-VL vision tower: image_grid_thw a program constant fixed by the image size, and its tables "
    "(rot_pos_emb's position ids, get_window_index's window index and boundaries, cu_seqlens and the "
    "blocks' .tolist() splits, the per-image token counts) constants built once from the grid (as for "
    "eo1); get_rope_index (.tolist() walks, .item()) -> position ids a frame input computed on the host "
    "by the model's own get_rope_index; predict's image-token count (.sum().item()) and step's "
    "action_mask.any() -> checked on the host with the prompt's layout; inputs_embeds[propri_mask] = …, "
    "temp[action_mask] = … and hidden_states[action_mask] -> the tokens' constant positions; "
    "SparseMoeBlock's routing (mask.sum() == 0, hidden_states[mask], torch.where) -> each expert's "
    "constant token positions; create_causal_mask's vmapped action-island mask (a flat_apply that "
    "torch.export.save cannot serialize) -> the same mask function broadcast over index tensors "
    "(use_vmap=False) (all checked equal to the original on the example frame)"
)
WALL_X = Declared(
    "wall_x",
    {
        "observation.images.face_view": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.images.right_wrist_view": (FeatureType.VISUAL, (3, 256, 256)),
        "observation.state": (FeatureType.STATE, (8,)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=[SUBSTITUTION],
)


def default_checkpoint() -> str:
    """``WallXConfig.pretrained_name_or_path``'s default (the checkpoint the policy asks the hub for)."""
    from lerobot.policies.wall_x.configuration_wall_x import WallXConfig

    return field_default(WallXConfig, "pretrained_name_or_path")


@contextlib.contextmanager
def offline_wall_x() -> Iterator[None]:
    """Build Wall-X's model without the hub while the policy is constructed.

    Upstream behaviour worked around: ``WallXPolicy.__init__`` always calls
    ``Qwen2_5_VLMoEForAction.from_pretrained(config.pretrained_name_or_path)``, which downloads the
    checkpoint's config (``config_class.from_pretrained``), its processor (``AutoProcessor
    .from_pretrained``) and its weights (``cached_file(..., "model.safetensors")`` read by
    ``load_file``), then ``load_state_dict(..., strict=False)`` over the model it built from that config.
    Here the config and the processor are the offline ones for the name, and the state dict is empty:
    the model keeps its initialisation from the seed (a saved policy's weights are loaded afterwards by
    ``PreTrainedPolicy.from_pretrained``, as usual).
    """
    from lerobot.policies.wall_x import modeling_wall_x
    from lerobot.policies.wall_x.qwen_model import Qwen2_5_VLConfig

    def config(name: str, *args: Any, **kwargs: Any) -> Any:
        return Qwen2_5_VLConfig(**copy.deepcopy(known(offline.CONFIGS, str(name))))

    def processor(name: str) -> Any:
        return known(offline.PROCESSORS, name, "processor")()

    with (
        mock.patch.object(Qwen2_5_VLConfig, "from_pretrained", config),
        redirected(modeling_wall_x, {"AutoProcessor": processor}),
        mock.patch.object(modeling_wall_x, "cached_file", lambda name, filename, **kwargs: filename),
        mock.patch.object(modeling_wall_x, "load_file", lambda filename: {}),
    ):
        yield


@dataclass(frozen=True)
class Layout:
    """Where ``predict`` finds its tokens in the prompt, found on the host (batch 1, no padding)."""

    propri: list[int]  # the <|propri|> token's position
    act_start: int  # the chunk_size contiguous <|action|> tokens
    act_end: int
    experts: list[list[int]]  # the positions routed to each expert (moe_token_types == expert)


def find_layout(batch: Mapping[str, Any], model: Any, chunk_size: int) -> Layout:
    """The prompt's layout, with the checks that the static code leaves to the host."""
    ids = model.action_token_id_set
    input_ids, types = batch["input_ids"], batch["moe_token_types"]
    with real_tensors():
        if input_ids.shape[0] != 1 or not bool(batch["attention_mask"].all()):
            raise ValueError("wall_x: the prompt must be one unpadded sequence (batch 1)")
        propri: list[int] = (input_ids[0] == ids["propri_token_id"]).nonzero().flatten().tolist()
        actions: list[int] = (input_ids[0] == ids["action_token_id"]).nonzero().flatten().tolist()
        routed: list[int] = types[0].long().tolist()
    if len(propri) != 1:
        raise ValueError(f"wall_x: the prompt must hold one <|propri|> token, got {len(propri)}")
    if len(actions) != chunk_size or actions != list(range(actions[0], actions[0] + chunk_size)):
        raise ValueError(f"wall_x: the prompt must hold {chunk_size} contiguous <|action|> tokens")
    if routed != [int(i in set(actions)) for i in range(len(routed))]:
        raise ValueError("wall_x: moe_token_types must mark exactly the <|action|> tokens")
    experts = [[i for i, kind in enumerate(routed) if kind == e] for e in range(model.config.num_experts)]
    return Layout(propri, actions[0], actions[0] + chunk_size, experts)


def static_moe_forward(moe: Any, experts: list[list[int]]) -> Callable[..., torch.Tensor]:
    """``SparseMoeBlock.forward`` (batch 1) gathering and scattering each expert's constant positions
    instead of the boolean masks of ``experts_indices``."""

    def forward(hidden_states: torch.Tensor, experts_indices: torch.Tensor) -> torch.Tensor:
        output = torch.zeros_like(hidden_states)
        for expert_idx, expert in enumerate(moe.experts):
            positions = experts[expert_idx]
            if not positions:
                continue
            dim_input = moe.dim_inputs[expert_idx]
            index = torch.tensor(positions, dtype=torch.long, device=hidden_states.device)
            selected_hidden = hidden_states[0].index_select(0, index)
            processed_hidden = expert(selected_hidden[:, :dim_input])
            output[0, index, :dim_input] = processed_hidden
        return output

    return forward


def static_moe_overrides(model: Any, layout: Layout) -> dict[tuple[Any, str], Callable[..., Any]]:
    """Every decoder layer's ``SparseMoeBlock.forward``, static for ``layout``'s routing."""
    return {
        (layer.moe, "forward"): static_moe_forward(layer.moe, layout.experts)
        for layer in model.model.layers
        if layer.mlp is None
    }


@contextlib.contextmanager
def broadcast_masks() -> Iterator[None]:
    """Inside the block the eager attention masks are built by broadcasting the mask function over index
    tensors (transformers' default for its own masks) instead of ``torch.vmap``.

    ``create_causal_mask`` vmaps any ``or_mask_function`` (here the action-token island) under
    ``TransformGetItemToIndex``, which exports as a ``flat_apply`` higher-order op holding a pytree spec
    that ``torch.export.save`` cannot serialize. The island function is index-based, so broadcasting
    gives the same mask (checked equal on the example frame)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    masks: Any = ALL_MASK_ATTENTION_FUNCTIONS
    local = masks._local_mapping
    had, previous = "eager" in local, local.get("eager")
    original = masks["eager"]

    def eager_mask(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, "use_vmap": False})

    local["eager"] = eager_mask
    try:
        yield
    finally:
        if had:
            local["eager"] = previous
        else:
            local.pop("eager", None)


class _Prefix(torch.nn.Module):
    """``(input_ids, pixel_values, proprioception, agent_pos_mask) -> inputs_embeds``: ``predict`` up to
    the prompt's embeddings (the image features scattered in, the proprioception at ``<|propri|>``)."""

    def __init__(self, policy: Any, layout: Layout, tables: VisionTables) -> None:
        super().__init__()
        self.owner = policy  # the step's name for the policy too: the programs share their weight names
        self.layout = layout
        self.tables = tables
        with real_tensors():  # a constant of the program, read by no static code
            self.image_grid_thw = torch.tensor(tables.grid, dtype=torch.long)

    def forward(
        self,
        input_ids: torch.Tensor,
        pixel_values: torch.Tensor,
        proprioception: torch.Tensor,
        agent_pos_mask: torch.Tensor,
    ) -> torch.Tensor:
        model = self.owner.model
        inputs_embeds = model.model.embed_tokens(input_ids)
        pixel_values = pixel_values.type(model.visual.dtype)
        with overridden(static_vision_overrides(model.visual, self.tables)):
            image_embeds = model.visual(pixel_values, grid_thw=self.image_grid_thw).pooler_output
        image_mask = (input_ids == model.config.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
        image_embeds = image_embeds.to(inputs_embeds.device, inputs_embeds.dtype)
        inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds)
        proprioception = proprioception.to(inputs_embeds.dtype)
        agent_pos_mask = agent_pos_mask.to(inputs_embeds.dtype)
        proprio_embed = model.action_preprocessor.proprioception_proj(proprioception, agent_pos_mask)
        proprio_embed = proprio_embed.to(torch.bfloat16)
        index = torch.tensor(self.layout.propri, dtype=torch.long, device=inputs_embeds.device)
        inputs_embeds[0, index] = proprio_embed.reshape(-1, inputs_embeds.shape[-1])
        result: torch.Tensor = inputs_embeds
        return result


class _Step(torch.nn.Module):
    """``(inputs_embeds, attention_mask, position_ids, moe_token_types, dof_mask, x, [t0, t1]) ->
    (x + (t1 - t0) · v, chunk)``: ``predict``'s ``step(t0, x)`` and ``odeint``'s Euler update."""

    def __init__(self, policy: Any, layout: Layout, action_dim: int) -> None:
        super().__init__()
        self.owner = policy  # registers the policy's parameters with the exported program
        self.layout = layout
        self.action_dim = action_dim

    def embeds(
        self, inputs_embeds: torch.Tensor, dof_mask: torch.Tensor, x: torch.Tensor, t0: torch.Tensor
    ) -> torch.Tensor:
        """The prompt's embeddings with the action tokens' replaced, as ``step`` writes them."""
        model = self.owner.model
        timestep = t0.unsqueeze(0).repeat(x.shape[0])
        action_embed = model.action_preprocessor.step(timestep=timestep, noisy_action=x, dof_mask=dof_mask)
        action_embed = action_embed.reshape(-1, inputs_embeds.shape[-1])
        action_embed = action_embed.to(dtype=inputs_embeds.dtype, device=inputs_embeds.device)
        temp_inputs_embeds = inputs_embeds.clone()
        temp_inputs_embeds[:, self.layout.act_start : self.layout.act_end] = action_embed.unsqueeze(0)
        return temp_inputs_embeds

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        moe_token_types: torch.Tensor,
        dof_mask: torch.Tensor,
        x: torch.Tensor,
        t: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        model, layout = self.owner.model, self.layout
        t0 = t[0]
        dof_mask = dof_mask.to(torch.float32)
        with overridden(static_moe_overrides(model, layout)), broadcast_masks():
            transformer_outputs = model.model(
                input_ids=None,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=None,
                inputs_embeds=self.embeds(inputs_embeds, dof_mask, x, t0),
                moe_token_types=moe_token_types,
                use_cache=True,
                output_attentions=False,
                output_hidden_states=False,
                return_dict=True,
            )
        hidden_states = transformer_outputs.last_hidden_state
        action_hidden_states = hidden_states[0, layout.act_start : layout.act_end].to(torch.float32)
        v = model.action_preprocessor.action_proj_back(action_hidden_states).reshape(x.shape)
        x_next = x + (t[1] - t0) * v
        return x_next, x_next[:, :, : self.action_dim]


def odeint_times(num_steps: int) -> list[torch.Tensor]:
    """The ``[t_k, t_k+1]`` pairs of ``predict``'s ``linspace(0, 1, num_steps + 1)`` time grid."""
    times = torch.linspace(0, 1, num_steps + 1, dtype=torch.float32)
    return [times[k : k + 2].clone() for k in range(num_steps)]


class _Recorded(Exception):
    """Raised by the recording hook to stop ``predict`` after the first language-model call."""


@contextlib.contextmanager
def first_attention_mask(model: Any, into: dict[str, Any]) -> Iterator[None]:
    """Inside the block the first decoder layer's attention records its mask as ``into["mask"]``."""

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        into["mask"] = kwargs["attention_mask"]

    handle = model.model.layers[0].self_attn.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def record_first_step(policy: Any, batch: Mapping[str, Any], noise: torch.Tensor) -> dict[str, Any]:
    """The keyword inputs, the attention mask and the output of the language model's first call in
    ``predict_action_chunk`` (the original code, fed ``batch`` as its preprocessed inputs and ``noise``);
    ``predict`` is stopped there."""
    recorded: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}

    def hook(module: Any, args: Any, inputs: dict[str, Any], output: Any) -> None:
        kwargs.update(inputs)
        recorded["output"] = output.last_hidden_state
        raise _Recorded

    handle = policy.model.model.register_forward_hook(hook, with_kwargs=True)
    try:
        with given_inputs(policy, batch), first_attention_mask(policy.model, recorded):
            replay(lambda: policy.predict_action_chunk(dict(batch)), [noise])
    except _Recorded:
        pass
    finally:
        handle.remove()
        policy.reset()
    if not kwargs:
        raise RuntimeError("wall_x: predict_action_chunk never called the language model")
    recorded["kwargs"] = kwargs
    return recorded


def check_static(
    policy: Any, batch: Mapping[str, Any], prefix: _Prefix, step: _Step, noise: torch.Tensor
) -> None:
    """The static programs equal the original on ``batch``, or ``SubstitutionMismatch``: the static vision
    tower the original one; the prefix's embeddings with the step's action embeddings, the position ids,
    the 2D mask and the token types the language model's first call in ``predict``; the broadcast
    attention mask the vmapped one; and the language model with the static routing that call's output
    (all bit for bit)."""
    model = policy.model
    visual = model.visual
    grid = batch["image_grid_thw"]
    frame = {key: batch[key] for key in FRAME_INPUTS}
    with torch.no_grad():
        pixels = batch["pixel_values"].type(visual.dtype)
        original_vision = visual(pixels, grid_thw=grid).pooler_output
        with overridden(static_vision_overrides(visual, prefix.tables)):
            static_vision = visual(pixels, grid_thw=grid).pooler_output
        if not torch.equal(original_vision, static_vision):
            raise SubstitutionMismatch("wall_x: the static vision tower differs from the original")
        first = record_first_step(policy, batch, noise)
        kwargs = first["kwargs"]
        inputs_embeds = prefix(*(frame[key] for key in PREFIX_INPUTS))
        embeds = step.embeds(
            inputs_embeds, frame["dof_mask"].to(torch.float32), noise, odeint_times(NUM_STEPS)[0][0]
        )
        for name, expected, got in (
            ("embeddings", kwargs["inputs_embeds"], embeds),
            ("position ids", kwargs["position_ids"], frame["position_ids"]),
            ("attention mask", kwargs["attention_mask"], frame["attention_mask"]),
            ("token types", kwargs["moe_token_types"], frame["moe_token_types"]),
        ):
            if not torch.equal(expected, got):
                raise SubstitutionMismatch(f"wall_x: the static programs' {name} differ from predict's")
        static: dict[str, Any] = {}
        with (
            overridden(static_moe_overrides(model, step.layout)),
            broadcast_masks(),
            first_attention_mask(model, static),
        ):
            output = model.model(**kwargs).last_hidden_state
    if not torch.equal(first["mask"], static["mask"]):
        raise SubstitutionMismatch("wall_x: the broadcast action-island mask differs from the vmapped one")
    if not torch.equal(first["output"], output):
        raise SubstitutionMismatch("wall_x: the static expert routing differs from SparseMoeBlock's")


@contextlib.contextmanager
def given_inputs(policy: Any, batch: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block ``preprocess_inputs`` returns the model inputs of ``batch`` (the frame's, which
    ``preprocess_inputs`` made from the observation) instead of making them again."""
    keys = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "proprioception")
    inputs = {key: batch[key] for key in (*keys, "agent_pos_mask", "dof_mask", "moe_token_types")}

    def preprocess_inputs(_: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(inputs)

    policy.__dict__["preprocess_inputs"] = preprocess_inputs
    try:
        yield
    finally:
        policy.__dict__.pop("preprocess_inputs", None)


def trace_wall_x_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with ``WallXConfig`` overrides (the tests' small configs use the same code path)."""
    from lerobot.policies.wall_x.processor_wall_x import make_wall_x_pre_post_processors

    policy: Any = WALL_X.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_wall_x()
    )
    config = policy.config
    if config.prediction_mode != "diffusion":
        raise NotImplementedError("wall_x is traced in its default prediction_mode='diffusion' only")
    model = policy.model
    model.to_bfloat16_for_selected_params()  # WallXPolicy's own dtypes, after build_policy's fp32 cast
    preprocessor, _ = make_wall_x_pre_post_processors(config)

    def preprocess(index: int) -> dict[str, Any]:
        with real_tensors():
            observation: dict[str, Any] = example_observation(config.input_features, index, seed=seed)
            observation["task"] = TASK
            batch: dict[str, Any] = dict(policy.preprocess_inputs(preprocessor(observation)))
            batch["position_ids"], _ = model.get_rope_index(
                batch["input_ids"],
                batch["image_grid_thw"],
                None,
                None,
                batch["attention_mask"],
            )
        return batch

    batch0 = preprocess(0)
    layout = find_layout(batch0, model, config.chunk_size)
    with real_tensors():
        image_grid_thw: list[list[int]] = batch0["image_grid_thw"].tolist()
        image_tokens = int((batch0["input_ids"] == model.config.image_token_id).sum())
    tables = vision_tables(model.visual, image_grid_thw)
    if image_tokens != sum(tables.tokens):
        raise ValueError(f"wall_x: {image_tokens} image tokens in the prompt for grids {image_grid_thw}")
    check_static_rotary(model.visual, tables)
    noise_shape = (1, config.chunk_size, config.max_action_dim)

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        batch = batch0 if index == 0 else preprocess(index)
        if index:
            with real_tensors():
                grid = batch["image_grid_thw"].tolist()
            if find_layout(batch, model, config.chunk_size) != layout or grid != tables.grid:
                raise ValueError(f"wall_x: frame {index}'s prompt layout differs from frame 0's")
        frame = {key: batch[key] for key in FRAME_INPUTS}
        frame["noise"] = standard_normal(noise_shape, seed=seed, index=index, name="noise")
        return frame

    frame0 = make_frame(0)
    action_dim = config.output_features[ACTION].shape[0]
    prefix = _Prefix(policy, layout, tables)
    step = _Step(policy, layout, action_dim)
    if not is_fake(model.action_preprocessor.w1.weight):  # fake weights hold no values to compare
        check_static(policy, batch0, prefix, step, frame0["noise"])

    step_inputs = (*PREFIX_OUTPUTS, *STEP_FRAME_INPUTS)
    plan = prefix_then_steps_plan(
        Call("prefix", PREFIX_INPUTS, PREFIX_OUTPUTS),
        step_inputs,
        first_sample="noise",
        sample="x",
        chunk="action",
        times=odeint_times(NUM_STEPS),
        frame_inputs=(*FRAME_INPUTS, "noise"),
    )

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch: dict[str, Any] = {key: frame[key] for key in FRAME_INPUTS}
        batch["image_grid_thw"] = torch.tensor(tables.grid, dtype=torch.long)
        return predicted_chunk(policy, batch, draws=[frame["noise"]], within=[given_inputs(policy, batch)])

    along = Along(
        [
            Program("prefix", prefix),
            Program("denoise_step", step, (*step_inputs, "x", "t"), ("x_next", "action")),
        ],
        plan,
        frame=frame0,
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            model_config=model.config.to_dict(),
            processor=f"stand-in ({config.pretrained_name_or_path}: Qwen2.5-VL image processing, tokenizer "
            f"vocabulary {len(model.processor.tokenizer)} with Wall-X's tokens)",
            image_grid_thw=tables.grid,
            propri_position=layout.propri,
            action_span=[layout.act_start, layout.act_end],
            num_inference_timesteps=NUM_STEPS,
            backbone_dtype=str(model.model.embed_tokens.weight.dtype),
        ),
    )
    return WALL_X.trace(policy, along, seed=seed, checkpoint=checkpoint)


WALL_X.register(trace_wall_x_with)
