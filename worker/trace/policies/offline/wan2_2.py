"""Wan2.2 (fastwam's and lingbot_va's video-diffusion stack): its frozen VAE and UMT5 text encoder as
published configs, and a stand-in for the UMT5 tokenizer, as data and code.

The diffusion transformers need no download: LeRobot builds them from its own configs (``FastWAMConfig``'s
``default_video_dit_config`` / ``default_action_dit_config``, ``LingBotVAConfig``'s fields), which mirror
the checkpoints'. What the policies load from the hub is the frozen part of Wan2.2-TI2V-5B: the VAE
(``diffusers.AutoencoderKLWan``), the UMT5-XXL encoder (``transformers.UMT5EncoderModel``) and its
tokenizer. The VAE and the encoder are built here from their ``config.json`` with random weights (the
constructors' own initialisation under the caller's seed); the tokenizer is a ``StandInTokenizer`` of
UMT5's vocabulary: coverage depends on the ids' count and range, not on which words they spell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from worker.trace.policies.offline.tokens import StandInTokenizer

WAN2_2_TI2V_5B_DIFFUSERS = "Wan-AI/Wan2.2-TI2V-5B-Diffusers"  # fastwam's vae/ and text_encoder/
LINGBOT_VA_BASE = "robbyant/lingbot-va-base"  # lingbot_va's vae/, text_encoder/ and tokenizer/
UMT5_XXL = "google/umt5-xxl"  # fastwam's tokenizer

# Wan2.2-TI2V-5B-Diffusers vae/config.json (the Wan2.2 VAE): 2x2 patchified RGB in (12 channels), a
# residual encoder of base width 160 (decoder 256) over width multipliers 1, 2, 4, 4, 48 latent
# channels; 16x spatial and 4x temporal compression; the per-channel latent statistics the policies
# standardise with.
WAN2_2_VAE_LATENTS_MEAN: list[float] = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.157, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.123,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.052, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]  # fmt: skip
WAN2_2_VAE_LATENTS_STD: list[float] = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.499, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.06, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]  # fmt: skip
WAN2_2_VAE_CONFIG: dict[str, Any] = {
    "attn_scales": [],
    "base_dim": 160,
    "decoder_base_dim": 256,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    "in_channels": 12,
    "is_residual": True,
    "latents_mean": WAN2_2_VAE_LATENTS_MEAN,
    "latents_std": WAN2_2_VAE_LATENTS_STD,
    "num_res_blocks": 2,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_spatial": 16,
    "scale_factor_temporal": 4,
    "temperal_downsample": [False, True, True],
    "z_dim": 48,
}

# The UMT5-XXL encoder (text_encoder/config.json of both repos, google/umt5-xxl's sizes): 24 layers of
# width 4096, 64 heads of 64, a gated-GELU feed-forward of 10240, 32 relative-position buckets up to
# distance 128, a 256,384-row embedding.
UMT5_XXL_CONFIG: dict[str, Any] = {
    "d_ff": 10240,
    "d_kv": 64,
    "d_model": 4096,
    "decoder_start_token_id": 0,
    "dense_act_fn": "gelu_new",
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0,
    "is_encoder_decoder": True,
    "is_gated_act": True,
    "layer_norm_epsilon": 1e-06,
    "num_decoder_layers": 24,
    "num_heads": 64,
    "num_layers": 24,
    "pad_token_id": 0,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "scalable_attention": True,
    "tie_word_embeddings": False,
    "vocab_size": 256384,
}

VAE_CONFIGS: dict[str, dict[str, Any]] = {
    WAN2_2_TI2V_5B_DIFFUSERS: WAN2_2_VAE_CONFIG,
    LINGBOT_VA_BASE: WAN2_2_VAE_CONFIG,
}
TEXT_ENCODER_CONFIGS: dict[str, dict[str, Any]] = {
    WAN2_2_TI2V_5B_DIFFUSERS: UMT5_XXL_CONFIG,
    LINGBOT_VA_BASE: UMT5_XXL_CONFIG,
}

# UMT5's SentencePiece tokenizer: <pad> 0, </s> 1 (appended to every prompt), <unk> 2; ordinary pieces
# below 256,000 (the embedding's remaining rows are sentinel tokens).
UMT5_TOKENIZER = StandInTokenizer(
    checkpoint=UMT5_XXL, vocab_size=256384, pad=0, first=3, last=256000, suffix=(1,)
)
TOKENIZERS: dict[str, StandInTokenizer] = {UMT5_XXL: UMT5_TOKENIZER, LINGBOT_VA_BASE: UMT5_TOKENIZER}


@dataclass(frozen=True)
class Encoded:
    """What the policies read of a transformers ``BatchEncoding``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    def __getitem__(self, key: str) -> torch.Tensor:
        value: torch.Tensor = getattr(self, key)
        return value


class StandInUMT5Tokenizer:
    """``AutoTokenizer.from_pretrained(<umt5>)`` as called by the policies: a batch of prompts padded
    (right) or truncated to ``max_length``, ``</s>`` after the words, int64 ids and mask."""

    def __init__(self, tokenizer: StandInTokenizer = UMT5_TOKENIZER) -> None:
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad
        self.vocab_size = tokenizer.vocab_size

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        padding: str | bool = "max_length",
        truncation: bool = True,
        max_length: int | None = None,
        add_special_tokens: bool = True,
        return_attention_mask: bool = True,
        return_tensors: str = "pt",
        **kwargs: Any,
    ) -> Encoded:
        if padding != "max_length" or max_length is None or return_tensors != "pt" or not truncation:
            raise NotImplementedError("the stand-in pads or truncates to max_length, as PyTorch tensors")
        texts = [text] if isinstance(text, str) else list(text)
        rows, masks = [], []
        for prompt in texts:
            words = self.tokenizer.word_ids(prompt)
            suffix = list(self.tokenizer.suffix) if add_special_tokens else []
            ids = (words[: max_length - len(suffix)] + suffix)[:max_length]
            rows.append(ids + [self.tokenizer.pad] * (max_length - len(ids)))
            masks.append([1] * len(ids) + [0] * (max_length - len(ids)))
        return Encoded(torch.tensor(rows, dtype=torch.long), torch.tensor(masks, dtype=torch.long))


def build_vae(config: dict[str, Any]) -> Any:
    """``AutoencoderKLWan`` of ``config`` with its constructor's random weights (fp32), in eval mode as
    ``from_pretrained`` returns it."""
    from diffusers import AutoencoderKLWan

    vae: Any = AutoencoderKLWan(**config)
    return vae.eval()


def build_text_encoder(config: dict[str, Any]) -> Any:
    """``UMT5EncoderModel`` of ``config`` with its constructor's random weights (fp32), in eval mode as
    ``from_pretrained`` returns it."""
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(**config)).eval()
