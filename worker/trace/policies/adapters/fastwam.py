"""FastWAM (a Wan2.2-TI2V-5B video DiT and an action DiT, mixed layer by layer): a ``prefix`` program (the
UMT5-XXL text encoder over the prompt, the Wan2.2 VAE over the first frame and the video expert's prefill
of its key/value cache, once) and a ``denoise_step`` program (the action expert over the action latents,
reading that cache, and the flow-matching scheduler's update) run ``num_inference_steps`` (10) times.

``FastWAMPolicy`` builds both DiTs from its config (``default_video_dit_config``: 30 layers of 3072, ~5.0 B
parameters; ``default_action_dit_config``: 30 layers of 1024, ~1.0 B), casting them to ``torch_dtype``
(bf16), and loads the frozen Wan2.2 VAE and UMT5-XXL encoder (~5.7 B) from
``Wan-AI/Wan2.2-TI2V-5B-Diffusers`` and the tokenizer from ``google/umt5-xxl``; offline the adapter
builds those from their published configs (``worker.trace.policies.offline.wan2_2``) with random weights from
the seed. ``base_model_id`` is unset: it names ``lerobot/fastwam_base``'s partial weights, which a
random-weight build does not load. The policy's dtypes stay: ``build_policy``'s fp32 cast is undone,
tensor by tensor, back to the dtypes the constructor gave (everything bf16 but the VAE's latent
statistics). At full size the weights (~12.4 B parameters: the video DiT 5.0 B, the action DiT 1.0 B,
UMT5-XXL 5.7 B, the VAE 0.7 B; ~25 GB in bf16, the DiTs built in fp32 first) do not fit a 24 GB worker:
the engine traces it with fake weights.

The frame: LIBERO's layout (FastWAM's released ``fastwam_libero_uncond_2cam224``), two 3×224×224
cameras (concatenated on width by the policy into its 224×448 ``image_size``), an 8-dim state (the
proprio token appended to the text context), 7-dim actions, 32 per chunk; the prompt (the policy's
``prompt_template`` around the task) tokenized on the host by the policy's own tokenizer call
(``encode_prompt``'s ``self.tokenizer(prompt, return_mask=True, add_special_tokens=True)``: the UMT5
stand-in, right-padded to ``tokenizer_max_len`` 128) as ``input_ids`` and ``attention_mask``; and the
initial action noise (``_make_action_latents``' one ``torch.randn``, cast to bf16), which ``eager_chunk``
hands to the policy's own ``predict_action_chunk`` by replaying that draw. The first frame's latents are
1×14×28, so the video expert's cache holds 7×14 = 98 tokens per layer.

One step is one iteration of ``FastWAM.infer_action``'s loop: ``_predict_action_noise_with_cache`` (the
action expert's ``pre_dit``, its 30 blocks attending to themselves and to the cached video keys and values
under the MoT mask, ``post_dit``) and ``WanContinuousFlowMatchScheduler.step``; the scheduler's shifted
times ``t.kk`` and step sizes ``dt.kk`` (``build_inference_schedule``, computed by the policy's own code)
are plan constants. The step also returns the chunk ``predict_action_chunk`` returns, the latents in fp32.

Static variants (``torch.export`` cannot trace the originals, or ``to_edge`` rejects what they trace to):
the policy's own ``predict_action_chunk`` runs the original code; the static prefix is checked equal to
the original on the example frame (``check_static_prefix``), and the tests compare the plan with
``predict_action_chunk``:

* ``encode_prompt`` zeroes each prompt's padding with ``prompt_emb[i, v:] = 0``, a slice bounded by a
  tensor; the program zeroes the positions from ``v`` on with ``torch.where``.
* Wan's ``rope_apply`` loops over ``grid_sizes.tolist()`` (the video token grid, fixed by the image size)
  and both ``rope_apply`` and the action expert's ``apply_dense_rope`` rotate as complex numbers
  (``view_as_complex`` is not Core ATen, and ExecuTorch has no complex dtype). The tables are built once
  on the host from the experts' own ``freqs`` (the grid's as ``rope_apply`` builds it) as their real and
  imaginary parts, and the rotation is the same complex product in float64 real arithmetic (bit for bit).
* Wan's video ``pre_dit`` computes its time embedding under ``torch.amp.autocast("cuda",
  dtype=torch.float32)``: on CUDA that casts the fp32 sinusoidal embedding and the bf16 linears to fp32;
  on CPU it is disabled and ``F.linear(fp32, bf16)`` raises, so the bf16 policy does not run at all.
  Both the programs and ``eager_chunk`` run with that region's linears computed in fp32
  (``_wan.cuda_fp32_autocast_on_cpu``), as on CUDA.

The frozen VAE and text encoder are held unregistered by ``FastWAM``; the ``prefix`` program registers
them, so their weights are its parameters (not constants). Building with fake weights (``weights:
fake``, ``worker.trace.fake_weights.building_fake``): the constructors' host tables (the flow-matching
scheduler's training-weight statistics, read with ``.item()``, and the rotary tables) are computed on
real tensors (``_wan.host_tables_on_real_tensors``), and the video expert's rotary table, which its
constructor concatenates under the fake mode, is replaced by the same table built on the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_STATE

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters import _wan
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import (
    Features,
    prefix_then_steps_plan,
    recorded_dtypes,
    restore_dtypes,
)
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.observation import example_observation, standard_normal
from worker.trace.policies.offline import wan2_2
from worker.trace.policies.offline.hub import redirected

CAMERAS = ("observation.images.image", "observation.images.image2")

PROGRAM_INPUTS = ("input_ids", "attention_mask", *CAMERAS, OBS_STATE)
PREFIX_OUTPUTS = ("context", "context_mask", "video_keys", "video_values")

SUBSTITUTIONS = [
    "encode_prompt: the prompt tokenized on the host by the policy's own tokenizer call (ids and mask frame "
    "inputs), and its per-row loop prompt_emb[i, v:] = 0 (a slice bounded by a tensor) -> torch.where("
    "arange(L) < seq_len, prompt_emb, 0) (checked equal to the original prefix on the example frame)",
    "Wan rotary embeddings: rope_apply's loop over grid_sizes.tolist() -> the token grid's table built once "
    "on the host from the video expert's freqs; rope_apply's and apply_dense_rope's complex products "
    "(view_as_complex, not Core ATen) -> the same products in float64 real arithmetic over the tables' real "
    "and imaginary parts (checked equal, bit for bit, to the original prefix on the example frame)",
    "torch.amp.autocast('cuda', dtype=float32) around Wan's time embedding (disabled on CPU, where "
    "F.linear(fp32 embedding, bf16 weight) raises) -> that region's linears computed in fp32 as CUDA "
    "autocast computes them, in the programs and in the policy's own predict_action_chunk alike",
]
FASTWAM = Declared(
    "fastwam",
    {
        CAMERAS[0]: (FeatureType.VISUAL, (3, 224, 224)),
        CAMERAS[1]: (FeatureType.VISUAL, (3, 224, 224)),
        OBS_STATE: (FeatureType.STATE, (8,)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=SUBSTITUTIONS,
)


@contextlib.contextmanager
def offline_fastwam(
    vae_configs: Mapping[str, dict[str, Any]] = wan2_2.VAE_CONFIGS,
    text_encoder_configs: Mapping[str, dict[str, Any]] = wan2_2.TEXT_ENCODER_CONFIGS,
) -> Iterator[None]:
    """Build FastWAM's frozen Wan2.2 components without the hub while the policy is constructed.

    Upstream behaviour worked around: ``FastWAMPolicy._build_core_model`` loads the VAE
    (``AutoencoderKLWan.from_pretrained(Wan-AI/Wan2.2-TI2V-5B-Diffusers, subfolder="vae")``), the UMT5-XXL
    encoder (``UMT5EncoderModel.from_pretrained(..., subfolder="text_encoder")``) and the tokenizer
    (``AutoTokenizer.from_pretrained("google/umt5-xxl")``) from the hub, with no config-only path.
    """
    from lerobot.policies.fastwam.wan import components, video_dit

    scheduler = video_dit.WanContinuousFlowMatchScheduler
    with (
        _wan.host_tables_on_real_tensors(scheduler, "_precompute_training_weight_stats"),
        _wan.host_tables_on_real_tensors(video_dit, "rope_params"),
        redirected(
            components,
            {
                "AutoencoderKLWan": _wan.vae_from(vae_configs),
                "UMT5EncoderModel": _wan.text_encoder_from(text_encoder_configs),
                "AutoTokenizer": _wan.tokenizer_from(wan2_2.TOKENIZERS),
            },
        ),
    ):
        yield


@contextlib.contextmanager
def recording_dtypes(dtypes: dict[str, dict[str, torch.dtype]]) -> Iterator[None]:
    """While the policy is constructed, record the dtypes its core model is built in (``torch_dtype``):
    the registered model's, the VAE's and the text encoder's (held unregistered)."""
    from lerobot.policies.fastwam.modeling_fastwam import FastWAMPolicy

    build = FastWAMPolicy._build_core_model

    def recorded(self: Any, config: Any) -> Any:
        model = build(self, config)
        dtypes["model"] = recorded_dtypes(model)
        dtypes["vae"] = recorded_dtypes(model.vae)
        if model.text_encoder is not None:
            dtypes["text_encoder"] = recorded_dtypes(model.text_encoder)
        return model

    with mock.patch.object(FastWAMPolicy, "_build_core_model", recorded):
        yield


