"""EVO1: a ``prefix`` program (the InternVL3 embedder over the cameras and the prompt, the state encoder and
the initial actions, once) and a ``denoise_step`` program (the flow-matching action head, one Euler step)
run ``num_inference_timesteps`` (32) times.

``InternVL3Embedder.__init__`` loads OpenGVLab/InternVL3-1B-hf's tokenizer (``AutoTokenizer``) and weights
(``AutoModel.from_pretrained``) from the hub, also when the policy is loaded from a checkpoint (whose state
dict then replaces them). Offline the adapter builds the same model from the published config
(``worker.trace.policies.offline.internvl3``) with transformers' own ``AutoModel.from_config``, with random
weights from the seed, in the dtype the embedder asks for (``vlm_dtype``: bf16), and the tokenizer is a
stand-in of the checkpoint's vocabulary. The policy's defaults stay: the embedder keeps the first
``vlm_num_layers`` (14) of the 24 text layers, runs with eager attention (flash attention is unavailable
on CPU) and stays in bf16 (the fp32 cast of ``build_policy`` is undone, parameter by parameter); the
action head is fp32, and without CUDA nothing runs under autocast. InternVL3-1B without its LM head (the
embedder loads ``AutoModel``: ``InternVLModel``) is ~0.80 B parameters, 0.65 B after the truncation; with
the 0.12 B fp32 action head the programs hold 1.8 GB of weights.

Features are LIBERO's layout (EVO1's simulation benchmark): two cameras, an 8-dim state, 7-dim actions,
padded to ``max_state_dim`` / ``max_action_dim`` (24) by the policy; the third of ``max_views`` (3) views is
a zero image whose tokens are masked out of attention. The cameras are 3×448×448, the policy's
``image_resolution``: ``_batched_resize_01`` then leaves the quantised pixels at their size
(torchvision's ``resize`` returns an image already at the size), while a camera of another size is
resampled with ``aten._upsample_bicubic2d_aa``, which is not Core ATen (``to_edge`` rejects it).

The frame is the observation (cameras in [0, 1], the state), the prompt's ``input_ids`` and
``attention_mask`` and the initial noise. The prompt is what the embedder builds and tokenizes on the
host: ``_build_multimodal_prompts`` (``Image-k: <img>`` + ``image_seq_length`` ``<IMG_CONTEXT>`` +
``</img>`` per view, then the task) through the stand-in tokenizer; the program runs the rest of
``predict_action_chunk`` with the policy's own code: the image quantisation and ImageNet normalisation, the
zero third view, the attention mask over its image tokens (``_mask_absent_image_tokens``), InternVL3, the
state padding and encoder, the context and its key padding mask (``_prepare_context``), and the initial
actions ``(noise · 2 − 1) · action_mask``. The noise is ``get_action``'s one ``torch.rand`` draw (uniform,
``1 × chunk_size · max_action_dim``); ``eager_chunk`` hands it to the policy's own ``predict_action_chunk``
by replaying that draw.

One step is one iteration of ``FlowmatchingActionHead.get_action`` without real-time chunking:
``(context, key padding mask, x, t) -> (x + dv, chunk)`` with ``dv = velocity / steps`` (EVO1 integrates
from t = 0 to 1), the velocity its ``predict_velocity`` (the action encoder, the transformer blocks'
cross-attention over the context, the pooled MLP head, masked to the action dimensions) at the time
embedding ``time_pos_enc(1000)[:, t]``. The times ``t`` are the plan constants ``min(int(k / steps ·
999), 999)``, as ``get_action`` computes them; ``chunk`` is ``predict_action_chunk``'s view of the masked
actions (``1 × chunk_size × max_action_dim``, fp32; the postprocessor crops it to the action dimension).

Static variants (the ``prefix`` program only; ``torch.export`` cannot trace the originals). The policy's
own ``predict_action_chunk`` runs the original code; the static prefix is checked equal to the original
on the example frame (``check_static_prefix``), and the tests compare the plan with
``predict_action_chunk``:

* ``InternVLModel.get_placeholder_mask`` checks the image token count with
  ``inputs_embeds[mask].numel()`` (a boolean-mask index). The count (``max_views · image_seq_length``
  ``<IMG_CONTEXT>`` tokens) is checked on the host; the mask is the same comparison of the ids.
* The text model's rotary embedding uses dynamic NTK scaling: before each call, ``dynamic_rope_update``
  compares ``max(position_ids) + 1`` with its cached length (a data-dependent branch) to decide whether to
  recompute the frequencies. The prompt's length is fixed and checked on the host to be within the cached
  (original) length, where neither branch changes anything; the program calls the undecorated forward.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_STATE

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters._along_plan import Program, predicted_chunk
from worker.trace.policies.adapters._common import (
    field_default,
    prefix_then_steps_plan,
    recorded_dtypes,
    restore_dtypes,
)
from worker.trace.policies.adapters._qwen_vl import overridden
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.observation import example_observation, frame_generator
from worker.trace.policies.offline import internvl3
from worker.trace.policies.offline.hub import known

CAMERAS = ("observation.images.image", "observation.images.image2")

PROGRAM_INPUTS = (*CAMERAS, OBS_STATE, "input_ids", "attention_mask")
PREFIX_INPUTS = (*PROGRAM_INPUTS, "noise")
PREFIX_OUTPUTS = ("context_tokens", "context_padding_mask", "x.00")

SUBSTITUTION = (
    "InternVL3 embedder: InternVLModel.get_placeholder_mask's inputs_embeds[mask].numel() check -> "
    "checked on the host (max_views * image_seq_length <IMG_CONTEXT> tokens); the text model's "
    "dynamic_rope_update (a branch on max(position_ids) + 1 against the cached length) -> the undecorated "
    "rotary forward, the prompt's fixed length checked on the host to be within the cached length, where "
    "the update changes nothing (checked equal to the original prefix on the example frame)"
)
EVO1 = Declared(
    "evo1",
    {
        CAMERAS[0]: (FeatureType.VISUAL, (3, 448, 448)),
        CAMERAS[1]: (FeatureType.VISUAL, (3, 448, 448)),
        OBS_STATE: (FeatureType.STATE, (8,)),
        "action": (FeatureType.ACTION, (7,)),
    },
    substitutions=[SUBSTITUTION],
)


def default_vlm_model_name() -> str:
    """``Evo1Config.vlm_model_name``'s default (the embedder checkpoint the policy asks the hub for)."""
    from lerobot.policies.evo1.configuration_evo1 import Evo1Config

    return field_default(Evo1Config, "vlm_model_name")


