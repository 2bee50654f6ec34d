"""LingBot-VA (an autoregressive video-action world model on Wan2.2-TI2V-5B's dual-stream transformer): its
first action chunk as a ``text_encoder`` program (UMT5-XXL over the prompt and the empty negative prompt,
twice), an ``encode_frame`` program (the streaming Wan2.2 VAE over the two cameras, once), a
``video_step`` program (the transformer over the video latents, classifier-free guided, and the scheduler's
update) run ``num_inference_steps`` (20) times, a ``video_cache`` program (its final pass at t = 0, which
writes the video keys and values to the key/value cache) once, an ``action_step`` program (the transformer
over the action tokens, attending to that cache, and the action scheduler's update) run
``action_num_inference_steps`` (50) times, and an ``action_cache`` program (its final pass, which writes the
action keys and values for the next chunk) once.

``LingBotVAPolicy`` builds its 5.09 B-parameter transformer from its config (LeRobot's defaults mirror the
released ``transformer/config.json``) and casts it to ``dtype`` (bf16); at its first inference it loads
the frozen Wan2.2 VAE, the UMT5-XXL encoder and the tokenizer from ``robbyant/lingbot-va-base``
(``from_pretrained(..., torch_dtype=bf16)``). Offline the adapter builds those from their published
configs (``worker.trace.policies.offline.wan2_2``) in bf16 with random weights from the seed, through the
policy's own ``_ensure_frozen_modules``. ``build_policy``'s fp32 cast of the transformer is undone tensor
by tensor. At full size the weights (~11.5 B parameters, ~23 GB in bf16, the transformer built in fp32
first) do not fit a 24 GB worker: the engine traces it with fake weights.

The chunk traced is the first of an episode (``predict_action_chunk`` on a reset policy): the prompt is
encoded, the observation is the conditioning frame, and the key/value cache starts empty. Later chunks
first feed the observed keyframes and the executed actions back into the cache (``_compute_kv_cache``), a
pass this plan does not contain. The frame: LIBERO's layout (the upstream LIBERO configuration), two
3×128×128 cameras (latents 8×8 each, concatenated on width: 8×16, 128 video tokens per 4-frame chunk,
16 action tokens), 7 of the 30 action channels used; the prompt and the empty negative prompt (the policy
guides with ``guidance_scale`` 5, so every transformer pass runs on the pair) tokenized on the host by the
policy's own tokenizer call (``_get_t5_prompt_embeds``: the UMT5 stand-in, padded to
``max_sequence_length`` 512); and the initial video and action noise (``_infer``'s two ``torch.randn``),
which ``eager_chunk`` hands to the policy's own ``predict_action_chunk`` by replaying those draws.

Static variants (``torch.export`` cannot trace the originals, or ``to_edge`` rejects what they trace to).
The policy's own ``predict_action_chunk`` runs the original code; the plan through the eager programs is
checked equal to it, bit for bit, on the example frame, and the cache programs' keys and values to what
the policy's cache holds after it (``check_static_chunk``; ``SubstitutionMismatch`` otherwise):

* ``_get_t5_prompt_embeds`` trims each prompt's embeddings to its length and pads them with zeros
  (``u[:v]`` with ``v`` a tensor); the program zeroes the positions from ``v`` on with ``torch.where``.
* The self-attention's key/value cache (``WanAttention.update_cache``: free slots by ``nonzero``, oldest
  evicted by ``argsort``, the valid slots gathered by ``nonzero``) is, in the first chunk, empty before
  the video passes, holds the video tokens (written by the final video pass) during the action passes, and
  each pass's own tokens are written after the cached ones and removed again (``update_cache=0``). The
  self-attention's ``forward`` is restated with that layout: keys and values are the cached ones (program
  inputs) followed by the pass's own, and the cache programs return the keys and values the final passes
  write (``update_cache=1``).
* The rotary embedding (``WanRotaryPosEmbed`` from the chunk's grid ids, ``torch.polar``) and its
  application (``view_as_complex``, not Core ATen; ExecuTorch has no complex dtype): the table is computed
  once on the host by the policy's own ``rope`` for the video and the action grids (fixed by the layout)
  and applied as the same complex product in float64 real arithmetic over its real and imaginary parts.
* ``FlowMatchScheduler.step`` finds its step with ``argmin`` over its timesteps and compares the index with
  the step count in Python; its step sizes ``sigma_next - sigma`` are plan constants computed on the host
  by that same lookup, beside the times.
* ``_prepare_latent_input`` zeroes the unused action channels with ``x[:, ~mask] *= 0`` (a boolean-mask
  index); the program multiplies by the 0/1 channel mask (the same zeros, signs included).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters import _wan
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import Features
from worker.trace.policies.adapters._qwen_vl import overridden
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.offline import wan2_2
from worker.trace.policies.offline.hub import known

CAMERAS = ("observation.images.image", "observation.images.image2")

PROMPTS = ("prompt_embeds", "negative_embeds")
SUBSTITUTIONS = [
    "_get_t5_prompt_embeds: the prompts tokenized on the host by the policy's own tokenizer call (ids and "
    "masks frame inputs), and the trim-and-pad u[:v] + zeros (a slice bounded by a tensor) -> torch.where("
    "arange(L) < v, u, 0)",
    "WanAttention's key/value cache (nonzero/argsort slot allocation, nonzero gather of the valid slots) -> "
    "the first chunk's layout: keys and values are the cached ones (program inputs: none for the video "
    "passes, the video tokens for the action passes) followed by the pass's own; the final passes "
    "(update_cache=1) are the video_cache and action_cache programs, returning what they write",
    "rotary embeddings: WanRotaryPosEmbed(grid_ids) (torch.polar) and apply_rotary_emb (view_as_complex, not "
    "Core ATen) -> the policy's own table for the chunk's video and action grids computed once on the "
    "host, applied as the same product in float64 real arithmetic over its real and imaginary parts",
    "FlowMatchScheduler.step's argmin lookup of the step (and its Python comparison with the step count) -> "
    "sigma_next - sigma plan constants computed on the host by the same lookup",
    "_prepare_latent_input's x[:, ~action_mask] *= 0 (a boolean-mask index) -> x * action_mask (0/1), "
    "the same zeros (the plan through the eager programs is checked equal, bit for bit, to the policy's own "
    "predict_action_chunk on the example frame, and the cache programs to the policy's cache)",
]
LINGBOT_VA = Declared(
    "lingbot_va",
    {
        CAMERAS[0]: (FeatureType.VISUAL, (3, 128, 128)),
        CAMERAS[1]: (FeatureType.VISUAL, (3, 128, 128)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=SUBSTITUTIONS,
)


class _Loader:
    """``from_pretrained(path, subfolder=..., torch_dtype=...)`` of one frozen component, built locally."""

    def __init__(self, build: Callable[[str], Any], dtype_aware: bool = True) -> None:
        self.build = build
        self.dtype_aware = dtype_aware

    def from_pretrained(
        self, name: str, *, subfolder: str | None = None, torch_dtype: torch.dtype | None = None
    ) -> Any:
        built = self.build(str(name))
        return built.to(torch_dtype) if self.dtype_aware and torch_dtype is not None else built


@contextlib.contextmanager
def offline_lingbot_va(
    vae_configs: Mapping[str, dict[str, Any]] = wan2_2.VAE_CONFIGS,
    text_encoder_configs: Mapping[str, dict[str, Any]] = wan2_2.TEXT_ENCODER_CONFIGS,
) -> Iterator[None]:
    """Build LingBot-VA's frozen Wan2.2 components without the hub while they are loaded.

    Upstream behaviour worked around: ``LingBotVAPolicy._ensure_frozen_modules`` (at the first inference)
    loads the VAE (``AutoencoderKLWan.from_pretrained(wan_pretrained_path, subfolder="vae",
    torch_dtype=bf16)``), the UMT5-XXL encoder (``UMT5EncoderModel.from_pretrained(...,
    subfolder="text_encoder", torch_dtype=bf16)``) and the tokenizer (``T5TokenizerFast.from_pretrained(...,
    subfolder="tokenizer")``) from the hub, with no config-only path. The stand-ins build the published
    architectures with random weights in the requested dtype (bf16 throughout: transformers keeps UMT5's
    ``wo`` in fp32 only for fp16).
    """
    from lerobot.policies.lingbot_va import utils

    with (
        mock.patch.object(utils, "AutoencoderKLWan", _Loader(_wan.vae_from(vae_configs))),
        mock.patch.object(utils, "UMT5EncoderModel", _Loader(_wan.text_encoder_from(text_encoder_configs))),
        mock.patch.object(
            utils, "T5TokenizerFast", _Loader(_wan.tokenizer_from(wan2_2.TOKENIZERS), dtype_aware=False)
        ),
    ):
        yield


@dataclass(frozen=True)
class Layout:
    """What the first chunk's shapes fix: the latent grid, the token counts, the grid ids' rotary tables,
    the scheduler's times and step sizes."""

    latent_shape: tuple[int, int, int, int, int]  # [1, 48, F, h, w]
    action_shape: tuple[int, int, int, int, int]  # [1, action_dim, F, action_per_frame, 1]
    video_rotation: _wan.Rotation
    action_rotation: _wan.Rotation
    video_times: list[torch.Tensor]
    video_deltas: list[torch.Tensor]
    action_times: list[torch.Tensor]
    action_deltas: list[torch.Tensor]