class _Prefix(torch.nn.Module):
    """Frame inputs -> (context, context mask, stacked video keys, stacked video values): ``infer_action``
    up to the video expert's cache."""

    def __init__(self, policy: Any, rotary: Rotary) -> None:
        super().__init__()
        self.owner = policy
        # The frozen VAE and text encoder are not the policy's submodules (FastWAM holds them unregistered):
        # registered here, their weights are the program's parameters, not constants.
        self.vae = policy.model.vae
        self.text_encoder = policy.model.text_encoder
        self.rotary = rotary

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from lerobot.policies.fastwam.modeling_fastwam import _input_image_from_batch

        batch = dict(zip(PROGRAM_INPUTS, args, strict=True))
        policy, model = self.owner, self.owner.model
        input_image = _input_image_from_batch({key: batch[key] for key in CAMERAS}, policy.config)
        input_image, _, _ = model._normalize_infer_input_image(input_image)
        proprio = model._normalize_infer_proprio(batch[OBS_STATE])
        input_image = input_image.to(device=model.device, dtype=model.torch_dtype)
        first_frame_latents = model._encode_input_image_latents_tensor(input_image=input_image)
        context, context_mask = encoded_prompt(model, batch["input_ids"], batch["attention_mask"])
        context, context_mask = model._append_proprio_to_context(context, context_mask, proprio)
        with static_rotary(model, self.rotary), _wan.cuda_fp32_autocast_on_cpu():
            keys, values = video_cache(
                model, policy.config.action_horizon, first_frame_latents, context, context_mask
            )
        return context, context_mask, keys, values