def _offline_auto_model(dtypes: dict[str, torch.dtype]) -> Any:
    """A stand-in for ``AutoModel`` whose ``from_pretrained`` builds locally and records every parameter's
    and buffer's dtype in ``dtypes``."""
    from transformers import AutoModel, InternVLConfig

    class OfflineAutoModel:
        @staticmethod
        def from_pretrained(
            pretrained_model_name_or_path: str,
            *,
            torch_dtype: torch.dtype | None = None,
            attn_implementation: str | None = None,
            low_cpu_mem_usage: bool = False,
            **hub_kwargs: Any,
        ) -> Any:
            """``AutoModel.from_pretrained`` without the download: the architecture from the offline config,
            random weights (``from_config``) in the dtype the embedder asks for."""
            name = str(pretrained_model_name_or_path)
            config = InternVLConfig(**copy.deepcopy(known(internvl3.CONFIGS, name)))
            model = AutoModel.from_config(config, dtype=torch_dtype, attn_implementation=attn_implementation)
            dtypes.update(recorded_dtypes(model))
            return model

    return OfflineAutoModel


class _OfflineAutoTokenizer:
    """A stand-in for ``AutoTokenizer``: the offline tokenizer of the name."""

    @staticmethod
    def from_pretrained(pretrained_model_name_or_path: str, **hub_kwargs: Any) -> Any:
        return known(internvl3.TOKENIZERS, str(pretrained_model_name_or_path), "tokenizer")()


