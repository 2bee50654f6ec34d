"""What the Qwen-VL processor stand-ins (Qwen2.5-VL for eo1, Qwen3-VL for groot) share: the ids of a
rendered prompt, and the processor's outputs with each image placeholder expanded to its image's tokens."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import torch

from worker.trace.policies.offline.tokens import StandInTokenizer

IMAGE_TOKEN = "<|image_pad|>"
_PIECES = re.compile(r"\n|[^\s]+")


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
