"""Florence-2-large (X-VLA's backbone): the ``florence_config`` an XVLA config carries, as data."""

from __future__ import annotations

from typing import Any

from worker.trace.policies.offline.tokens import StandInTokenizer

FLORENCE2_LARGE = "microsoft/Florence-2-large"

# microsoft/Florence-2-large, config.json ("vision_config": DaViT, "text_config": the BART-large-sized
# language model), in the original remote-code format that X-VLA checkpoints store and LeRobot's
# XVLAConfig translates to transformers' Florence2Config.
FLORENCE2_LARGE_CONFIG: dict[str, Any] = {
    "vision_config": {
        "model_type": "davit",
        "drop_path_rate": 0.1,
        "patch_size": [7, 3, 3, 3],
        "patch_stride": [4, 2, 2, 2],
        "patch_padding": [3, 1, 1, 1],
        "patch_prenorm": [False, True, True, True],
        "dim_embed": [256, 512, 1024, 2048],
        "num_heads": [8, 16, 32, 64],
        "num_groups": [8, 16, 32, 64],
        "depths": [1, 1, 9, 1],
        "window_size": 12,
        "projection_dim": 1024,
        "visual_temporal_embedding": {"type": "COSINE", "max_temporal_embeddings": 100},
        "image_pos_embed": {"type": "learned_abs_2d", "max_pos_embeddings": 50},
        "image_feature_source": ["spatial_avg_pool", "temporal_avg_pool"],
    },
    "text_config": {
        "model_type": "florence2_language",
        "vocab_size": 51289,
        "d_model": 1024,
        "max_position_embeddings": 1024,
        "encoder_layers": 12,
        "encoder_ffn_dim": 4096,
        "encoder_attention_heads": 16,
        "decoder_layers": 12,
        "decoder_ffn_dim": 4096,
        "decoder_attention_heads": 16,
        "activation_function": "gelu",
        "scale_embedding": False,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
    },
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "is_encoder_decoder": True,
}

CONFIGS: dict[str, dict[str, Any]] = {FLORENCE2_LARGE: FLORENCE2_LARGE_CONFIG}

# facebook/bart-large's tokenizer (XVLAConfig.tokenizer_name): <s> 0, <pad> 1, </s> 2, vocabulary 50265.
BART_LARGE = "facebook/bart-large"
TOKENIZERS: dict[str, StandInTokenizer] = {
    BART_LARGE: StandInTokenizer(
        checkpoint=BART_LARGE, vocab_size=50265, pad=1, first=4, last=50260, prefix=(0,), suffix=(2,)
    )
}
