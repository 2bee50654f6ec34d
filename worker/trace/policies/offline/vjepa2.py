"""V-JEPA 2 ViT-L (VLA-JEPA's world-model video encoder): architecture config and video processor settings.

``VLAJEPAModel`` asks the hub for the encoder (``AutoModel.from_pretrained``) and its video processor
(``AutoVideoProcessor.from_pretrained``) when the world model is enabled (the default). The encoder only
serves the training loss (``_world_model_loss``), but the policy builds it, and its config sizes the
world-model predictor (hidden size, tubelet size, image size). ``VJEPA2_VITL_CONFIG`` is the checkpoint's
``config.json``; ``VIDEO_PROCESSOR`` its ``video_preprocessor_config.json``, for transformers' own
``VJEPA2VideoProcessor``.
"""

from __future__ import annotations

from typing import Any

VJEPA2_VITL_FPC64_256 = "facebook/vjepa2-vitl-fpc64-256"

# facebook/vjepa2-vitl-fpc64-256, config.json (https://huggingface.co/facebook/vjepa2-vitl-fpc64-256): a
# ViT-L video encoder (24 blocks of width 1024, 16 heads, MLP ratio 4) over 16x16-pixel, 2-frame tubelets
# of 256x256 clips (pretrained on 64 frames), and the mask-token predictor (12 blocks of width 384, 12
# heads, 10 mask tokens); weights in fp32 (VLA-JEPA loads them in its torch_dtype, bf16).
VJEPA2_VITL_CONFIG: dict[str, Any] = {
    "architectures": ["VJEPA2Model"],
    "model_type": "vjepa2",
    "attention_dropout": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "crop_size": 256,
    "drop_path_rate": 0.0,
    "frames_per_clip": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "hidden_size": 1024,
    "image_size": 256,
    "in_chans": 3,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-06,
    "mlp_ratio": 4.0,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "num_pooler_layers": 3,
    "patch_size": 16,
    "pred_hidden_size": 384,
    "pred_mlp_ratio": 4.0,
    "pred_num_attention_heads": 12,
    "pred_num_hidden_layers": 12,
    "pred_num_mask_tokens": 10,
    "pred_zero_init_mask_tokens": True,
    "qkv_bias": True,
    "torch_dtype": "float32",
    "tubelet_size": 2,
}

CONFIGS: dict[str, dict[str, Any]] = {VJEPA2_VITL_FPC64_256: VJEPA2_VITL_CONFIG}

# The checkpoint's video_preprocessor_config.json: resize the short side to 256 · 256 / 224 = 292 pixels
# (bilinear), centre-crop 256x256, rescale by 1/255, ImageNet mean and std.
VIDEO_PROCESSOR: dict[str, Any] = {
    "crop_size": {"height": 256, "width": 256},
    "do_center_crop": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
    "rescale_factor": 1 / 255,
    "size": {"shortest_edge": 292},
}

VIDEO_PROCESSORS: dict[str, dict[str, Any]] = {VJEPA2_VITL_FPC64_256: VIDEO_PROCESSOR}
