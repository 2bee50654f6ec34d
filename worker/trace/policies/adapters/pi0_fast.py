"""pi0_fast (openpi's autoregressive FAST VLA on PaliGemma): a ``prefix`` program (SigLIP + Gemma 2B over
the images and the prompt, once per chunk) and a ``decode_step`` program (Gemma 2B over one action token,
reading and extending a fixed-size key/value cache) run ``max_decoding_steps - 1`` (255) times.

``PI0FastPolicy`` builds PaliGemma without the hub, as pi0 does (transformers' ``CONFIG_MAPPING
["paligemma"]`` with openpi's gemma_2b sizes, fp32, random weights from the seed): ~2.9 B parameters,
~11.7 GB of real fp32 weights. Its constructor loads two tokenizers from the hub, the FAST action
processor and PaliGemma's tokenizer; offline they are ``worker.trace.policies.offline.fast_tokenizer``'s
stand-ins (the FAST processor's DCT and quantisation with a merge-free BPE of the same vocabulary size,
and PaliGemma's vocabulary with stand-in ids for ``Action``, ``:`` and the end-of-action marker ``|``).
The prompt is the policy's preprocessor's, ``"Task: <task>, State: <256-bin state>;\\n"`` (written by
its own ``Pi0FastPrepareStateAndLanguageTokenizerProcessorStep`` from the frame's state, without dataset
statistics), tokenized by the PaliGemma stand-in (``paligemma.TOKENIZER``) and right-padded to
``tokenizer_max_length`` (200); the model reads the state only there, so it is no program input.
Features are openpi's base layout: three 3×224×224 cameras, a 32-dim state, 32-dim actions.

One chunk is ``PI0FastPytorch.sample_actions_fast_kv_cache`` (what ``predict_action_chunk`` runs with
the default ``use_kv_cache=True`` and greedy ``temperature=0``): the prefill over images, prompt and a
BOS token picks the first action token, then each step embeds the previous token, runs the language
model over it with the cache, and picks the next token (argmax of the tied LM head). The programs
return the greedy token, not the 257,152 logits. The plan's output ``action_tokens`` is the loop's
``[1, max_decoding_steps]`` token tensor; ``detokenize_actions`` (strings, the FAST BPE and scipy's
inverse DCT) turns it into actions on the host, outside any program, as ``predict_action_chunk`` does.

Runs per chunk: ``decode_step`` runs ``max_decoding_steps - 1`` times (the loop's configured maximum,
recorded as ``decode_steps``). Greedy decoding stops early once the end-of-action marker ``|`` is
picked; with random weights it is not (one id of 257,152; the tests check that the policy's own loop
runs to its maximum on the small config's example frames), so the maximum is what the policy runs. A
plan is a fixed sequence of calls, so it always runs the maximum; steps after the marker write 0,
which is what the stopped loop leaves there.

Static variants. ``torch.export`` cannot trace the loop as written (a cache that grows by one position
per step, a mask and position ids that grow with it, and ``bool(finished.all())`` to stop); the
programs compute the same values with static shapes:

* The cache has a fixed length ``prefix_length + max_decoding_steps - 1`` (the prefix, BOS included,
  plus one position per fed-back token). The prefix program pads its keys and values with zeros and
  returns the validity mask of the positions (its padding mask, then False). Step ``t`` (1 …
  ``max_decoding_steps - 1``, a plan constant) writes its token's keys and values at position
  ``prefix_length + t - 1`` (``torch.where`` on that one position instead of ``DynamicCache``'s
  concatenation), marks it valid, and attends over the whole cache with the additive mask
  ``prepare_attention_masks_4d`` makes of the validity mask: positions not yet written are masked as
  the prefix's padding is, so they get zero weight. The position id is the count of valid positions
  minus one, as the loop computes it from its growing padding mask.
* The early stop: a step writes 0 instead of its token once an earlier token is ``|`` (batch 1: the
  loop's ``finished.all()``); the loop's zero-filled tail.
* The prefill is the loop's own call (``past_key_values=None, use_cache=True``); the ``DynamicCache``
  it returns is stacked into the fixed-size cache.
* Feedback between calls: the cache, the validity mask, the token tensor so far and the last token are
  each step's inputs and outputs, under the same names from call to call (at full size a cache copy is
  ~45 MB, one per call would be 11 GB).

The static programs are checked equal to the original through ``eager_chunk``: the policy's own
``sample_actions_fast_kv_cache`` on the frame, called as ``predict_action_chunk`` calls it (the trace
stage's plan-versus-policy check; the tests require equal tokens, also with an early stop, and that
``detokenize_actions`` of the plan's tokens equals ``predict_action_chunk`` and ``select_action``).
With random weights and the default ``validate_action_token_prefix=True``, ``detokenize_actions``
rejects every chunk (the tokens do not start with ``Action:``), so the reference is the token tensor.
Sampling (``temperature > 0``), decoding without the cache (``use_kv_cache=False``) and real-time
chunking are not traced.

Building with fake weights (``weights: fake``) goes through ``worker.trace.fake_weights.building_fake``, which
also lets SigLIP's truncated-normal initialisation run on fake tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from lerobot.configs import FeatureType
from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS, OBS_STATE

from worker.trace.fake_weights import real_tensors
from worker.trace.policies.adapters._along_plan import Program
from worker.trace.policies.adapters._flow import stacked_cache
from worker.trace.policies.adapters._skeleton import TASK, Along, Declared
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy
from worker.trace.policies.observation import example_observation
from worker.trace.policies.offline import fast_tokenizer, paligemma
from worker.trace.policies.offline.hub import redirected

CACHE = ("cache_keys", "cache_values", "cache_valid")
PREFIX_OUTPUTS = (*CACHE, "tokens", "token")
STEP_OUTPUTS = PREFIX_OUTPUTS

SUBSTITUTION = (
    "sample_actions_fast_kv_cache's growing DynamicCache, padding mask and position ids -> a fixed-size "
    "cache (prefix + max_decoding_steps - 1 positions, zero-padded) written at position prefix + t - 1 "
    "with torch.where, a validity mask of the written positions for the additive attention mask, and "
    "position ids counted from it; the early stop at '|' (bool(finished.all())) -> "
    "every step runs and writes 0 once an earlier token is '|' (checked equal to the policy's own loop "
    "on the example frame)"
)
PI0_FAST = Declared(
    "pi0_fast",
    {
        "observation.images.base_0_rgb": (FeatureType.VISUAL, (3, 224, 224)),
        "observation.images.left_wrist_0_rgb": (FeatureType.VISUAL, (3, 224, 224)),
        "observation.images.right_wrist_0_rgb": (FeatureType.VISUAL, (3, 224, 224)),
        "observation.state": (FeatureType.STATE, (32,)),
        "action": (FeatureType.ACTION, (32,)),
    },
    substitutions=[SUBSTITUTION],
)


@contextlib.contextmanager
def offline_pi0_fast() -> Iterator[None]:
    """Build pi0_fast with the stand-in tokenizers instead of the hub.

    Upstream behaviour worked around: ``PI0FastPolicy.__init__`` calls ``AutoProcessor.from_pretrained(
    action_tokenizer_name, trust_remote_code=True)`` and ``AutoTokenizer.from_pretrained(
    text_tokenizer_name)`` (the hub), and raises if either fails.
    """
    from lerobot.policies.pi0_fast import modeling_pi0_fast

    with redirected(
        modeling_pi0_fast,
        {
            "AutoProcessor": fast_tokenizer.fast_processor,
            "AutoTokenizer": fast_tokenizer.paligemma_tokenizer,
        },
    ):
        yield


def _lm_in_bf16(model: Any) -> bool:
    """The loop's own test for casting the embeddings (``dtype="bfloat16"``)."""
    layer = model.paligemma_with_expert.paligemma.model.language_model.layers[0]
    return bool(layer.self_attn.q_proj.weight.dtype == torch.bfloat16)


