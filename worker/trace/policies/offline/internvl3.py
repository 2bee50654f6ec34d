"""InternVL3-1B-hf (EVO1's vision-language embedder): architecture config and a tokenizer stand-in, as data
and code.

``InternVL3Embedder.__init__`` loads the checkpoint's tokenizer (``AutoTokenizer.from_pretrained``) and its
weights (``AutoModel.from_pretrained``) from the hub. ``INTERNVL3_1B_CONFIG`` is the checkpoint's
``config.json`` (an ``InternVLConfig``: transformers' conversion of OpenGVLab/InternVL3-1B, whose language
model is Qwen2.5-0.5B-sized); ``StandInInternVL3Tokenizer`` has the interface the embedder calls
(``convert_tokens_to_ids("<IMG_CONTEXT>")``, then ``__call__`` on a batch of prompts with ``padding``,
``truncation`` and ``max_length``): InternVL's image tags and the Qwen2.5-VL special tokens are whole
tokens with their real ids, ``"\\n"`` is its byte-level id, and any other word gets an id of the Qwen2
vocabulary by ``WORDS``. Coverage depends on the ids' count and range, not on which words they spell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from worker.trace.policies.offline import qwen2_5_vl
from worker.trace.policies.offline.qwen_vl_prompt import prompt_ids
from worker.trace.policies.offline.tokens import StandInTokenizer

INTERNVL3_1B = "OpenGVLab/InternVL3-1B-hf"

# OpenGVLab/InternVL3-1B-hf, config.json (https://huggingface.co/OpenGVLab/InternVL3-1B-hf): the
# InternViT-300M-448px-V2.5 vision tower (24 layers of width 1024, 16 heads, 14-pixel patches of a
# 448-pixel tile, a class token and absolute position embeddings, layer scale 0.1, mean pooling), a pixel
# shuffle of ratio 0.5 (32x32 patches -> 256 tokens of width 4096) and a two-layer GELU projector to the
# Qwen2.5-0.5B-sized text model (24 layers, hidden 896, 14 query / 2 key-value heads, intermediate 4864,
# RoPE theta 1e6 with dynamic NTK scaling of factor 2, untied head, the 151,674-row vocabulary of Qwen2.5-VL's
# tokenizer plus InternVL's nine tags), weights in bf16. <IMG_CONTEXT> (151667) is the image token.
INTERNVL3_1B_CONFIG: dict[str, Any] = {
    "architectures": ["InternVLForConditionalGeneration"],
    "model_type": "internvl",
    "downsample_ratio": 0.5,
    "image_seq_length": 256,
    "image_token_id": 151667,
    "projector_hidden_act": "gelu",
    "vision_feature_layer": -1,
    "vision_feature_select_strategy": "default",
    "torch_dtype": "bfloat16",
    "text_config": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 896,
        "initializer_range": 0.02,
        "intermediate_size": 4864,
        "max_position_embeddings": 32768,
        "max_window_layers": 70,
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"factor": 2.0, "rope_type": "dynamic", "type": "dynamic"},
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151674,
    },
    "vision_config": {
        "architectures": ["InternVisionModel"],
        "model_type": "internvl_vision",
        "attention_bias": True,
        "attention_dropout": 0.0,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "hidden_size": 1024,
        "image_size": [448, 448],
        "initializer_range": 1e-10,
        "intermediate_size": 4096,
        "layer_norm_eps": 1e-06,
        "layer_scale_init_value": 0.1,
        "norm_type": "layer_norm",
        "num_attention_heads": 16,
        "num_channels": 3,
        "num_hidden_layers": 24,
        "patch_size": [14, 14],
        "projection_dropout": 0.0,
        "torch_dtype": "bfloat16",
        "use_absolute_position_embeddings": True,
        "use_mask_token": False,
        "use_mean_pooling": True,
        "use_qk_norm": False,
    },
}

CONFIGS: dict[str, dict[str, Any]] = {INTERNVL3_1B: INTERNVL3_1B_CONFIG}

# The checkpoint's tokenizer is Qwen2.5-VL's (151,643 byte-level BPE ids, then its 22 special tokens from
# <|endoftext|> 151643, the padding token, to <|file_sep|> 151664) with InternVL's tags added after them:
# <img> 151665, </img> 151666, <IMG_CONTEXT> 151667, <quad> … </box> 151668–151673. It pads on the right.
INTERNVL_TAGS: dict[str, int] = {
    "<img>": 151665,
    "</img>": 151666,
    "<IMG_CONTEXT>": 151667,
    "<quad>": 151668,
    "</quad>": 151669,
    "<ref>": 151670,
    "</ref>": 151671,
    "<box>": 151672,
    "</box>": 151673,
}
SPECIAL_IDS: dict[str, int] = {**qwen2_5_vl.SPECIAL_IDS, **INTERNVL_TAGS}
TEMPLATE_IDS: dict[str, int] = {"\n": 198}
PAD_ID = 151643
WORDS = StandInTokenizer(checkpoint=INTERNVL3_1B, vocab_size=151674, pad=PAD_ID, first=256, last=151643)


class StandInInternVL3Tokenizer:
    """What ``InternVL3Embedder`` uses of InternVL3-1B-hf's tokenizer: the id of ``<IMG_CONTEXT>``, and a
    batch of prompts as right-padded ``input_ids`` and ``attention_mask`` (int64, like the real one's)."""

    padding_side = "right"

    def __init__(self, words: StandInTokenizer = WORDS) -> None:
        self.words = words

    def __len__(self) -> int:
        return max(SPECIAL_IDS.values()) + 1

    def convert_tokens_to_ids(self, token: str) -> int:
        return SPECIAL_IDS[token]

    def ids(self, text: str) -> list[int]:
        return prompt_ids(text, SPECIAL_IDS, TEMPLATE_IDS, self.words)

    def __call__(
        self,
        texts: Sequence[str],
        *,
        return_tensors: str | None = None,
        padding: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
    ) -> Any:
        from transformers import BatchEncoding

        if return_tensors != "pt":
            raise NotImplementedError("the stand-in returns pt tensors only")
        rows = [self.ids(text) for text in texts]
        if truncation and max_length is not None:
            rows = [row[:max_length] for row in rows]  # the real tokenizer truncates on the right
        width = max(len(row) for row in rows)
        if not padding and any(len(row) != width for row in rows):
            raise ValueError("prompts of different lengths need padding=True")
        input_ids = torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows], dtype=torch.long)
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows], dtype=torch.long)
        return BatchEncoding({"input_ids": input_ids, "attention_mask": mask})


TOKENIZERS: dict[str, type[StandInInternVL3Tokenizer]] = {INTERNVL3_1B: StandInInternVL3Tokenizer}
