"""Configs of the Hugging Face models that LeRobot policies load by name, kept as data for offline builds.

The hub cannot be reached at trace time, and a policy with random weights only needs the architecture:
these are the sizes of the named checkpoints' ``config.json`` (same layer counts, widths, vocabulary,
positions, activation), so a tower built from them has the same graph as the real one.
"""

from __future__ import annotations

from typing import Any

# openai/clip-vit-base-patch16 (config.json, "text_config" and "vision_config").
CLIP_VIT_BASE_PATCH16_TEXT: dict[str, Any] = {
    "vocab_size": 49408,
    "hidden_size": 512,
    "intermediate_size": 2048,
    "projection_dim": 512,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "max_position_embeddings": 77,
    "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "initializer_factor": 1.0,
    # The checkpoint keeps the legacy special-token ids (pad 1, bos 0, eos 2); with eos 2, transformers
    # pools the text at the argmax of the input ids (the first <|endoftext|>, id 49407).
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}

CLIP_VIT_BASE_PATCH16_VISION: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "projection_dim": 512,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
    "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "initializer_factor": 1.0,
}

# The CLIP tokenizer's special tokens and padded length (openai/clip-vit-base-patch16 tokenizer).
CLIP_TOKENIZER: dict[str, int] = {
    "vocab_size": 49408,
    "start_of_text": 49406,
    "end_of_text": 49407,  # also the padding token
    "model_max_length": 77,
}

CLIP_TEXT: dict[str, dict[str, Any]] = {"openai/clip-vit-base-patch16": CLIP_VIT_BASE_PATCH16_TEXT}
CLIP_VISION: dict[str, dict[str, Any]] = {"openai/clip-vit-base-patch16": CLIP_VIT_BASE_PATCH16_VISION}