@dataclass(frozen=True)
class Rotary:
    """The rotary tables FastWAM's blocks read, built once on the host: the video expert's for its token
    grid, the action expert's for the chunk's length."""

    grid: tuple[int, int, int]
    video: _wan.Rotation
    action: _wan.Rotation
    video_freqs: torch.Tensor  # the video expert's whole complex table
    action_freqs: torch.Tensor  # the complex table apply_dense_rope is given

    @staticmethod
    def of(model: Any, grid: tuple[int, int, int], action_len: int) -> Rotary:
        """The tables from the experts' own ``freqs``; the video one rebuilt on the host as
        ``WanModel.__init__`` builds it (under fake weights the constructor's is a fake tensor)."""
        from lerobot.policies.fastwam.wan.model import rope_params

        video_expert, action_expert = model.video_expert, model.action_expert
        head_dim = video_expert.dim // video_expert.num_heads
        video_freqs = _wan.wan_video_freqs(rope_params, head_dim)
        if not is_fake(video_expert.freqs) and not torch.equal(video_freqs, video_expert.freqs):
            raise SubstitutionMismatch("fastwam: the video expert's rotary table is not WanModel's")
        with real_tensors():
            action_freqs = action_expert.freqs[:action_len].view(action_len, 1, -1)
        return Rotary(
            grid,
            _wan.grid_rotation(video_freqs, grid, head_dim),
            _wan.Rotation.of(action_freqs),
            video_freqs,
            action_freqs,
        )


