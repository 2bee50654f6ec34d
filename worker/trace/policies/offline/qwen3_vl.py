"""Qwen3-VL-2B-Instruct (VLA-JEPA's backbone): architecture config and a processor stand-in, as data and code.

``Qwen3VLInterface`` asks the hub for the checkpoint (``Qwen3VLForConditionalGeneration.from_pretrained``)
and its processor (``AutoProcessor.from_pretrained``). ``QWEN3_VL_2B_CONFIG`` is the checkpoint's
``config.json``; ``StandInQwen3VLProcessor`` has the interface VLA-JEPA calls: its tokenizer's
``get_vocab`` / ``add_tokens`` / ``convert_tokens_to_ids`` / ``len`` for the added action tokens, then
``apply_chat_template(..., tokenize=True, add_generation_prompt=True, return_dict=True)``. The image
processing is transformers' own ``Qwen2VLImageProcessor`` with the checkpoint's settings (the same as
Cosmos-Reason2-2B's, ``cosmos_reason2.IMAGE_PROCESSOR``), and the text is tokenized by a stand-in with the
Qwen3 vocabulary and special ids. Coverage depends on the ids' count and range, not on which words they
spell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from worker.trace.policies.offline import qwen2_5_vl
from worker.trace.policies.offline.cosmos_reason2 import IMAGE_PROCESSOR
from worker.trace.policies.offline.qwen_vl_prompt import (
    IMAGE_TOKEN,
    chat_template,
    prompt_ids,
    with_image_tokens,
)
from worker.trace.policies.offline.tokens import StandInTokenizer

QWEN3_VL_2B = "Qwen/Qwen3-VL-2B-Instruct"

# Qwen/Qwen3-VL-2B-Instruct, config.json (https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct): a
# Qwen3-1.7B-sized text model (28 layers, hidden 2048, 16 query / 8 key-value heads of width 128, tied
# embeddings) with interleaved multimodal RoPE over (temporal, height, width) sections [24, 20, 20] of the
# 64 rotary pairs, and the Qwen3-VL ViT (24 blocks of width 1024, 16-pixel patches, 2 frames per temporal
# patch, 2x2 patches merged per visual token, DeepStack features from blocks 5, 11 and 17), in bf16.
QWEN3_VL_2B_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": True,
    "text_config": {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "dtype": "bfloat16",
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 6144,
        "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text",
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": 151936,
    },
    "vision_config": {
        "deepstack_visual_indexes": [5, 11, 17],
        "depth": 24,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1024,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 4096,
        "model_type": "qwen3_vl",
        "num_heads": 16,
        "num_position_embeddings": 2304,
        "out_hidden_size": 2048,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}

CONFIGS: dict[str, dict[str, Any]] = {QWEN3_VL_2B: QWEN3_VL_2B_CONFIG}

# Qwen3's tokenizer (tokenizer_config.json "added_tokens_decoder"): Qwen2.5's special tokens <|endoftext|>
# 151643 (padding) … <|file_sep|> 151664, then <tool_response> 151665, </tool_response> 151666, <think>
# 151667 and </think> 151668, so ``len(tokenizer)`` is 151,669 and tokens added later (VLA-JEPA's 28
# action tokens and its embodied-action token) get 151669 onwards, below the 151,936 embedding rows.
SPECIAL_IDS: dict[str, int] = {
    **qwen2_5_vl.SPECIAL_IDS,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}
WORDS = StandInTokenizer(checkpoint=QWEN3_VL_2B, vocab_size=151936, pad=151643, first=256, last=151643)


class StandInQwen3Tokenizer(qwen2_5_vl.StandInQwen2Tokenizer):
    """The part of Qwen3's tokenizer VLA-JEPA uses: Qwen2.5-VL's stand-in with Qwen3's special tokens,
    ``get_vocab`` (the special and added tokens: VLA-JEPA only asks whether its own tokens are there) and
    a settable ``padding_side``."""

    def __init__(self, words: StandInTokenizer = WORDS) -> None:
        super().__init__(words)
        self.special_ids = dict(SPECIAL_IDS)
        self.padding_side = "left"

    def get_vocab(self) -> dict[str, int]:
        return dict(self.special_ids)


class StandInQwen3VLProcessor:
    """What ``Qwen3VLInterface`` uses of ``Qwen3VLProcessor``, without the hub.

    ``apply_chat_template`` renders Qwen3-VL's chat template (``<|im_start|>{role}\\n``, one
    ``<|vision_start|><|image_pad|><|vision_end|>`` per image, the texts, ``<|im_end|>\\n``, no default
    system turn; ``<|im_start|>assistant\\n`` as the generation prompt), expands each ``<|image_pad|>`` to
    its image's token count (the grid's patches over ``merge_size²``) and returns the real processor's
    keys as a ``BatchFeature``, with ``mm_token_type_ids`` 1 at the image tokens.
    """

    def __init__(self) -> None:
        from transformers import Qwen2VLImageProcessor

        self.tokenizer = StandInQwen3Tokenizer()
        self.image_processor = Qwen2VLImageProcessor(**IMAGE_PROCESSOR)

    @staticmethod
    def render(
        conversation: Sequence[Mapping[str, Any]], add_generation_prompt: bool
    ) -> tuple[str, list[Any]]:
        """The template's text for one conversation, and its images in order."""
        return chat_template(conversation, add_generation_prompt=add_generation_prompt)

    def ids(self, text: str) -> list[int]:
        return prompt_ids(text, self.tokenizer.special_ids, qwen2_5_vl.TEMPLATE_IDS, self.tokenizer.words)

    def apply_chat_template(
        self,
        conversations: Sequence[Sequence[Mapping[str, Any]]],
        *,
        tokenize: bool = False,
        add_generation_prompt: bool = False,
        return_dict: bool = False,
        processor_kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        from transformers.feature_extraction_utils import BatchFeature

        kwargs = dict(processor_kwargs or {})
        if not (tokenize and return_dict and kwargs.pop("return_tensors", None) == "pt"):
            raise NotImplementedError("the stand-in returns tokenized pt dicts")
        if len(conversations) != 1:
            raise NotImplementedError("the stand-in processes a batch of one conversation")
        kwargs.pop("padding", None)  # one conversation: nothing to pad
        text, images = self.render(conversations[0], add_generation_prompt)
        encoded = self.image_processor(images=images, return_tensors="pt", **kwargs)
        image_id = self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        data = with_image_tokens(text, encoded, self.image_processor.merge_size, image_id, self.ids)
        return BatchFeature(data=data)


PROCESSORS: dict[str, type[StandInQwen3VLProcessor]] = {QWEN3_VL_2B: StandInQwen3VLProcessor}
