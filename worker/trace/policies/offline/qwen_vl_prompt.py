"""What the Qwen-VL processor stand-ins (Qwen2.5-VL for eo1, Qwen3-VL for groot and vla_jepa) share: the
chat template, the ids of a rendered prompt, and the processor's outputs with each image placeholder
expanded to its image's tokens."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from worker.trace.policies.offline.tokens import StandInTokenizer

IMAGE_TOKEN = "<|image_pad|>"
_PIECES = re.compile(r"\n|[^\s]+")


def chat_template(
    conversation: Sequence[Mapping[str, Any]],
    *,
    default_system: str | None = None,
    add_generation_prompt: bool = False,
) -> tuple[str, list[Any]]:
    """Qwen-VL's chat template for one conversation, and its images in order: ``<|im_start|>{role}\\n``,
    the content (a text, or items: one ``<|vision_start|><|image_pad|><|vision_end|>`` per image, the
    texts), ``<|im_end|>\\n``; a ``default_system`` turn first when the conversation has no system turn
    (Qwen2.5-VL's template), ``<|im_start|>assistant\\n`` as the generation prompt."""
    text, images = "", []
    for index, message in enumerate(conversation):
        if index == 0 and default_system is not None and message["role"] != "system":
            text += f"<|im_start|>system\n{default_system}<|im_end|>\n"
        text += f"<|im_start|>{message['role']}\n"
        content = message["content"]
        if isinstance(content, str):
            text += content
        else:
            for item in content:
                if item["type"] == "image":
                    text += f"<|vision_start|>{IMAGE_TOKEN}<|vision_end|>"
                    images.append(item["image"])
                elif item["type"] == "text":
                    text += item["text"]
                else:
                    raise NotImplementedError(f"the stand-in has no {item['type']!r} content")
        text += "<|im_end|>\n"
    if add_generation_prompt:
        text += "<|im_start|>assistant\n"
    return text, images


def prompt_ids(
    text: str, special_ids: Mapping[str, int], template_ids: Mapping[str, int], words: StandInTokenizer
) -> list[int]:
    """Special tokens whole, the template's words by their real ids, any other word by ``words``."""
    special = re.compile("(" + "|".join(re.escape(token) for token in special_ids) + ")")
    ids: list[int] = []
    for piece in special.split(text):
        if piece in special_ids:
            ids.append(special_ids[piece])
            continue
        for word in _PIECES.findall(piece):
            ids.append(template_ids.get(word, 0) or words.word_ids(word)[0])
    return ids


def with_image_tokens(
    text: str,
    encoded: Mapping[str, torch.Tensor],
    merge_size: int,
    image_id: int,
    ids: Callable[[str], list[int]],
) -> dict[str, torch.Tensor]:
    """The real processor's keys for ``text`` and its images (``encoded`` by the image processor): each
    ``<|image_pad|>`` expanded to its image's token count (the grid's patches over ``merge_size²``),
    ``mm_token_type_ids`` 1 at the image tokens."""
    counts = [int(n) // merge_size**2 for n in encoded["image_grid_thw"].prod(-1).tolist()]
    pieces = text.split(IMAGE_TOKEN)
    if len(pieces) != len(counts) + 1:
        raise ValueError(f"{len(pieces) - 1} image tokens in the prompt for {len(counts)} images")
    tokens = ids(pieces[0])
    for count, piece in zip(counts, pieces[1:], strict=True):
        tokens += [image_id] * count + ids(piece)
    input_ids = torch.tensor([tokens], dtype=torch.long)
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "mm_token_type_ids": (input_ids == image_id).long(),
        "pixel_values": encoded["pixel_values"],
        "image_grid_thw": encoded["image_grid_thw"],
    }