@contextlib.contextmanager
def offline_evo1(dtypes: dict[str, torch.dtype]) -> Iterator[None]:
    """Build EVO1's embedder without the hub while the policy is constructed.

    Upstream behaviour worked around: ``InternVL3Embedder.__init__`` calls
    ``AutoTokenizer.from_pretrained(model_name)`` and ``AutoModel.from_pretrained(model_name)`` (the whole
    checkpoint), with no config-only path, also when a policy checkpoint's state dict replaces the weights.
    """
    from lerobot.policies.evo1 import internvl3_embedder

    with (
        mock.patch.object(internvl3_embedder, "AutoModel", _offline_auto_model(dtypes)),
        mock.patch.object(internvl3_embedder, "AutoTokenizer", _OfflineAutoTokenizer),
    ):
        yield


@dataclass(frozen=True)
class Prompt:
    """What the embedder builds on the host for the frame: the prompt text and its length in tokens."""

    text: str
    length: int
    image_tokens: int


class _GivenTokens:
    """The embedder's tokenizer inside the program: the frame's ids for the prompt built on the host."""

    def __init__(self, prompt: Prompt, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        self.prompt = prompt
        self.tokens = {"input_ids": input_ids, "attention_mask": attention_mask}

    def __call__(self, prompts: Sequence[str], **kwargs: Any) -> Any:
        from transformers import BatchEncoding

        if list(prompts) != [self.prompt.text]:
            raise ValueError(f"evo1: the program built the prompt {list(prompts)!r}, not the frame's")
        return BatchEncoding(dict(self.tokens))


def static_rotary_forward(rotary: Any, length: int) -> Callable[..., Any]:
    """The rotary embedding's forward without ``dynamic_rope_update``, valid for sequences of ``length``
    tokens within its cached length (where the update changes nothing), or ``SubstitutionMismatch``."""
    forward = type(rotary).forward
    undecorated = inspect.unwrap(forward)  # under torch.no_grad and dynamic_rope_update
    if undecorated is forward:
        raise SubstitutionMismatch(
            "evo1: the rotary embedding's forward is not a dynamic_rope_update wrapper"
        )
    if not rotary.max_seq_len_cached <= rotary.original_max_seq_len or length > rotary.max_seq_len_cached:
        raise SubstitutionMismatch(
            f"evo1: a {length}-token prompt would change the dynamic RoPE cached at "
            f"{rotary.max_seq_len_cached} (original {rotary.original_max_seq_len})"
        )

    def static(x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None) -> Any:
        if position_ids.shape[-1] > length:
            raise SubstitutionMismatch(f"evo1: {position_ids.shape[-1]} positions, checked for {length}")
        return undecorated(rotary, x, position_ids)

    return static


@contextlib.contextmanager
def static_embedder(
    policy: Any, prompt: Prompt, input_ids: torch.Tensor, mask: torch.Tensor
) -> Iterator[None]:
    """Inside the block the embedder tokenizes to the given ids, and InternVL3 indexes no boolean mask and
    reads no position id to choose its rotary frequencies."""
    embedder = policy.model.embedder
    internvl = embedder.model
    image_token_id = internvl.config.image_token_id

    def placeholder_mask(
        input_ids: torch.Tensor, inputs_embeds: torch.Tensor, image_features: torch.Tensor
    ) -> torch.Tensor:
        return (input_ids == image_token_id).unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)

    overrides: dict[tuple[Any, str], Callable[..., Any]] = {
        (internvl, "get_placeholder_mask"): placeholder_mask
    }
    rotary = internvl.language_model.rotary_emb
    if "dynamic" in str(rotary.rope_type):
        overrides[(rotary, "forward")] = static_rotary_forward(rotary, prompt.length)
    with (
        mock.patch.object(embedder, "tokenizer", _GivenTokens(prompt, input_ids, mask)),
        overridden(overrides),
    ):
        yield