def scheduler_deltas(scheduler: Any, times: torch.Tensor) -> list[torch.Tensor]:
    """``sigma_next - sigma`` that ``FlowMatchScheduler.step`` computes at each time, by its own lookup."""
    deltas = []
    for timestep in times:
        timestep_id = torch.argmin((scheduler.timesteps - timestep.cpu()).abs())
        sigma = scheduler.sigmas[timestep_id]
        last = timestep_id + 1 >= len(scheduler.timesteps)
        sigma_next = (
            (1 if (scheduler.inverse_timesteps or scheduler.reverse_sigmas) else 0)
            if last
            else (scheduler.sigmas[timestep_id + 1])
        )
        deltas.append(torch.as_tensor(sigma_next - sigma, dtype=torch.float32).reshape(()))
    return deltas


def layout_of(policy: Any) -> Layout:
    """The first chunk's layout, computed on the host by the policy's own code."""
    import torch.nn.functional as F
    from lerobot.policies.lingbot_va.utils import get_mesh_id

    config, transformer = policy.config, policy.transformer
    latent_h, latent_w = policy._latent_hw
    frames = config.frame_chunk_size
    p = config.patch_size
    with real_tensors():
        video_grid = get_mesh_id(frames // p[0], latent_h // p[1], latent_w // p[2], 0, 1, 0)
        action_grid = get_mesh_id(frames, config.action_per_frame, 1, 1, 1, 0, action=True)
        video_table = transformer.rope(video_grid[None])[:, :, None]
        action_table = transformer.rope(action_grid[None])[:, :, None]
        policy._scheduler.set_timesteps(config.num_inference_steps)
        policy._action_scheduler.set_timesteps(config.action_num_inference_steps)
        video_times = F.pad(policy._scheduler.timesteps, (0, 1), mode="constant", value=0)
        if config.video_exec_step != -1:
            raise NotImplementedError("lingbot_va is traced with video_exec_step=-1 (the default)")
        action_times = F.pad(policy._action_scheduler.timesteps, (0, 1), mode="constant", value=0)
        layout = Layout(
            latent_shape=(1, 48, frames, latent_h, latent_w),
            action_shape=(1, config.action_dim, frames, config.action_per_frame, 1),
            video_rotation=_wan.Rotation.of(video_table),
            action_rotation=_wan.Rotation.of(action_table),
            video_times=[t.clone() for t in video_times],
            video_deltas=scheduler_deltas(policy._scheduler, video_times[:-1]),
            action_times=[t.clone() for t in action_times],
            action_deltas=scheduler_deltas(policy._action_scheduler, action_times[:-1]),
        )
    return layout


def static_self_attention(
    attn: Any, rotation: _wan.Rotation, cached: tuple[torch.Tensor, torch.Tensor] | None, written: list[Any]
) -> Callable[..., torch.Tensor]:
    """``WanAttention.forward`` for a self-attention in the first chunk: the same projections, norms and
    rotation (in real arithmetic, ``rotation`` being the grid's table), attending over ``cached`` keys and
    values followed by the pass's own; the pass's own keys and values are appended to ``written``."""

    def forward(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        rotary_emb: torch.Tensor | None,
        update_cache: int = 0,
        cache_name: str = "pos",
    ) -> torch.Tensor:
        query, key, value = attn.to_q(q), attn.to_k(k), attn.to_v(v)
        query = attn.norm_q(query)
        query = query.unflatten(2, (attn.heads, -1))
        key = attn.norm_k(key)
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        def apply_rotary_emb(x: torch.Tensor) -> torch.Tensor:
            pairs = x.to(torch.float64).reshape(x.shape[0], x.shape[1], x.shape[2], -1, 2)
            return rotation.apply(pairs).flatten(3).to(x.dtype)

        query = apply_rotary_emb(query)
        key = apply_rotary_emb(key)
        written.append((key, value))
        if cached is not None:
            key = torch.cat([cached[0], key], dim=1)
            value = torch.cat([cached[1], value], dim=1)
        hidden_states = attn.attn_op(query, key, value)
        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.type_as(query)
        hidden_states = attn.to_out[0](hidden_states)
        out: torch.Tensor = attn.to_out[1](hidden_states)
        return out

    return forward


@contextlib.contextmanager
def first_chunk_transformer(
    policy: Any,
    rotation: _wan.Rotation,
    cache: tuple[torch.Tensor, torch.Tensor] | None,
    written: list[Any],
) -> Iterator[None]:
    """Inside the block the transformer runs the first chunk's static self-attention (layer ``i`` reading
    ``cache[0][i]``, ``cache[1][i]``), its rotary module returns the grid ids unused, and
    ``_prepare_latent_input`` zeroes the unused action channels by multiplication."""
    transformer = policy.transformer
    overrides: dict[tuple[Any, str], Callable[..., Any]] = {}
    for layer, block in enumerate(transformer.blocks):
        cached = None if cache is None else (cache[0][layer], cache[1][layer])
        overrides[(block.attn1, "forward")] = static_self_attention(block.attn1, rotation, cached, written)
    overrides[(transformer.rope, "forward")] = lambda grid_ids: grid_ids
    overrides[(policy, "_prepare_latent_input")] = static_latent_input(policy)
    with overridden(overrides):
        yield


def static_latent_input(policy: Any) -> Callable[..., dict[str, Any]]:
    """``_prepare_latent_input`` with ``x[:, ~mask] *= 0`` as ``x * mask``: the original runs with the
    action-channel zeroing intercepted and replaced by the multiplication."""
    original = type(policy)._prepare_latent_input

    def prepare(*args: Any, **kwargs: Any) -> dict[str, Any]:
        with _MaskedZeroing(lambda: policy._action_mask):
            result: dict[str, Any] = original(policy, *args, **kwargs)
        return result

    return prepare


class _MaskedZeroing(torch.overrides.TorchFunctionMode):
    """``x[:, ~mask] *= 0`` (``__getitem__`` by the inverted channel mask, ``__imul__`` by 0, ``__setitem__``
    back) as ``x.mul_(mask)`` over the channel dimension."""

    def __init__(self, mask: Callable[[], torch.Tensor]) -> None:
        super().__init__()
        self.mask = mask  # built only where the zeroing happens
        self.pending: list[torch.Tensor] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.__getitem__ and self._is_inverted_mask_index(args[1]):
            self.pending.append(args[0])
            return _Zeroed()
        if func is torch.Tensor.__setitem__ and self._is_inverted_mask_index(args[1]):
            if not isinstance(args[2], _Zeroed):
                raise SubstitutionMismatch("lingbot_va: the masked action channels are set to a tensor")
            x = self.pending.pop()
            keep = self.mask().to(dtype=x.dtype, device=x.device).view(1, -1, *([1] * (x.dim() - 2)))
            x.mul_(keep)
            return None
        return func(*args, **kwargs)

    def _is_inverted_mask_index(self, index: Any) -> bool:
        return (
            isinstance(index, tuple)
            and len(index) == 2
            and index[0] == slice(None)
            and isinstance(index[1], torch.Tensor)
            and index[1].dtype == torch.bool
        )


class _Zeroed:
    """``x[:, ~mask]``'s stand-in: multiplying it by 0 keeps it the zeroing it stands for."""

    def __imul__(self, other: object) -> _Zeroed:
        if other != 0:
            raise SubstitutionMismatch("lingbot_va: the masked action channels are scaled by a non-zero")
        return self

    def __mul__(self, other: object) -> _Zeroed:
        return self.__imul__(other)


@contextlib.contextmanager
def prompt_state(policy: Any, prompt_embeds: torch.Tensor, negative_embeds: torch.Tensor) -> Iterator[None]:
    """Inside the block the policy's encoded prompts (``_prompt_embeds``, ``_negative_prompt_embeds``, which
    ``_prepare_latent_input`` and ``_repeat_input_for_cfg`` read) are the program's inputs."""
    saved = policy._prompt_embeds, policy._negative_prompt_embeds
    policy._prompt_embeds, policy._negative_prompt_embeds = prompt_embeds, negative_embeds
    try:
        yield
    finally:
        policy._prompt_embeds, policy._negative_prompt_embeds = saved


class _TextEncoder(torch.nn.Module):
    """``(input_ids, attention_mask) -> prompt embeddings``: ``_get_t5_prompt_embeds`` after the tokenizer,
    its padding zeroed statically."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.text_encoder = policy._frozen["text_encoder"]  # the frozen encoder's weights are the program's
        self.dtype = policy.dtype

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seq_lens = attention_mask.gt(0).sum(dim=1).long()
        prompt_embeds = self.text_encoder(input_ids, attention_mask).last_hidden_state
        prompt_embeds = prompt_embeds.to(dtype=self.dtype)
        return _wan.zeroed_after(prompt_embeds, seq_lens)


class _EncodeFrame(torch.nn.Module):
    """``(camera, camera) -> init latent``: ``_encode_frames`` of the conditioning frame with the streaming
    VAE's causal cache empty (the first chunk), left empty again after the call."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.owner = policy
        self.vae = policy._frozen["vae"]

    def forward(self, *cameras: torch.Tensor) -> torch.Tensor:
        streaming = self.owner._frozen["streaming_vae"]
        streaming.clear_cache()
        try:
            latent: torch.Tensor = self.owner._encode_frames([dict(zip(CAMERAS, cameras, strict=True))])
        finally:
            streaming.clear_cache()
        return latent


class _VideoPass(torch.nn.Module):
    """One of ``_infer``'s video passes: ``(prompt, negative prompt, init latent, latents, t[, dt])``. A step
    returns the guided scheduler update with the conditioning frame restored; the final pass
    (``write=True``, ``update_cache=1``) returns the keys and values it writes, stacked over layers."""

    def __init__(self, policy: Any, layout: Layout, write: bool) -> None:
        super().__init__()
        self.owner = policy
        self.layout = layout
        self.write = write

    def forward(self, *args: torch.Tensor) -> Any:
        policy, layout = self.owner, self.layout
        config = policy.config
        prompt_embeds, negative_embeds, init_latent, latents, t = args[:5]
        latents = latents.clone()  # _infer's own tensor, updated in place
        latent_cond = init_latent[:, :, 0:1].to(policy.dtype)
        written: list[Any] = []
        with (
            prompt_state(policy, prompt_embeds, negative_embeds),
            first_chunk_transformer(policy, layout.video_rotation, None, written),
        ):
            input_dict = policy._prepare_latent_input(latents, None, t, t, latent_cond, None, frame_st_id=0)
            video_noise_pred = policy.transformer(
                policy._repeat_input_for_cfg(input_dict["latent_res_lst"]),
                update_cache=1 if self.write else 0,
                cache_name="pos",
                action_mode=False,
            )
        if self.write:
            return stacked(written)
        from lerobot.policies.lingbot_va.utils import data_seq_to_patch

        _, _, frames, latent_h, latent_w = layout.latent_shape
        video_noise_pred = data_seq_to_patch(
            config.patch_size,
            video_noise_pred,
            frames,
            latent_h,
            latent_w,
            batch_size=2 if policy._use_cfg else 1,
        )
        if config.guidance_scale > 1:
            video_noise_pred = video_noise_pred[1:] + config.guidance_scale * (
                video_noise_pred[:1] - video_noise_pred[1:]
            )
        else:
            video_noise_pred = video_noise_pred[:1]
        latents = latents + video_noise_pred * args[5]  # FlowMatchScheduler.step with its step size
        latents[:, :, 0:1] = latent_cond
        return latents


class _ActionPass(torch.nn.Module):
    """One of ``_infer``'s action passes: ``(prompt, negative prompt, video keys, video values, actions, t[,
    dt])``, attending to the video tokens in the cache. A step returns the scheduler update with the first
    frame's actions zeroed and the chunk ``predict_action_chunk`` returns of it; the final pass
    (``write=True``) returns the action keys and values it writes for the next chunk."""

    def __init__(self, policy: Any, layout: Layout, write: bool) -> None:
        super().__init__()
        self.owner = policy
        self.layout = layout
        self.write = write

    def forward(self, *args: torch.Tensor) -> Any:
        policy, layout = self.owner, self.layout
        config = policy.config
        prompt_embeds, negative_embeds, keys, values, actions, t = args[:6]
        actions = actions.clone()  # _infer's own tensor, updated in place
        action_cond = torch.zeros(
            [1, config.action_dim, 1, config.action_per_frame, 1], device=actions.device, dtype=policy.dtype
        )
        written: list[Any] = []
        with (
            prompt_state(policy, prompt_embeds, negative_embeds),
            first_chunk_transformer(policy, layout.action_rotation, (keys, values), written),
        ):
            input_dict = policy._prepare_latent_input(None, actions, t, t, None, action_cond, frame_st_id=0)
            action_noise_pred = policy.transformer(
                policy._repeat_input_for_cfg(input_dict["action_res_lst"]),
                update_cache=1 if self.write else 0,
                cache_name="pos",
                action_mode=True,
            )
        if self.write:
            return stacked(written)
        from einops import rearrange

        action_noise_pred = rearrange(action_noise_pred, "b (f n) c -> b c f n 1", f=config.frame_chunk_size)
        if config.action_guidance_scale > 1:
            action_noise_pred = action_noise_pred[1:] + config.action_guidance_scale * (
                action_noise_pred[:1] - action_noise_pred[1:]
            )
        else:
            action_noise_pred = action_noise_pred[:1]
        actions = actions + action_noise_pred * args[6]  # FlowMatchScheduler.step with its step size
        actions[:, :, 0:1] = action_cond
        return actions, first_chunk_actions(policy, actions)


def first_chunk_actions(policy: Any, actions: torch.Tensor) -> torch.Tensor:
    """What ``predict_action_chunk`` returns of the first chunk's final actions: the unused channels zeroed
    (``actions[:, ~mask] *= 0``, as a multiplication), the used ones, frame 0 dropped, ``[1, steps, used]``
    in fp32."""
    mask = policy._action_mask.to(dtype=actions.dtype, device=actions.device)
    actions = actions * mask.view(1, -1, 1, 1, 1)
    a = actions[:, policy.config.used_action_channel_ids][:, :, 1:]
    a = a.squeeze(-1).flatten(2)
    return a.transpose(1, 2).contiguous().to(torch.float32)


def stacked(written: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-layer keys and values a pass wrote, as two tensors ``[layers, batch, tokens, heads, dim]``."""
    return torch.stack([k for k, _ in written]), torch.stack([v for _, v in written])


FRAME_INPUTS = (
    "prompt_ids",
    "prompt_mask",
    "negative_ids",
    "negative_mask",
    *CAMERAS,
    "noise_latents",
    "noise_actions",
)


def first_chunk_plan(layout: Layout) -> ChunkPlan:
    """The first chunk's calls: the two prompts, the conditioning frame, the video steps and the video
    cache pass, the action steps and the action cache pass."""
    calls = [
        Call("text_encoder", ("prompt_ids", "prompt_mask"), ("prompt_embeds",)),
        Call("text_encoder", ("negative_ids", "negative_mask"), ("negative_embeds",)),
        Call("encode_frame", CAMERAS, ("init_latent",)),
    ]
    constants: dict[str, torch.Tensor] = {}
    video_steps, action_steps = len(layout.video_deltas), len(layout.action_deltas)
    latents = ["noise_latents", *(f"latents.{k + 1:02d}" for k in range(video_steps))]
    for k in range(video_steps):
        inputs = (*PROMPTS, "init_latent", latents[k], f"vt.{k:02d}", f"vdt.{k:02d}")
        calls.append(Call("video_step", inputs, (latents[k + 1],)))
    calls.append(
        Call(
            "video_cache",
            (*PROMPTS, "init_latent", latents[-1], f"vt.{video_steps:02d}"),
            ("video_keys", "video_values"),
        )
    )
    actions = ["noise_actions", *(f"actions.{k + 1:02d}" for k in range(action_steps))]
    for k in range(action_steps):
        chunk = "action" if k == action_steps - 1 else f"action.{k + 1:02d}"
        step_inputs = (*PROMPTS, "video_keys", "video_values", actions[k], f"at.{k:02d}", f"adt.{k:02d}")
        calls.append(Call("action_step", step_inputs, (actions[k + 1], chunk)))
    calls.append(
        Call(
            "action_cache",
            (*PROMPTS, "video_keys", "video_values", actions[-1], f"at.{action_steps:02d}"),
            ("action_keys", "action_values"),
        )
    )
    constants.update({f"vt.{k:02d}": t for k, t in enumerate(layout.video_times)})
    constants.update({f"vdt.{k:02d}": d for k, d in enumerate(layout.video_deltas)})
    constants.update({f"at.{k:02d}": t for k, t in enumerate(layout.action_times)})
    constants.update({f"adt.{k:02d}": d for k, d in enumerate(layout.action_deltas)})
    return ChunkPlan(frame_inputs=FRAME_INPUTS, calls=tuple(calls), outputs=("action",), constants=constants)


def check_static_chunk(policy: Any, traced: TracedPolicy, frame: dict[str, torch.Tensor]) -> None:
    """The plan through the eager programs equals the policy's own ``predict_action_chunk`` on ``frame``,
    bit for bit, and the cache passes' keys and values what the policy's cache holds after it, or
    ``SubstitutionMismatch``."""
    record: list[tuple[Call, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = []
    with torch.no_grad():
        static = traced.plan.run(traced.eager, frame, record)["action"]
    assert traced.eager_chunk is not None
    original = traced.eager_chunk(frame)["action"]
    if not torch.equal(static, original):
        raise SubstitutionMismatch("lingbot_va: the static chunk differs from predict_action_chunk's")
    written = {call.program: outs for call, _, outs in record if call.program.endswith("_cache")}
    video_tokens = written["video_cache"][0].shape[2]
    for layer, block in enumerate(policy.transformer.blocks):
        cache = block.attn1.attn_caches["pos"]
        action_tokens = written["action_cache"][0].shape[2]
        valid = video_tokens + action_tokens
        if not bool(cache["mask"][:valid].all()) or bool(cache["mask"][valid:].any()):
            raise SubstitutionMismatch(
                "lingbot_va: the policy's cache does not hold the first chunk's layout"
            )
        for name, pool in (("keys", cache["k"]), ("values", cache["v"])):
            index = 0 if name == "keys" else 1
            expected = torch.cat(
                [written["video_cache"][index][layer], written["action_cache"][index][layer]], 1
            )
            if not torch.equal(pool[:, :valid], expected):
                raise SubstitutionMismatch(
                    f"lingbot_va: layer {layer}'s cached {name} differ from the cache passes'"
                )


def trace_lingbot_va_with(
    *,
    seed: int,
    checkpoint: Path | None,
    overrides: Mapping[str, Any] | None = None,
    features: Features = LINGBOT_VA.features,
    vae_configs: Mapping[str, dict[str, Any]] = wan2_2.VAE_CONFIGS,
    text_encoder_configs: Mapping[str, dict[str, Any]] = wan2_2.TEXT_ENCODER_CONFIGS,
) -> TracedPolicy:
    """The adapter, with ``LingBotVAConfig`` overrides, features and frozen-component configs (the tests'
    small configs use the same code path)."""
    from lerobot.policies.lingbot_va import utils

    rope = utils.WanRotaryPosEmbed
    with _wan.host_tables_on_real_tensors(rope, "_precompute_freqs_base"):
        policy: Any = LINGBOT_VA.build(
            seed=seed, checkpoint=checkpoint, overrides=overrides, features=features
        )
    config = policy.config
    # The constructor casts the transformer to ``dtype`` (bf16): every tensor of it, as build_policy's
    # fp32 cast found it.
    policy.transformer.to(policy.dtype)
    known(vae_configs, config.wan_pretrained_path, "VAE config")  # before any frozen component is built
    with offline_lingbot_va(vae_configs, text_encoder_configs):
        policy._ensure_frozen_modules()
    if not policy._use_cfg:
        raise NotImplementedError("lingbot_va is traced with classifier-free guidance (guidance_scale > 1)")
    if config.camera_layout != "width_concat" or tuple(config.obs_cam_keys) != CAMERAS:
        raise NotImplementedError(f"lingbot_va is traced with the LIBERO cameras {CAMERAS} side by side")
    layout = layout_of(policy)
    tokenizer = policy._frozen["tokenizer"]

    def tokenized(text: str) -> tuple[torch.Tensor, torch.Tensor]:
        encoded = tokenizer(
            [utils.clean_prompt(text)],
            padding="max_length",
            max_length=config.max_sequence_length,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        return encoded.input_ids, encoded.attention_mask

    prompt_ids, prompt_mask = tokenized(TASK)
    negative_ids, negative_mask = tokenized("")

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        frame: dict[str, torch.Tensor] = example_observation(config.input_features, index, seed=seed)
        frame.update(
            prompt_ids=prompt_ids.clone(),
            prompt_mask=prompt_mask.clone(),
            negative_ids=negative_ids.clone(),
            negative_mask=negative_mask.clone(),
        )
        for name, shape in (("noise_latents", layout.latent_shape), ("noise_actions", layout.action_shape)):
            frame[name] = standard_normal(shape, seed=seed, index=index, name=name).to(policy.dtype)
        return frame

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch: dict[str, Any] = {key: frame[key] for key in CAMERAS}
        batch["task"] = TASK
        return predicted_chunk(policy, batch, draws=[frame["noise_latents"], frame["noise_actions"]])

    frame0 = make_frame(0)
    along = Along(
        [
            Program("text_encoder", _TextEncoder(policy)),
            Program("encode_frame", _EncodeFrame(policy)),
            Program("video_step", _VideoPass(policy, layout, write=False)),
            Program("video_cache", _VideoPass(policy, layout, write=True)),
            Program("action_step", _ActionPass(policy, layout, write=False)),
            Program("action_cache", _ActionPass(policy, layout, write=True)),
        ],
        first_chunk_plan(layout),
        frame=frame0,
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            chunk="the first chunk of an episode (empty key/value cache, prompt encoded)",
            frozen_components=f"{config.wan_pretrained_path} vae/ and text_encoder/ (published configs, "
            f"random weights), tokenizer/ stand-in (vocabulary {wan2_2.UMT5_TOKENIZER.vocab_size})",
            latent_shape=list(layout.latent_shape),
            action_shape=list(layout.action_shape),
        ),
    )
    traced = LINGBOT_VA.trace(policy, along, seed=seed, checkpoint=checkpoint)
    if not is_fake(policy.transformer.proj_out.weight):  # fake weights hold no values: checked with real ones
        check_static_chunk(policy, traced, frame0)
    return traced


LINGBOT_VA.register(trace_lingbot_va_with)
