"""Pieces the Qwen-VL-backed adapters (groot on Qwen3-VL, eo1 on Qwen2.5-VL) share for their static
programs: method overrides on model instances, and the placeholder masks without their count check."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch


@contextlib.contextmanager
def overridden(overrides: Mapping[tuple[Any, str], Callable[..., Any]]) -> Iterator[None]:
    """Inside the block each ``(owner, name)`` has the given instance attribute (a method override)."""
    for (owner, name), value in overrides.items():
        owner.__dict__[name] = value
    try:
        yield
    finally:
        for owner, name in overrides:
            owner.__dict__.pop(name, None)


def placeholder_mask(config: Any) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``Qwen*VLModel.get_placeholder_mask`` without its ``inputs_embeds[mask].numel()`` check (a
    boolean-mask index, which the adapters do on the host): the image and video masks of the ids."""

    def masks(
        input_ids: torch.Tensor,
        inputs_embeds: torch.Tensor,
        image_features: torch.Tensor | None = None,
        video_features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        image = (input_ids == config.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
        video = (input_ids == config.video_token_id).unsqueeze(-1).expand_as(inputs_embeds)
        return image, video

    return masks
