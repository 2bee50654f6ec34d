"""Qwen2.5-VL-3B-Instruct (EO1's backbone): architecture config and a processor stand-in, as data and code.

``EO1Config.__post_init__`` asks the hub for the checkpoint's config (``Qwen2_5_VLConfig.from_pretrained``)
unless ``vlm_config`` is given, and the EO1 preprocessor loads its processor
(``Qwen2_5_VLProcessor.from_pretrained`` in ``EO1QwenProcessorStep``). ``QWEN2_5_VL_3B_CONFIG`` is the
checkpoint's ``config.json``; ``StandInQwen2_5_VLProcessor`` has the interface the EO1 step calls
(``tokenizer.add_tokens`` / ``convert_tokens_to_ids`` for EO1's seven special tokens, then
``apply_chat_template(..., tokenize=True, return_dict=True)``): transformers' own
``Qwen2VLImageProcessor`` with the checkpoint's image settings makes the pixel patches and grids, and the
text is tokenized by a stand-in with the Qwen2 vocabulary and special ids. Coverage depends on the ids'
count and range, not on which words they spell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from worker.trace.policies.offline.qwen_vl_prompt import (
    IMAGE_TOKEN,
    chat_template,
    prompt_ids,
    with_image_tokens,
)
from worker.trace.policies.offline.tokens import StandInTokenizer

QWEN2_5_VL_3B = "Qwen/Qwen2.5-VL-3B-Instruct"

# Qwen/Qwen2.5-VL-3B-Instruct, config.json (https://huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct): a
# Qwen2.5-3B-sized text model (36 layers, hidden 2048, 16 query / 2 key-value heads, tied embeddings) with
# multimodal RoPE over (temporal, height, width) sections [16, 24, 24] of the 64 rotary pairs of each
# 128-wide head, and the Qwen2.5-VL ViT (32 blocks of width 1280, 14-pixel patches, 2 frames per
# temporal patch, 2x2 patches merged per visual token; window attention over 112-pixel windows except
# the full-attention blocks 7, 15, 23 and 31), weights in bf16.
QWEN2_5_VL_3B_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 128000,
    "max_window_layers": 70,
    "num_attention_heads": 16,
    "num_hidden_layers": 36,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 151936,
}

CONFIGS: dict[str, dict[str, Any]] = {QWEN2_5_VL_3B: QWEN2_5_VL_3B_CONFIG}

# The checkpoint's preprocessor_config.json (Qwen2VLImageProcessor): 14-pixel patches, 2 frames per
# temporal patch, 2x2 patches merged per visual token, CLIP's mean and std, pixel budget [3136, 12845056]
# (EO1 passes its own image_min_pixels / image_max_pixels per call).
IMAGE_PROCESSOR: dict[str, Any] = {
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "size": {"shortest_edge": 3136, "longest_edge": 12845056},
}

# Qwen2.5-VL's tokenizer (tokenizer_config.json "added_tokens_decoder"): 151,643 byte-level BPE ids, then
# the special tokens <|endoftext|> 151643 (padding) … <|file_sep|> 151664, so ``len(tokenizer)`` is
# 151,665 and tokens added later (EO1's seven) get 151665 onwards, below the 151,936 embedding rows.
# Template words: "system" 8948, "user" 872, "assistant" 77091, "\n" 198.
SPECIAL_IDS: dict[str, int] = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646,
    "<|object_ref_end|>": 151647,
    "<|box_start|>": 151648,
    "<|box_end|>": 151649,
    "<|quad_start|>": 151650,
    "<|quad_end|>": 151651,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|fim_prefix|>": 151659,
    "<|fim_middle|>": 151660,
    "<|fim_suffix|>": 151661,
    "<|fim_pad|>": 151662,
    "<|repo_name|>": 151663,
    "<|file_sep|>": 151664,
}
TEMPLATE_IDS: dict[str, int] = {"system": 8948, "user": 872, "assistant": 77091, "\n": 198}
WORDS = StandInTokenizer(checkpoint=QWEN2_5_VL_3B, vocab_size=151936, pad=151643, first=256, last=151643)


class StandInQwen2Tokenizer:
    """The part of Qwen2.5-VL's tokenizer the EO1 processor step uses: added special tokens and their ids,
    and the ids of a rendered prompt (special tokens whole, template words by their ids, other words
    by ``WORDS``)."""

    def __init__(self, words: StandInTokenizer = WORDS) -> None:
        self.words = words
        self.special_ids = dict(SPECIAL_IDS)

    def __len__(self) -> int:
        return max(self.special_ids.values()) + 1

    @property
    def vocab_size(self) -> int:
        return self.words.vocab_size

    def add_tokens(self, tokens: Iterable[str], special_tokens: bool = False) -> int:
        if not special_tokens:
            raise NotImplementedError("the stand-in adds special tokens only")
        added = 0
        for token in tokens:
            if token not in self.special_ids:
                self.special_ids[token] = len(self)
                added += 1
        if len(self) > self.vocab_size:
            raise ValueError(f"{len(self)} tokens do not fit the {self.vocab_size} embedding rows")
        return added

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.special_ids[token]

    def ids(self, text: str) -> list[int]:
        return prompt_ids(text, self.special_ids, TEMPLATE_IDS, self.words)


class StandInQwen2_5_VLProcessor:
    """What ``EO1QwenProcessorStep`` uses of ``Qwen2_5_VLProcessor``, without the hub.

    ``apply_chat_template`` renders Qwen2.5-VL's chat template (``<|im_start|>{role}\\n``, one
    ``<|vision_start|><|image_pad|><|vision_end|>`` per image, the texts, ``<|im_end|>\\n``; the default
    system turn only when the conversation has none), expands each ``<|image_pad|>`` to its image's token
    count (the grid's patches over ``merge_size²``) and returns the real processor's keys, with
    ``mm_token_type_ids`` 1 at the image tokens.
    """

    def __init__(self) -> None:
        from transformers import Qwen2VLImageProcessor

        self.tokenizer = StandInQwen2Tokenizer()
        self.image_processor = Qwen2VLImageProcessor(**IMAGE_PROCESSOR)

    @staticmethod
    def render(conversation: Sequence[Mapping[str, Any]]) -> tuple[str, list[Any]]:
        """The template's text for one conversation, and its images in order."""
        return chat_template(conversation, default_system="You are a helpful assistant.")

    def apply_chat_template(
        self,
        conversations: Sequence[Sequence[Mapping[str, Any]]],
        *,
        tokenize: bool = False,
        padding: bool = False,
        padding_side: str = "left",
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        add_generation_prompt: bool = False,
        return_dict: bool = False,
        return_tensors: str | None = None,
    ) -> dict[str, torch.Tensor]:
        if not (tokenize and return_dict and return_tensors == "pt") or add_generation_prompt:
            raise NotImplementedError("the stand-in returns tokenized pt dicts without a generation prompt")
        if len(conversations) != 1:
            raise NotImplementedError("the stand-in processes a batch of one conversation")
        text, images = self.render(conversations[0])
        sizes = (
            {}
            if min_pixels is None or max_pixels is None
            else {"min_pixels": min_pixels, "max_pixels": max_pixels}
        )
        encoded = self.image_processor(images=images, return_tensors="pt", **sizes)
        image_id = self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        return with_image_tokens(text, encoded, self.image_processor.merge_size, image_id, self.tokenizer.ids)


PROCESSORS: dict[str, type[StandInQwen2_5_VLProcessor]] = {QWEN2_5_VL_3B: StandInQwen2_5_VLProcessor}
