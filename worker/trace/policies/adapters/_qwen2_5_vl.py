"""The Qwen2.5-VL vision tower as a static one for a fixed image grid, shared by the adapters on
Qwen2.5-VL (eo1, wall_x): the rotary position ids, the window permutation and the attention splits that
its ``forward`` derives from the grid with ``.tolist()``, as Python values and constants."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch

from worker.trace.fake_weights import is_fake, real_tensors
from worker.trace.policies.adapters._randomness import SubstitutionMismatch


@dataclass(frozen=True)
class VisionTables:
    """What the Qwen2.5-VL vision tower derives from a fixed image grid, as Python values."""

    grid: list[list[int]]
    pos_ids: list[list[int]]  # rot_pos_emb's (row, column) per patch
    max_grid_size: int  # rot_pos_emb's table length
    window_index: list[int]  # get_window_index's permutation of the merged patches
    full_lengths: list[int]  # per-image patch counts (the full-attention blocks' splits)
    window_lengths: list[int]  # per-window patch counts (the window-attention blocks' splits)
    tokens: list[int]  # per-image visual token counts


def vision_tables(visual: Any, grid: list[list[int]]) -> VisionTables:
    """The tables ``Qwen2_5_VisionTransformerPretrainedModel.forward`` builds for ``grid``: the window ones
    by its own ``get_window_index`` (then ``unique_consecutive``, as ``forward`` does), the rotary position
    ids as ``rot_pos_emb`` builds them."""
    merge = visual.spatial_merge_size
    with real_tensors():
        window_index, cu_window = visual.get_window_index(torch.tensor(grid, dtype=torch.long))
        boundaries: list[int] = torch.unique_consecutive(torch.tensor(cu_window)).tolist()
        index: list[int] = window_index.tolist()
    pos_ids: list[list[int]] = []
    for t, h, w in grid:
        rows = [
            [r * merge + i, c * merge + j]
            for r in range(h // merge)
            for c in range(w // merge)
            for i in range(merge)
            for j in range(merge)
        ]
        pos_ids += rows * t
    return VisionTables(
        grid=[list(row) for row in grid],
        pos_ids=pos_ids,
        max_grid_size=max(max(h, w) for _, h, w in grid),
        window_index=index,
        full_lengths=[h * w for t, h, w in grid for _ in range(t)],
        window_lengths=[b - a for a, b in itertools.pairwise(boundaries)],
        tokens=[t * h * w // merge**2 for t, h, w in grid],
    )


def static_attention_forward(attn: Any, lengths: list[int]) -> Callable[..., torch.Tensor]:
    """``Qwen2_5_VLVisionAttention.forward`` (its non-flash path) splitting by ``lengths``, Python ints,
    instead of by ``cu_seqlens`` read with ``.tolist()``."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        apply_rotary_pos_emb_vision,
        eager_attention_forward,
    )
    from transformers.utils.generic import is_flash_attention_requested

    if is_flash_attention_requested(attn.config):
        raise NotImplementedError(
            "the static Qwen2.5-VL vision tower is its split attention (not flash attention)"
        )

    def forward(
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        rotary_pos_emb: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        seq_length = hidden_states.shape[0]
        query_states, key_states, value_states = (
            attn.qkv(hidden_states).reshape(seq_length, 3, attn.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        )
        assert position_embeddings is not None
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_vision(query_states, key_states, cos, sin)
        query_states = query_states.transpose(0, 1).unsqueeze(0)
        key_states = key_states.transpose(0, 1).unsqueeze(0)
        value_states = value_states.transpose(0, 1).unsqueeze(0)
        attention_interface: Callable[..., Any] = ALL_ATTENTION_FUNCTIONS.get_interface(
            attn.config._attn_implementation, eager_attention_forward
        )
        splits = [torch.split(tensor, lengths, dim=2) for tensor in (query_states, key_states, value_states)]
        attn_outputs = [
            attention_interface(
                attn,
                q,
                k,
                v,
                attention_mask=None,
                scaling=attn.scaling,
                dropout=0.0 if not attn.training else attn.attention_dropout,
                is_causal=False,
                **kwargs,
            )[0]
            for q, k, v in zip(*splits, strict=True)
        ]
        attn_output = torch.cat(attn_outputs, dim=1)
        attn_output = attn_output.reshape(seq_length, -1).contiguous()
        result: torch.Tensor = attn.proj(attn_output)
        return result

    return forward


def static_vision_forward(visual: Any, tables: VisionTables) -> Callable[..., Any]:
    """``Qwen2_5_VisionTransformerPretrainedModel.forward`` with the grid's tables as constants (the blocks'
    attention splits are ``static_attention_forward``'s, installed by ``static_vision_overrides``)."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    def cumulative(lengths: list[int]) -> list[int]:
        out = [0]
        for length in lengths:
            out.append(out[-1] + length)
        return out

    full = cumulative(tables.full_lengths)
    window = cumulative(tables.window_lengths)

    def forward(hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any) -> Any:
        device = hidden_states.device
        hidden_states = visual.patch_embed(hidden_states)
        pos_ids = torch.tensor(tables.pos_ids, dtype=torch.long, device=device)
        rotary_pos_emb = visual.rotary_pos_emb(tables.max_grid_size)[pos_ids].flatten(1)
        window_index = torch.tensor(tables.window_index, dtype=torch.long, device=device)
        unit = visual.spatial_merge_unit
        seq_len, _ = hidden_states.size()
        hidden_states = hidden_states.reshape(seq_len // unit, unit, -1)
        hidden_states = hidden_states[window_index, :, :]
        hidden_states = hidden_states.reshape(seq_len, -1)
        rotary_pos_emb = rotary_pos_emb.reshape(seq_len // unit, unit, -1)
        rotary_pos_emb = rotary_pos_emb[window_index, :, :]
        rotary_pos_emb = rotary_pos_emb.reshape(seq_len, -1)
        emb = torch.cat((rotary_pos_emb, rotary_pos_emb), dim=-1)
        position_embeddings = (emb.cos(), emb.sin())
        cu_full = torch.tensor(full, dtype=torch.int32, device=device)
        cu_window = torch.tensor(window, dtype=torch.int32, device=device)
        for layer_num, blk in enumerate(visual.blocks):
            cu_seqlens = cu_full if layer_num in visual.fullatt_block_indexes else cu_window
            hidden_states = blk(
                hidden_states, cu_seqlens=cu_seqlens, position_embeddings=position_embeddings, **kwargs
            )
        merged_hidden_states = visual.merger(hidden_states)
        reverse_indices = torch.argsort(window_index)
        merged_hidden_states = merged_hidden_states[reverse_indices, :]
        return BaseModelOutputWithPooling(
            last_hidden_state=cast(torch.FloatTensor, hidden_states),
            pooler_output=cast(torch.FloatTensor, merged_hidden_states),
        )

    return forward


def static_vision_overrides(visual: Any, tables: VisionTables) -> dict[tuple[Any, str], Callable[..., Any]]:
    """The vision tower's forward and each block's attention forward, static for ``tables``' grid."""
    overrides: dict[tuple[Any, str], Callable[..., Any]] = {
        (visual, "forward"): static_vision_forward(visual, tables)
    }
    for layer_num, blk in enumerate(visual.blocks):
        full = layer_num in visual.fullatt_block_indexes
        lengths = tables.full_lengths if full else tables.window_lengths
        overrides[(blk.attn, "forward")] = static_attention_forward(blk.attn, lengths)
    return overrides


def check_static_rotary(visual: Any, tables: VisionTables) -> None:
    """The static rotary position ids give ``rot_pos_emb``'s table, or ``SubstitutionMismatch``."""
    if is_fake(visual.rotary_pos_emb.inv_freq):
        return  # fake weights hold no values to compare: checked with real ones
    with torch.no_grad():
        expected = visual.rot_pos_emb(torch.tensor(tables.grid, dtype=torch.long))
        got = visual.rotary_pos_emb(tables.max_grid_size)[torch.tensor(tables.pos_ids)].flatten(1)
    if not torch.equal(expected, got):
        raise SubstitutionMismatch("Qwen2.5-VL: the static rotary position ids differ from rot_pos_emb's")
