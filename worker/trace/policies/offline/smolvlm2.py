"""SmolVLM2-500M (SmolVLA's backbone): architecture config and tokenizer special ids, as data."""

from __future__ import annotations

from typing import Any

from worker.trace.policies.offline.tokens import StandInTokenizer

SMOLVLM2_500M = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"

# HuggingFaceTB/SmolVLM2-500M-Video-Instruct, config.json: the architecture fields (a SmolLM2-360M-sized
# Llama text model and a SigLIP base-patch16-512 vision tower, pixel shuffle 4 → 64 tokens per image).
SMOLVLM2_500M_CONFIG: dict[str, Any] = {
    "model_type": "smolvlm",
    "image_token_id": 49190,
    "scale_factor": 4,
    "pad_token_id": 128002,
    "tie_word_embeddings": False,
    "vocab_size": 49280,
    "text_config": {
        "model_type": "llama",
        "head_dim": 64,
        "hidden_size": 960,
        "intermediate_size": 2560,
        "max_position_embeddings": 8192,
        "num_attention_heads": 15,
        "num_hidden_layers": 32,
        "num_key_value_heads": 5,
        "pad_token_id": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000,
        "vocab_size": 49280,
    },
    "vision_config": {
        "model_type": "smolvlm_vision",
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "image_size": 512,
        "patch_size": 16,
    },
}

CONFIGS: dict[str, dict[str, Any]] = {SMOLVLM2_500M: SMOLVLM2_500M_CONFIG}

# The same checkpoint's tokenizer (added_tokens.json): <global-img> 49152, <fake_token_around_image>
# 49189, <image> 49190, <end_of_utterance> 49279; <|im_start|> 1 (bos), <|im_end|> 2 (pad). Ordinary
# text tokens are the ids below 49152.
GLOBAL_IMAGE_TOKEN_ID = 49152
FAKE_IMAGE_TOKEN_ID = 49189
TOKENIZERS: dict[str, StandInTokenizer] = {
    SMOLVLM2_500M: StandInTokenizer(
        checkpoint=SMOLVLM2_500M, vocab_size=49280, pad=2, first=3, last=49152, prefix=(1,)
    )
}
