"""The Qwen3-VL backbone's data-dependent pieces as static ones for a fixed image grid, shared by the
adapters on Qwen3-VL (groot on Cosmos-Reason2-2B, vla_jepa on Qwen3-VL-2B): the image grid's counts as
Python ints, ``fast_pos_embed_interpolate``'s tables as constants, DeepStack's boolean-mask add as a
``torch.where``, and ``static_qwen3_vl``, which installs them on a ``Qwen3VLModel``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from worker.trace.fake_weights import real_tensors
from worker.trace.policies.adapters._qwen_vl import overridden, placeholder_mask
from worker.trace.policies.adapters._randomness import SubstitutionMismatch


def static_deepstack(
    hidden_states: torch.Tensor, visual_pos_masks: torch.Tensor, visual_embeds: torch.Tensor
) -> torch.Tensor:
    """``Qwen3VLTextModel._deepstack_process`` without boolean-mask indexing: the same sums at the visual
    positions, the other hidden states unchanged."""
    visual_embeds = visual_embeds.to(hidden_states.device, hidden_states.dtype)
    flat = visual_pos_masks.reshape(-1).long()
    index = (torch.cumsum(flat, dim=0) - 1).clamp(min=0).reshape(visual_pos_masks.shape)
    return torch.where(visual_pos_masks[..., None], hidden_states + visual_embeds[index], hidden_states)


class StaticGrid(TorchFunctionMode):
    """Per-image counts that the (constant) image grid fixes, as Python ints instead of tensor reads.

    ``torch.split(x, sizes)`` with ``len(counts)`` sizes read from a tensor (``.tolist()``: data-dependent
    symbols under ``torch.export``) splits by ``counts``, and ``torch.repeat_interleave(x, repeats)`` gets
    ``output_size=frames`` (the grid's total frame count), so its length is static. Used around
    transformers code whose only such calls read those counts; real values are checked equal, traced ones
    have none to read.
    """

    def __init__(self, counts: list[int], what: str, frames: int | None = None) -> None:
        super().__init__()
        self.counts = counts
        self.what = what
        self.frames = frames

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in (torch.split, torch.Tensor.split) and len(args) >= 2 and isinstance(args[1], list | tuple):
            sizes = list(args[1])
            if len(sizes) == len(self.counts):
                if all(isinstance(size, int) for size in sizes) and sizes != self.counts:
                    raise SubstitutionMismatch(f"Qwen3-VL: {self.what} {sizes} are not {self.counts}")
                return func(args[0], list(self.counts), *args[2:], **kwargs)
        if (
            func is torch.repeat_interleave
            and self.frames is not None
            and len(args) == 2
            and isinstance(args[1], torch.Tensor)
            and "output_size" not in kwargs
        ):
            if torch._guards.detect_fake_mode() is None:
                with torch._C.DisableTorchFunction():  # the value, past every other mode
                    frames = int(args[1].sum())
                if frames != self.frames:
                    raise SubstitutionMismatch(f"Qwen3-VL: image frame count {frames} is not {self.frames}")
            return func(*args, **kwargs, output_size=self.frames)
        return func(*args, **kwargs)


class _Recorded(Exception):
    """The literals wanted were recorded: the rest of the function is not run."""


class _Literals(TorchFunctionMode):
    """Records the Python lists ``torch.tensor`` is called with, stopping after ``stop_after`` calls."""

    def __init__(self, stop_after: int) -> None:
        super().__init__()
        self.recorded: list[Any] = []
        self.stop_after = stop_after

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.tensor:
            self.recorded.append(out.tolist())
            if len(self.recorded) == self.stop_after:
                raise _Recorded
        return out


def position_literals(visual: Any, image_grid_thw: list[list[int]]) -> list[Any]:
    """The bilinear indices and weights ``fast_pos_embed_interpolate`` builds for the grid, by its own
    code on real tensors (it stops before the embedding lookup)."""
    with real_tensors():
        grid = torch.tensor(image_grid_thw, dtype=torch.long)
        with _Literals(stop_after=2) as literals, contextlib.suppress(_Recorded):
            visual.fast_pos_embed_interpolate(grid)
    if len(literals.recorded) != 2:
        raise RuntimeError("Qwen3-VL: fast_pos_embed_interpolate built no index and weight tables")
    return literals.recorded


def static_pos_embed(visual: Any, image_grid_thw: list[list[int]]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fast_pos_embed_interpolate`` with its index and weight tables built once, by its own code.

    Transformers builds them in Python from ``.tolist()`` of grid-derived tensors: under ``torch.export``
    one data-dependent scalar per element (thousands of graph nodes). Here they are constants of the
    program; the embedding lookup, the weighted sum and the per-image reordering are the original's.
    """
    indices, weights = position_literals(visual, image_grid_thw)
    merge = visual.config.spatial_merge_size

    def forward(grid_thw: torch.Tensor) -> torch.Tensor:
        device = visual.pos_embed.weight.device
        idx_tensor = torch.tensor(indices, dtype=torch.long, device=device)
        weight_tensor = torch.tensor(weights, dtype=visual.pos_embed.weight.dtype, device=device)
        pos_embeds = visual.pos_embed(idx_tensor).to(device) * weight_tensor[:, :, None]
        patch_pos_embeds = pos_embeds[0] + pos_embeds[1] + pos_embeds[2] + pos_embeds[3]
        per_image = patch_pos_embeds.split([h * w for _, h, w in image_grid_thw])
        permuted = []
        for pos_embed, (t, h, w) in zip(per_image, image_grid_thw, strict=True):
            pos_embed = pos_embed.repeat(t, 1)
            pos_embed = (
                pos_embed.view(t, h // merge, merge, w // merge, merge, -1)
                .permute(0, 1, 3, 2, 4, 5)
                .flatten(0, 4)
            )
            permuted.append(pos_embed)
        return torch.cat(permuted)

    return forward


def with_grid(method: Callable[..., Any], mode: Callable[[], StaticGrid]) -> Callable[..., Any]:
    """``method`` called inside a fresh ``mode()``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        with mode():
            return method(*args, **kwargs)

    return call


@contextlib.contextmanager
def static_qwen3_vl(
    qwen: Any, image_grid_thw: list[list[int]], pos_embed: Callable[..., Any]
) -> Iterator[None]:
    """Inside the block the Qwen3-VL model reads the image grid as Python counts and indexes no boolean
    masks (``qwen`` is the ``Qwen3VLModel``; ``pos_embed`` its ``static_pos_embed``)."""
    visual = qwen.visual
    patches = [t * h * w for t, h, w in image_grid_thw]
    tokens = [n // visual.spatial_merge_size**2 for n in patches]
    frames = sum(t for t, _, _ in image_grid_thw)

    def image_features(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor, **kwargs: Any) -> Any:
        # Qwen3VLModel.get_image_features with the per-image token counts as Python ints.
        pixel_values = pixel_values.type(visual.dtype)
        output = visual(pixel_values, grid_thw=image_grid_thw, **{**kwargs, "return_dict": True})
        output.pooler_output = torch.split(output.pooler_output, tokens)
        return output

    overrides: dict[tuple[Any, str], Callable[..., Any]] = {
        (qwen, "get_placeholder_mask"): placeholder_mask(qwen.config),
        (qwen, "get_image_features"): image_features,
        (visual, "fast_pos_embed_interpolate"): pos_embed,
        (visual, "forward"): with_grid(
            visual.forward, lambda: StaticGrid(patches, "image patch counts", frames)
        ),
        (qwen.language_model, "_deepstack_process"): static_deepstack,
    }
    with overridden(overrides):
        yield