@contextlib.contextmanager
def static_rotary(model: Any, rotary: Rotary) -> Iterator[None]:
    """Inside the block the experts' blocks rotate queries and keys with ``rotary``'s tables in real
    arithmetic (``rope_apply`` for the video tokens, ``apply_dense_rope`` for the action tokens); with real
    values the tables are checked to be the ones the policy passes."""
    from lerobot.policies.fastwam.wan import video_dit

    grid = list(rotary.grid)
    video_rope = _wan.static_rope_apply(rotary.video, grid[0] * grid[1] * grid[2])
    action_rope = _wan.static_dense_rope(rotary.action)

    def checking() -> bool:
        return torch._guards.detect_fake_mode() is None and not is_fake(model.proprio_encoder.weight)

    def rope_apply(x: torch.Tensor, grid_sizes: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        table = model.video_expert.freqs
        if checking() and (grid_sizes.tolist() != [grid] * x.shape[0] or not torch.equal(freqs, table)):
            raise SubstitutionMismatch(f"fastwam: video rotary for grid {grid_sizes.tolist()}, not {grid}")
        return video_rope(x, grid_sizes, freqs)

    def apply_dense_rope(x: torch.Tensor, freqs: torch.Tensor, num_heads: int) -> torch.Tensor:
        if checking() and not torch.equal(freqs, rotary.action_freqs):
            raise SubstitutionMismatch("fastwam: the action rotary table is not the chunk's")
        return action_rope(x, freqs, num_heads)

    with (
        mock.patch.object(video_dit, "rope_apply", rope_apply),
        mock.patch.object(video_dit, "apply_dense_rope", apply_dense_rope),
    ):
        yield


def encoded_prompt(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``FastWAM.encode_prompt`` after the tokenizer, with its padding zeroed statically."""
    mask = mask.to(model.device, dtype=torch.bool)
    prompt_emb = model.text_encoder(ids.to(model.device), mask)
    seq_lens = mask.gt(0).sum(dim=1).long()
    prompt_emb = _wan.zeroed_after(prompt_emb, seq_lens)
    return prompt_emb.to(device=model.device), torch.ones_like(mask)


def video_cache(
    model: Any,
    action_horizon: int,
    first_frame_latents: torch.Tensor,
    context: torch.Tensor,
    context_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``infer_action``'s video prefill: the per-layer keys and values, stacked."""
    fuse_flag = bool(getattr(model.video_expert, "fuse_vae_embedding_in_latents", False))
    timestep_video = torch.zeros(
        (first_frame_latents.shape[0],), dtype=first_frame_latents.dtype, device=model.device
    )
    video_pre = model.video_expert.pre_dit(
        x=first_frame_latents,
        timestep=timestep_video,
        context=context,
        context_mask=context_mask,
        action=None,
        fuse_vae_embedding_in_latents=fuse_flag,
    )
    video_seq_len = int(video_pre["tokens"].shape[1])
    attention_mask = model._build_mot_attention_mask(
        video_seq_len=video_seq_len,
        action_seq_len=action_horizon,
        video_tokens_per_frame=int(video_pre["meta"]["tokens_per_frame"]),
        device=video_pre["tokens"].device,
    )
    cache = model.mot.prefill_video_cache(
        video_tokens=video_pre["tokens"],
        video_freqs=video_pre["freqs"],
        video_t_mod=video_pre["t_mod"],
        video_context_payload={"context": video_pre["context"], "mask": video_pre["context_mask"]},
        video_attention_mask=attention_mask[:video_seq_len, :video_seq_len],
    )
    return torch.stack([layer["k"] for layer in cache]), torch.stack([layer["v"] for layer in cache])


class _Step(torch.nn.Module):
    """``(context, context mask, video keys, video values, x, t, dt) -> (x + dt · v, chunk)``: one iteration
    of ``infer_action``'s loop (``_predict_action_noise_with_cache`` and the scheduler's ``step``) and the
    chunk ``predict_action_chunk`` returns (the latents in fp32)."""

    def __init__(self, policy: Any, rotary: Rotary) -> None:
        super().__init__()
        self.owner = policy  # registers the policy's parameters with the exported program
        self.rotary = rotary
        f, h, w = rotary.grid
        self.video_seq_len = f * h * w
        self.tokens_per_frame = h * w

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        context, context_mask, keys, values, x, t, dt = args
        model = self.owner.model
        attention_mask = model._build_mot_attention_mask(
            video_seq_len=self.video_seq_len,
            action_seq_len=x.shape[1],
            video_tokens_per_frame=self.tokens_per_frame,
            device=x.device,
        )
        cache = [{"k": keys[layer], "v": values[layer]} for layer in range(keys.shape[0])]
        with static_rotary(model, self.rotary):
            pred_action = model._predict_action_noise_with_cache(
                latents_action=x,
                timestep_action=t,
                context=context,
                context_mask=context_mask,
                video_kv_cache=cache,
                attention_mask=attention_mask,
                video_seq_len=self.video_seq_len,
            )
        x_next = model.infer_action_scheduler.step(pred_action, dt, x)
        return x_next, x_next.to(torch.float32)


def token_grid(policy: Any) -> tuple[int, int, int]:
    """The video expert's token grid for the first frame's latents: ``(1, H / 16 / ph, W / 16 / pw)``."""
    model, (height, width) = policy.model, policy.config.image_size
    _, patch_h, patch_w = (int(p) for p in model.video_expert.patch_size)
    factor = model.vae.upsampling_factor
    return 1, height // factor // patch_h, width // factor // patch_w


def check_static_prefix(
    policy: Any, frame: Mapping[str, torch.Tensor], prompt: str, static: tuple[torch.Tensor, ...]
) -> None:
    """The static prefix's outputs equal ``infer_action``'s own steps up to the video cache (the prompt
    through ``encode_prompt``, the tokenizer included, and Wan's own ``rope_apply``), or
    ``SubstitutionMismatch``."""
    from lerobot.policies.fastwam.modeling_fastwam import _input_image_from_batch

    model, config = policy.model, policy.config
    with torch.no_grad():
        input_image = _input_image_from_batch({key: frame[key] for key in CAMERAS}, config)
        input_image, _, _ = model._normalize_infer_input_image(input_image)
        proprio = model._normalize_infer_proprio(frame[OBS_STATE])
        input_image = input_image.to(device=model.device, dtype=model.torch_dtype)
        first_frame_latents = model._encode_input_image_latents_tensor(input_image=input_image)
        context, context_mask = model._prepare_infer_context(prompt, None, None, proprio)
        with _wan.cuda_fp32_autocast_on_cpu():
            keys, values = video_cache(
                model, config.action_horizon, first_frame_latents, context, context_mask
            )
    for name, expected, got in zip(
        PREFIX_OUTPUTS, (context, context_mask, keys, values), static, strict=True
    ):
        if not torch.equal(expected, got):
            raise SubstitutionMismatch(f"fastwam: the static prefix's {name} differs from the original's")


def trace_fastwam_with(
    *,
    seed: int,
    checkpoint: Path | None,
    overrides: Mapping[str, Any] | None = None,
    features: Features = FASTWAM.features,
    vae_configs: Mapping[str, dict[str, Any]] = wan2_2.VAE_CONFIGS,
    text_encoder_configs: Mapping[str, dict[str, Any]] = wan2_2.TEXT_ENCODER_CONFIGS,
) -> TracedPolicy:
    """The adapter, with ``FastWAMConfig`` overrides, features and frozen-component configs (the tests'
    small configs use the same code path)."""
    overrides = {"base_model_id": None, **dict(overrides or {})}
    dtypes: dict[str, dict[str, torch.dtype]] = {}
    with offline_fastwam(vae_configs, text_encoder_configs), recording_dtypes(dtypes):
        policy: Any = FASTWAM.build(seed=seed, checkpoint=checkpoint, overrides=overrides, features=features)
    config, model = policy.config, policy.model
    restore_dtypes(model, dtypes["model"])
    restore_dtypes(model.vae, dtypes["vae"])
    if model.text_encoder is None:
        raise ValueError("fastwam: tracing needs the text encoder (load_text_encoder=True)")
    restore_dtypes(model.text_encoder, dtypes["text_encoder"])

    prompt = config.prompt_template.format(task=TASK)
    # Frame tensors are made in the ambient mode: under fake weights they are fake too (no values are read
    # from them), so that torch.export traces inputs and weights in the same fake mode.
    input_ids, attention_mask = model.tokenizer(prompt, return_mask=True, add_special_tokens=True)
    times, deltas = model.infer_action_scheduler.build_inference_schedule(
        num_inference_steps=config.num_inference_steps,
        device=model.device,
        dtype=model.torch_dtype,
        shift_override=config.sigma_shift,
    )
    step_times = [t.unsqueeze(0).to(dtype=model.torch_dtype) for t in times]
    step_deltas = [d.clone() for d in deltas]
    noise_shape = (1, config.action_horizon, model.action_expert.action_dim)

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        frame: dict[str, torch.Tensor] = example_observation(config.input_features, index, seed=seed)
        frame["input_ids"], frame["attention_mask"] = input_ids.clone(), attention_mask.clone()
        noise = standard_normal(noise_shape, seed=seed, index=index, name="noise")
        frame["noise"] = noise.to(model.torch_dtype)
        return frame

    frame0 = make_frame(0)
    grid = token_grid(policy)
    rotary = Rotary.of(model, grid, config.action_horizon)
    # The video expert's table is a plain attribute, which torch.export holds as a constant of the program:
    # under fake weights the constructor built it as a fake tensor, which export refuses. It is the same
    # table (checked equal with real weights) built on the host.
    model.video_expert.freqs = rotary.video_freqs
    plan = prefix_then_steps_plan(
        Call("prefix", PROGRAM_INPUTS, PREFIX_OUTPUTS),
        PREFIX_OUTPUTS,
        first_sample="noise",
        sample="x",
        chunk="action",
        times=step_times,
        per_step={"dt": step_deltas},
    )
    fake = is_fake(model.proprio_encoder.weight)  # fake weights hold no values: checked with real ones

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch: dict[str, Any] = {key: frame[key] for key in (*CAMERAS, OBS_STATE)}
        batch["task"] = TASK
        return predicted_chunk(
            policy, batch, draws=[frame["noise"]], within=[_wan.cuda_fp32_autocast_on_cpu()]
        )

    along = Along(
        [
            Program(
                "prefix",
                _Prefix(policy, rotary),
                check=None if fake else lambda cache: check_static_prefix(policy, frame0, prompt, cache),
            ),
            Program(
                "denoise_step", _Step(policy, rotary), (*PREFIX_OUTPUTS, "x", "t", "dt"), ("x_next", "action")
            ),
        ],
        plan,
        frame=frame0,
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            vae=f"{wan2_2.WAN2_2_TI2V_5B_DIFFUSERS} vae (published config, random weights)",
            text_encoder=f"{config.text_encoder_model_id} text_encoder (published config, random weights)",
            tokenizer=f"stand-in ({config.tokenizer_model_id}: vocabulary "
            f"{wan2_2.UMT5_TOKENIZER.vocab_size})",
            video_token_grid=list(grid),
            model_dtype=str(model.torch_dtype),
        ),
    )
    return FASTWAM.trace(policy, along, seed=seed, checkpoint=checkpoint)


FASTWAM.register(trace_fastwam_with)
