"""Cosmos-Reason2-2B (GR00T N1.7's backbone): a stand-in for its Qwen3-VL processor, as data and code.

The architecture needs no download: LeRobot builds the Qwen3-VL-2B-sized backbone from a hard-coded copy
of the checkpoint's ``config.json`` (``groot_n1_7._cosmos_reason2_qwen3_vl_config``). What it cannot build
offline is the processor (``AutoTokenizer`` / ``Qwen2VLImageProcessor.from_pretrained`` in
``processor_groot._build_n1_7_processor``). ``StandInQwen3VLProcessor`` replaces it with the same
interface the GR00T N1.7 VLM-encode step calls (``apply_chat_template``, then ``__call__`` on texts and
images): transformers' own ``Qwen2VLImageProcessor`` with the checkpoint's image settings makes the
pixel patches and grids, and the text is tokenized by a stand-in with the Qwen3 vocabulary and special
ids. Coverage depends on the ids' count and range, not on which words they spell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from worker.trace.policies.offline.qwen_vl_prompt import (
    IMAGE_TOKEN,
    chat_template,
    prompt_ids,
    with_image_tokens,
)
from worker.trace.policies.offline.tokens import StandInTokenizer

COSMOS_REASON2_2B = "nvidia/Cosmos-Reason2-2B"

# The checkpoint's preprocessor_config.json (Qwen3-VL's): 16-pixel patches, 2 frames per temporal patch,
# 2x2 patches merged per visual token, mean/std 0.5, pixel budget [256², 4096²].
IMAGE_PROCESSOR: dict[str, Any] = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
}

# Qwen3's tokenizer (tokenizer_config.json "added_tokens_decoder"): <|endoftext|> 151643 (padding),
# <|im_start|> 151644, <|im_end|> 151645, <|vision_start|> 151652, <|vision_end|> 151653, <|image_pad|>
# 151655, <|video_pad|> 151656; byte-level BPE ids below 151643 ("user" 872, "\n" 198). The model's
# embedding table has 151,936 rows.
SPECIAL_IDS: dict[str, int] = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}
TEMPLATE_IDS: dict[str, int] = {"user": 872, "\n": 198}
TOKENIZER = StandInTokenizer(
    checkpoint=COSMOS_REASON2_2B, vocab_size=151936, pad=151643, first=256, last=151643
)


class StandInQwen3VLProcessor:
    """What ``GrootN17VLMEncodeStep`` uses of ``Qwen3VLProcessor``, without the hub.

    ``apply_chat_template`` renders Qwen3-VL's template for one user turn without a generation prompt
    (``<|im_start|>user\\n`` + one ``<|vision_start|><|image_pad|><|vision_end|>`` per image + the text
    + ``<|im_end|>\\n``); ``__call__`` expands each ``<|image_pad|>`` to the image's token count (its
    grid's patches over ``merge_size²``), as the real processor does, and returns the same keys.
    """

    def __init__(self, tokenizer: StandInTokenizer = TOKENIZER) -> None:
        from transformers import Qwen2VLImageProcessor

        self.tokenizer = tokenizer
        self.image_processor = Qwen2VLImageProcessor(**IMAGE_PROCESSOR)

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        tokenize: bool = False,
        add_generation_prompt: bool = False,
    ) -> str:
        if tokenize or add_generation_prompt:
            raise NotImplementedError("the stand-in renders untokenized prompts without a generation prompt")
        text, _ = chat_template(conversation)
        return text

    def token_ids(self, text: str) -> list[int]:
        return prompt_ids(text, SPECIAL_IDS, TEMPLATE_IDS, self.tokenizer)

    def __call__(
        self,
        text: Sequence[str],
        images: Sequence[torch.Tensor],
        return_tensors: str = "pt",
        padding: bool = True,
        **kwargs: Any,
    ) -> dict[str, torch.Tensor]:
        if len(text) != 1:
            raise NotImplementedError("the stand-in processes a batch of one prompt")
        encoded = self.image_processor(images=list(images), return_tensors=return_tensors)
        return with_image_tokens(
            text[0], encoded, self.image_processor.merge_size, SPECIAL_IDS[IMAGE_TOKEN], self.token_ids
        )