def _observation(policy: Any, args: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    batch: dict[str, Any] = {key: args[key] for key in (*CAMERAS, OBS_STATE)}
    batch[policy.config.task_field] = TASK
    return batch


def _context(policy: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``predict_action_chunk`` up to ``get_action``'s context: the fused tokens, the state encoder, the key
    padding mask; also the embodiment ids."""
    prompts = policy._normalize_task_batch(batch)
    image_batches, image_masks = policy._collect_image_batches(batch)
    states, _ = policy._prepare_state(batch)
    embodiment_ids = policy._get_embodiment_ids(batch, states.shape[0])
    fused_tokens, context_mask = policy._compute_fused_tokens(prompts, image_batches, image_masks)
    head = policy.model.action_head
    context, padding_mask, embodiment_ids = head._prepare_context(
        fused_tokens, states, embodiment_ids, context_mask
    )
    return context.to(dtype=head.dtype), padding_mask, embodiment_ids


def _action_mask(policy: Any) -> torch.Tensor:
    """``get_action``'s expanded action mask (batch 1), in the head's dtype."""
    head = policy.model.action_head
    mask = policy._prepare_inference_action_mask(1)
    expanded: torch.Tensor = head._expand_action_mask(
        mask, batch_size=1, per_action_dim=head.per_action_dim, device=mask.device, dtype=head.dtype
    )
    return expanded


class _Prefix(torch.nn.Module):
    """Frame inputs -> (context tokens, key padding mask, initial actions)."""

    def __init__(self, policy: Any, prompt: Prompt) -> None:
        super().__init__()
        self.owner = policy  # the step's name for the policy too: the programs share their weight names
        self.prompt = prompt

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        inputs = dict(zip(PREFIX_INPUTS, args, strict=True))
        policy, head = self.owner, self.owner.model.action_head
        with static_embedder(policy, self.prompt, inputs["input_ids"], inputs["attention_mask"]):
            context, padding_mask, _ = _context(policy, _observation(policy, inputs))
        if padding_mask is None:
            raise ValueError("evo1 is traced with the full fused token sequence (return_cls_only=False)")
        action = inputs["noise"].to(dtype=context.dtype) * 2 - 1
        x = action.view(1, head.horizon, head.per_action_dim) * _action_mask(policy)
        return context, padding_mask, x


class _Step(torch.nn.Module):
    """One iteration of ``get_action`` (no real-time chunking): ``(context, padding mask, x, t)`` to
    ``(x + v / steps, chunk)``, with ``v`` its ``predict_velocity``."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.owner = policy

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        context, padding_mask, x, t = args
        policy, head = self.owner, self.owner.model.action_head
        action_mask = _action_mask(policy)
        embodiment_id = policy._get_embodiment_ids({}, 1)
        time_emb = head.time_pos_enc(1000)[:, t, :].squeeze(0).to(dtype=head.dtype)
        # predict_velocity(x, time_emb)
        seq = x * action_mask
        tokens = head._project_actions(seq, embodiment_id).to(dtype=head.dtype)
        for block in head.transformer_blocks:
            tokens = block(tokens, context, time_emb, padding_mask)
        tokens = head.norm_out(tokens)
        pooled = head.seq_pool_proj(tokens.reshape(1, -1)) if head.horizon > 1 else tokens.squeeze(1)
        velocity = (
            head.mlp_head(pooled, embodiment_id).view(1, head.horizon, head.per_action_dim) * action_mask
        )
        x_next = x + (1.0 / head.num_inference_timesteps) * velocity
        chunk = (x_next * action_mask).reshape(1, -1)
        return x_next, chunk.view(1, policy.config.chunk_size, policy.config.max_action_dim).to(torch.float32)


def time_indices(steps: int) -> list[int]:
    """The rows of ``time_pos_enc`` that ``get_action`` reads at each step."""
    return [min(int(step / steps * 999), 999) for step in range(steps)]


def uniform_noise(shape: Sequence[int], *, seed: int, index: int) -> torch.Tensor:
    """Frame ``index``'s draw for ``get_action``'s ``torch.rand`` (uniform in [0, 1))."""
    return torch.rand(tuple(shape), generator=frame_generator(seed, index, "noise"), dtype=torch.float32)


def host_prompt(policy: Any, tokens: Mapping[str, torch.Tensor]) -> Prompt:
    """The prompt the embedder builds for one frame (batch 1) and what the static program relies on: the
    ``<IMG_CONTEXT>`` count ``get_placeholder_mask`` checks, and a length the dynamic RoPE keeps."""
    embedder = policy.model.embedder
    views = policy.config.max_views
    text = embedder._build_multimodal_prompts([[1] * views], [TASK])[0]
    input_ids = tokens["input_ids"]
    with real_tensors():
        image_tokens = int((input_ids == embedder.img_context_token_id).sum())
    expected = views * embedder.num_image_token
    if input_ids.shape[0] != 1 or image_tokens != expected:
        raise ValueError(
            f"evo1: {image_tokens} image tokens in the prompt, the vision tower gives {expected}"
        )
    return Prompt(text=text, length=int(input_ids.shape[1]), image_tokens=image_tokens)


def trace_evo1_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with ``Evo1Config`` overrides (the tests' small configs use the same code path)."""
    dtypes: dict[str, torch.dtype] = {}
    policy: Any = EVO1.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_evo1(dtypes)
    )
    config = policy.config
    if config.return_cls_only:
        raise NotImplementedError("evo1 is traced with the full fused token sequence (return_cls_only=False)")
    embedder = policy.model.embedder
    restore_dtypes(embedder.model, dtypes)
    head = policy.model.action_head
    steps = int(head.num_inference_timesteps)

    def tokenize() -> dict[str, torch.Tensor]:
        with real_tensors():
            text = embedder._build_multimodal_prompts([[1] * config.max_views], [TASK])
            encoded = embedder.tokenizer(
                text, return_tensors="pt", padding=True, truncation=True, max_length=embedder.max_text_length
            )
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    tokens = tokenize()
    prompt = host_prompt(policy, tokens)
    noise_shape = (1, head.action_dim)

    def make_frame(index: int) -> dict[str, torch.Tensor]:
        with real_tensors():
            observation = example_observation(config.input_features, index, seed=seed)
            frame = {key: observation[key] for key in (*CAMERAS, OBS_STATE)}
            frame.update(tokens)
            frame["noise"] = uniform_noise(noise_shape, seed=seed, index=index)
        return frame

    frame0 = make_frame(0)
    plan = prefix_then_steps_plan(
        Call("prefix", PREFIX_INPUTS, PREFIX_OUTPUTS),
        PREFIX_OUTPUTS[:2],
        first_sample=PREFIX_OUTPUTS[2],
        sample="x",
        chunk="action",
        times=[torch.tensor([index], dtype=torch.long) for index in time_indices(steps)],
        frame_inputs=PREFIX_INPUTS,  # the prefix reads the noise itself
    )
    # Fake weights hold no values to compare: the static prefix is checked with real ones.
    fake = is_fake(head.seq_pool_proj.weight)

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return predicted_chunk(policy, _observation(policy, frame), draws=[frame["noise"]])

    along = Along(
        [
            Program(
                "prefix",
                _Prefix(policy, prompt),
                check=None if fake else lambda context: check_static_prefix(policy, frame0, context),
            ),
            Program("denoise_step", _Step(policy), (*PREFIX_OUTPUTS[:2], "x", "t"), ("x_next", "action")),
        ],
        plan,
        frame=frame0,
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            tokenizer=f"stand-in ({config.vlm_model_name}: vocabulary {internvl3.WORDS.vocab_size}, "
            "InternVL's image tags)",
            prompt_tokens=prompt.length,
            image_tokens=prompt.image_tokens,
            embedder_dtype=str(embedder.model_dtype),
            embedder_text_layers=len(embedder.model.language_model.layers),
        ),
    )
    return EVO1.trace(policy, along, seed=seed, checkpoint=checkpoint)


def check_static_prefix(
    policy: Any, frame: Mapping[str, torch.Tensor], static: Sequence[torch.Tensor]
) -> None:
    """The static prefix's context and padding mask equal ``predict_action_chunk``'s own (its tokenizer,
    placeholder check and dynamic RoPE) on ``frame``, or ``SubstitutionMismatch``."""
    with torch.no_grad():
        context, padding_mask, _ = _context(policy, _observation(policy, frame))
    for name, expected, got in zip(PREFIX_OUTPUTS[:2], (context, padding_mask), static[:2], strict=True):
        if expected is None or not torch.equal(expected, got):
            raise SubstitutionMismatch(f"evo1: the static prefix's {name} differs from the original's")


EVO1.register(trace_evo1_with)
