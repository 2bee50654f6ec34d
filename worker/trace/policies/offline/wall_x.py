"""WALL-OSS-Flow (``x-square-robot/wall-oss-flow``, Wall-X's default checkpoint): its config and a processor
stand-in, as data and code.

``Qwen2_5_VLMoEForAction.from_pretrained`` (called by every ``WallXPolicy.__init__``) reads the checkpoint's
config with Wall-X's own ``Qwen2_5_VLConfig.from_pretrained`` and its processor with
``AutoProcessor.from_pretrained``. WALL-OSS is Qwen2.5-VL-3B-Instruct
(``worker.trace.policies.offline.qwen2_5_vl``: 36 text layers of width 2048, the 32-block ViT) with a
hard-routed mixture of two MLP experts in every text layer: expert 0, Qwen's own MLP (intermediate 11008),
for the vision-language tokens, and expert 1 (intermediate 2048) for the ``<|action|>`` tokens;
``36 x 3 x 2048 x 2048`` ≈ 0.45 B parameters on top of Qwen2.5-VL-3B's 3.75 B, the 4.2 B of the model
card. The flow head's widths come from ``dof_config`` and ``agent_pos_config``: 20 action and 20
proprioception channels, Wall-X's cross-embodiment layout (two end effectors' position, rotation and
gripper, head, height and base pose), which are ``WallXConfig``'s ``max_action_dim`` and
``max_state_dim``. The ``noise_scheduler`` block is the checkpoint's flow settings (read by training only;
inference integrates in ``predict``'s default 10 Euler steps).

The tokenizer is Qwen2.5-VL's with the tokens Wall-X adds (its ``merge_tokenizer`` step):
``<|propri|>`` (151665), ``<|action|>`` (151666) and the 2048 FAST action tokens
``<|action_token_0|>`` … (151667 onwards), so ``len(tokenizer)`` is 153,715, to which ``from_pretrained``
resizes the 151,936-row embedding. ``StandInWallXProcessor`` has what Wall-X's ``preprocesser_call`` and
``from_pretrained`` use: transformers' own ``Qwen2VLImageProcessor`` with the checkpoint's image settings
makes the pixel patches and grids, and the text is tokenized by the Qwen2.5-VL stand-in (special and
added tokens whole, template words by their ids, other words hashed into the vocabulary). Coverage
depends on the ids' count and range, not on which words they spell.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from worker.trace.policies.offline.qwen2_5_vl import (
    IMAGE_PROCESSOR,
    QWEN2_5_VL_3B_CONFIG,
    SPECIAL_IDS,
    StandInQwen2Tokenizer,
)

WALL_OSS_FLOW = "x-square-robot/wall-oss-flow"

# Wall-X's 20-channel layout of actions and proprioception (``dof_config`` / ``agent_pos_config``).
DOF_CONFIG: dict[str, int] = {
    "follow_left_ee_cartesian_pos": 3,
    "follow_left_ee_rotation": 3,
    "follow_left_gripper": 1,
    "follow_right_ee_cartesian_pos": 3,
    "follow_right_ee_rotation": 3,
    "follow_right_gripper": 1,
    "head_actions": 2,
    "height": 1,
    "car_pose": 3,
}

# x-square-robot/wall-oss-flow, config.json: Qwen2.5-VL-3B-Instruct's (flat layout, which Wall-X's
# config accepts) plus the mixture of experts and the flow head's settings.
WALL_OSS_FLOW_CONFIG: dict[str, Any] = {
    **copy.deepcopy(QWEN2_5_VL_3B_CONFIG),
    "num_experts": 2,
    "experts": [
        {"hidden_size": 2048, "intermediate_size": 11008, "hidden_act": "silu"},
        {"hidden_size": 2048, "intermediate_size": 2048, "hidden_act": "silu"},
    ],
    "dim_inputs": [2048, 2048],
    "attention_moe": False,
    "mlp_moe": True,
    "dof_config": dict(DOF_CONFIG),
    "agent_pos_config": dict(DOF_CONFIG),
    "noise_scheduler": {
        "beta_alpha": 1.5,
        "beta_beta": 1.0,
        "t_eps": 0.001,
        "s": 0.999,
        "num_inference_timesteps": 10,
    },
}

CONFIGS: dict[str, dict[str, Any]] = {WALL_OSS_FLOW: WALL_OSS_FLOW_CONFIG}

FAST_VOCAB_SIZE = 2048  # the FAST action tokenizer's vocabulary (physical-intelligence/fast)
ADDED_TOKENS = ("<|propri|>", "<|action|>")


class StandInWallXTokenizer(StandInQwen2Tokenizer):
    """What Wall-X uses of its tokenizer: ``__call__`` on a batch of prompts (left padding, truncation to
    ``max_length``), ``encode``, the pad and end ids, the added tokens' ids and ``init_kwargs``' FAST
    token range, and ``len()`` (the rows ``from_pretrained`` resizes the embedding to)."""

    padding_side = "left"

    def __init__(self) -> None:
        super().__init__()
        first = max(SPECIAL_IDS.values()) + 1
        for offset, token in enumerate(ADDED_TOKENS):
            self.special_ids[token] = first + offset
        self.fast_start = first + len(ADDED_TOKENS)
        self.pad_token_id = SPECIAL_IDS["<|endoftext|>"]
        self.eos_token_id = SPECIAL_IDS["<|im_end|>"]
        self.init_kwargs: dict[str, Any] = {
            "action_token_start_index": self.fast_start,
            "action_token_vocab_size": FAST_VOCAB_SIZE,
        }

    def __len__(self) -> int:
        return self.fast_start + FAST_VOCAB_SIZE

    def convert_tokens_to_ids(self, token: str) -> int:
        if token.startswith("<|action_token_") and token.endswith("|>"):
            index = int(token.removeprefix("<|action_token_").removesuffix("|>"))
            if 0 <= index < FAST_VOCAB_SIZE:
                return self.fast_start + index
        return super().convert_tokens_to_ids(token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.ids(text)

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        return_tensors: str | None = None,
        padding: bool | str = False,
        truncation: bool | None = None,
        max_length: int | None = None,
        add_special_tokens: bool = True,
    ) -> Any:
        from transformers import BatchEncoding

        if isinstance(text, str):
            if return_tensors is not None:
                raise NotImplementedError("the stand-in returns tensors for a batch of prompts only")
            ids = self.ids(text)
            return BatchEncoding({"input_ids": ids, "attention_mask": [1] * len(ids)})
        if return_tensors != "pt":
            raise NotImplementedError("the stand-in returns pt tensors for a batch of prompts")
        rows = [self.ids(prompt) for prompt in text]
        if truncation and max_length is not None:
            rows = [row[:max_length] for row in rows]
        width = max(len(row) for row in rows) if padding else None
        if width is None and len({len(row) for row in rows}) > 1:
            raise ValueError("prompts of different lengths need padding=True")
        width = width or len(rows[0])
        padded = [[self.pad_token_id] * (width - len(row)) + row for row in rows]
        mask = [[0] * (width - len(row)) + [1] * len(row) for row in rows]
        return BatchEncoding({"input_ids": torch.tensor(padded), "attention_mask": torch.tensor(mask)})


class StandInWallXProcessor:
    """What ``Qwen2_5_VLMoEForAction`` and Wall-X's ``preprocesser_call`` use of the checkpoint's
    processor: ``tokenizer`` and ``image_processor`` (transformers' own, with Qwen2.5-VL's settings)."""

    def __init__(self) -> None:
        from transformers import Qwen2VLImageProcessor

        self.tokenizer = StandInWallXTokenizer()
        self.image_processor = Qwen2VLImageProcessor(**IMAGE_PROCESSOR)


PROCESSORS: dict[str, type[StandInWallXProcessor]] = {WALL_OSS_FLOW: StandInWallXProcessor}