def _greedy(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The loop's ``temperature == 0`` pick: argmax of the LM head at the last position, ``[B, 1]``."""
    logits = model.paligemma_with_expert.paligemma.lm_head(hidden[:, -1:, :])
    return torch.argmax(logits[:, -1], dim=-1, keepdim=True)


class _Prefix(torch.nn.Module):
    """Frame inputs -> (cache keys, values and validity, padded to ``cache_length``; the token tensor with
    the first token; the first token)."""

    def __init__(self, policy: Any, names: tuple[str, ...], cache_length: int, steps: int) -> None:
        super().__init__()
        self.policy = policy
        self.names = names
        self.cache_length = cache_length
        self.steps = steps

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from lerobot.policies.common.vla_utils import prepare_attention_masks_4d

        batch = dict(zip(self.names, args, strict=True))
        policy, model = self.policy, self.policy.model
        images, img_masks = policy._preprocess_images(batch)
        tokens, masks = batch[OBS_LANGUAGE_TOKENS], batch[OBS_LANGUAGE_ATTENTION_MASK]
        bsize = tokens.shape[0]
        bos = torch.full((bsize, 1), model._paligemma_tokenizer.bos_token_id, dtype=torch.long)
        tokens_in = torch.cat([tokens, bos], dim=1)
        masks_in = torch.cat([masks, torch.ones((bsize, 1), dtype=torch.bool)], dim=1)
        embs, pad_masks, att_masks, _, _ = model.embed_prefix_fast(
            images, img_masks, tokens_in, masks_in, fast_action_tokens=None, fast_action_masks=None
        )
        if _lm_in_bf16(model):
            embs = embs.to(dtype=torch.bfloat16)
        (out, _), cache = model.paligemma_with_expert.forward(
            attention_mask=prepare_attention_masks_4d(att_masks, dtype=embs.dtype),
            position_ids=torch.cumsum(pad_masks, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embs, None],
            use_cache=True,
            adarms_cond=[None, None],
        )
        first = _greedy(model, out)
        keys, values = stacked_cache(cache)
        free = self.cache_length - keys.shape[3]
        padding = torch.zeros((*keys.shape[:3], free, keys.shape[4]), dtype=keys.dtype)
        valid = torch.cat([pad_masks, torch.zeros((bsize, free), dtype=torch.bool)], dim=1)
        generated = torch.cat([first, torch.zeros((bsize, self.steps), dtype=torch.long)], dim=1)
        return (
            torch.cat([keys, padding], dim=3),
            torch.cat([values, padding.to(values.dtype)], dim=3),
            valid,
            generated,
            first,
        )


class _SlotCache:
    """The cache interface the language model calls (``update``), over fixed-size stacked tensors: a
    layer's new keys and values go to the positions ``write`` marks, and attention reads all of them."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, write: torch.Tensor) -> None:
        self.keys = list(keys.unbind(0))
        self.values = list(values.unbind(0))
        self.write = write[:, None]  # [length, 1]: broadcast over batch, heads and head_dim

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx] = torch.where(self.write, key_states, self.keys[layer_idx])
        self.values[layer_idx] = torch.where(self.write, value_states, self.values[layer_idx])
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.keys[layer_idx].shape[-2])

    def stacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack(self.keys), torch.stack(self.values)


class _DecodeStep(torch.nn.Module):
    """One iteration of the decoding loop: ``(cache keys, values, validity, tokens, token, t)`` to the
    same with the token fed at position ``prefix_length + t - 1`` and the next token at index ``t``."""

    def __init__(self, policy: Any, prefix_length: int, end_of_action: int) -> None:
        super().__init__()
        self.policy = policy
        self.prefix_length = prefix_length
        self.end_of_action = end_of_action

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from lerobot.policies.common.vla_utils import prepare_attention_masks_4d

        keys, values, valid, generated, token, t = args
        model = self.policy.model
        slot = self.prefix_length + t - 1
        write = torch.arange(keys.shape[3]) == slot
        valid = valid | write[None, :]
        emb = model.paligemma_with_expert.embed_language_tokens(token)
        if _lm_in_bf16(model):
            emb = emb.to(dtype=torch.bfloat16)
        cache = _SlotCache(keys, values, write)
        (out, _), _ = model.paligemma_with_expert.forward(
            attention_mask=prepare_attention_masks_4d(valid.unsqueeze(1), dtype=emb.dtype),
            position_ids=(torch.sum(valid, dim=1, keepdim=True) - 1).long(),
            past_key_values=cache,
            inputs_embeds=[emb, None],
            use_cache=True,
            adarms_cond=[None, None],
        )
        next_token = _greedy(model, out)
        index = torch.arange(generated.shape[1])
        finished = ((generated == self.end_of_action) & (index < t)).any(dim=1, keepdim=True)
        written = torch.where(finished, torch.zeros_like(next_token), next_token)
        generated = torch.where(index == t, written, generated)
        keys, values = cache.stacked()
        return keys, values, valid, generated, next_token


def decode_plan(frame_inputs: tuple[str, ...], steps: int) -> ChunkPlan:
    """The prefix once, then ``decode_step`` for t = 1 … ``steps`` (constants ``t.001`` …), each reading
    and rewriting the cache, the token tensor and the last token; the last call writes ``action_tokens``."""

    def outputs(final: bool) -> tuple[str, ...]:
        return (*CACHE, "action_tokens" if final else "tokens", "token")

    calls = [Call("prefix", frame_inputs, outputs(steps == 0))]
    for k in range(steps):
        calls.append(
            Call("decode_step", (*CACHE, "tokens", "token", f"t.{k + 1:03d}"), outputs(k == steps - 1))
        )
    return ChunkPlan(
        frame_inputs=frame_inputs,
        calls=tuple(calls),
        outputs=("action_tokens",),
        constants={f"t.{k + 1:03d}": torch.tensor([k + 1], dtype=torch.long) for k in range(steps)},
    )


def prompt(state: torch.Tensor, max_state_dim: int) -> str:
    """The preprocessor's prompt for ``state``, by its own ``Pi0FastPrepareStateAndLanguageTokenizer
    ProcessorStep``."""
    from lerobot.lerobot_types import TransitionKey
    from lerobot.policies.pi0_fast.processor_pi0_fast import (
        Pi0FastPrepareStateAndLanguageTokenizerProcessorStep,
    )

    step = Pi0FastPrepareStateAndLanguageTokenizerProcessorStep(max_state_dim=max_state_dim)
    transition: Any = {
        TransitionKey.OBSERVATION: {OBS_STATE: state},
        TransitionKey.COMPLEMENTARY_DATA: {"task": [TASK]},
    }
    text: str = step(transition)[TransitionKey.COMPLEMENTARY_DATA]["task"][0]
    return text


def trace_pi0_fast_with(
    *, seed: int, checkpoint: Path | None, overrides: Mapping[str, Any] | None = None
) -> TracedPolicy:
    """The adapter, with config ``overrides`` (the tests' small configs use the same code path)."""
    policy: Any = PI0_FAST.build(
        seed=seed, checkpoint=checkpoint, overrides=overrides, offline=offline_pi0_fast()
    )
    config = policy.config
    if config.rtc_config is not None and config.rtc_config.enabled:
        raise NotImplementedError("pi0_fast with real-time chunking (rtc_config) is not traced")
    if not config.use_kv_cache:
        raise NotImplementedError(
            "pi0_fast is traced with its default key/value cache (use_kv_cache=True) only"
        )
    if config.temperature != 0:
        raise NotImplementedError("pi0_fast is traced with its default greedy decoding (temperature=0) only")
    model = policy.model
    tokenizer = model._paligemma_tokenizer
    max_steps = int(config.max_decoding_steps)
    if max_steps < 1:
        raise ValueError(f"pi0_fast: max_decoding_steps {max_steps} decodes nothing")

    def make_observation(index: int) -> dict[str, torch.Tensor]:
        with real_tensors():
            frame = example_observation(config.input_features, index, seed=seed)
            text = prompt(frame.pop(OBS_STATE), config.max_state_dim)
            tokens, mask = paligemma.TOKENIZER(text, config.tokenizer_max_length)
        frame[OBS_LANGUAGE_TOKENS] = tokens
        frame[OBS_LANGUAGE_ATTENTION_MASK] = mask
        return frame

    frame0 = make_observation(0)
    names = tuple(frame0)
    images = len(config.image_features)
    vision = model.paligemma_with_expert.paligemma.config.vision_config
    image_tokens = (vision.image_size // vision.patch_size) ** 2
    prefix_length = images * image_tokens + config.tokenizer_max_length + 1  # + BOS
    cache_length = prefix_length + max_steps - 1
    end_of_action = int(tokenizer.convert_tokens_to_ids(fast_tokenizer.END_OF_ACTION))

    def check_cache(state: tuple[torch.Tensor, ...]) -> None:
        if state[0].shape[3] != cache_length:
            raise ValueError(f"pi0_fast: the prefix caches {state[0].shape[3]} positions, not {cache_length}")

    def eager_chunk(frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch = {key: frame[key] for key in names}
        policy.reset()
        with torch.no_grad():
            return {"action_tokens": policy_tokens(policy, batch)}

    along = Along(
        [
            Program(
                "prefix",
                _Prefix(policy, names, cache_length, max_steps - 1),
                output_names=PREFIX_OUTPUTS,
                outputs_from="exported",
                check=check_cache,
            ),
            Program(
                "decode_step",
                _DecodeStep(policy, prefix_length, end_of_action),
                (*CACHE, "tokens", "token", "t"),
                STEP_OUTPUTS,
            ),
        ],
        decode_plan(names, max_steps - 1),
        frame=frame0,
        make_frame=make_observation,
        eager_chunk=eager_chunk,
        notes=lambda: dict(
            tokenizer=f"stand-in ({paligemma.PALIGEMMA_3B}: vocabulary {paligemma.PALIGEMMA_VOCAB}, "
            "right padding; stand-in ids for 'Action', ':' and '|')",
            action_tokenizer=f"stand-in ({fast_tokenizer.FAST_ACTION_TOKENIZER}: FAST+ DCT and quantisation "
            f"{fast_tokenizer.FAST_PROCESSOR}, merge-free BPE of the same vocabulary size)",
            decode_steps=max_steps - 1,
            prefix_length=prefix_length,
            cache_length=cache_length,
            end_of_action_id=end_of_action,
        ),
    )
    return PI0_FAST.trace(policy, along, seed=seed, checkpoint=checkpoint)


def policy_tokens(policy: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The action tokens ``predict_action_chunk`` decodes for ``batch``: its own preprocessing and its
    call of ``sample_actions_fast_kv_cache``, before ``detokenize_actions``."""
    config = policy.config
    images, img_masks = policy._preprocess_images(dict(batch))
    tokens: torch.Tensor = policy.model.sample_actions_fast_kv_cache(
        images,
        img_masks,
        batch[OBS_LANGUAGE_TOKENS],
        batch[OBS_LANGUAGE_ATTENTION_MASK],
        max_decoding_steps=config.max_decoding_steps,
        temperature=config.temperature,
    )
    return tokens


PI0_FAST.register(trace_pi0_fast_with)
