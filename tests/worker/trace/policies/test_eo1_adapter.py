"""The EO1 adapter: built offline on a tiny Qwen2.5-VL, traced, and its chunk plan equal to the policy.

EO1 is built by LeRobot's own code from its default config, with the offline Qwen2.5-VL config passed as
``vlm_config`` and the processor stand-in. The tests register a Qwen2.5-VL config shrunk to two text
layers and two vision blocks (one window-attention block, one full-attention block) under a test name,
so the same adapter code runs in seconds; the full-size config is checked as data only, never built.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_vla_adapters import check_plan, check_to_edge, data_dependent_ops, timed

from coverfarm.offline_causes import NO_OFFLINE_BUILD
from worker.trace.policies.adapters import _qwen2_5_vl, eo1
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import qwen2_5_vl
from worker.trace.policies.offline.hub import MissingOfflineConfig
from worker.trace.policies.registry import supported

TINY_QWEN2_5_VL = "test/tiny-qwen2.5-vl"
OVERRIDES: dict[str, Any] = {"vlm_base": TINY_QWEN2_5_VL, "num_denoise_steps": 3}


def tiny_qwen2_5_vl() -> dict[str, Any]:
    config = copy.deepcopy(qwen2_5_vl.QWEN2_5_VL_3B_CONFIG)
    config.update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
    )
    config["rope_scaling"] = {"type": "mrope", "mrope_section": [2, 3, 3]}  # head_dim 16 / 2
    config["vision_config"].update(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
        fullatt_block_indexes=[1],
    )
    return config


@pytest.fixture
def tiny_backbone(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(qwen2_5_vl.CONFIGS, TINY_QWEN2_5_VL, tiny_qwen2_5_vl())
    monkeypatch.setitem(qwen2_5_vl.PROCESSORS, TINY_QWEN2_5_VL, qwen2_5_vl.StandInQwen2_5_VLProcessor)
    return TINY_QWEN2_5_VL


@pytest.fixture(scope="module")
def small() -> Iterator[TracedPolicy]:
    """EO1 on the tiny backbone, traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setitem(qwen2_5_vl.CONFIGS, TINY_QWEN2_5_VL, tiny_qwen2_5_vl())
        monkeypatch.setitem(qwen2_5_vl.PROCESSORS, TINY_QWEN2_5_VL, qwen2_5_vl.StandInQwen2_5_VLProcessor)
        yield timed("eo1 (small)", lambda: eo1.trace_eo1_with(seed=0, checkpoint=None, overrides=OVERRIDES))


# --- offline data ---------------------------------------------------------------------------------------


def test_eo1_is_registered_and_has_no_offline_cause() -> None:
    assert "eo1" in supported() and "eo1" not in NO_OFFLINE_BUILD
    assert eo1.default_vlm_base() == qwen2_5_vl.QWEN2_5_VL_3B


def test_qwen2_5_vl_config_builds_the_published_sizes() -> None:
    from transformers import Qwen2_5_VLConfig

    config: Any = Qwen2_5_VLConfig(**qwen2_5_vl.QWEN2_5_VL_3B_CONFIG)
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2048, 36, 11008)
    assert (text.num_attention_heads, text.num_key_value_heads, text.vocab_size) == (16, 2, 151936)
    assert text.rope_parameters["mrope_section"] == [16, 24, 24] and text.rope_parameters["rope_theta"] == 1e6
    assert (vision.depth, vision.hidden_size, vision.out_hidden_size, vision.window_size) == (
        32,
        1280,
        2048,
        112,
    )
    assert list(vision.fullatt_block_indexes) == [7, 15, 23, 31]
    assert (vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size) == (14, 2, 2)
    assert config.dtype == torch.bfloat16 and config.tie_word_embeddings
    assert (config.image_token_id, config.video_token_id) == (151655, 151656)


def test_stand_in_processor_renders_eo1s_prompt() -> None:
    from lerobot.policies.eo1 import processor_eo1

    processor = qwen2_5_vl.StandInQwen2_5_VLProcessor()
    assert processor.tokenizer.add_tokens(processor_eo1.EO1_SPECIAL_TOKENS, special_tokens=True) == 7
    state_id = processor.tokenizer.convert_tokens_to_ids(processor_eo1.DEFAULT_STATE_TOKEN)
    action_id = processor.tokenizer.convert_tokens_to_ids(processor_eo1.DEFAULT_ACTION_TOKEN)
    assert (action_id, state_id, len(processor.tokenizer)) == (151666, 151669, 151672)
    image = torch.zeros((3, 256, 256), dtype=torch.uint8)
    conversation = [
        {"role": "system", "content": [{"type": "text", "text": "be helpful"}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": image},
                {"type": "text", "text": "<|state_start|><|state_pad|><|state_end|>pick<|vla|>"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "<|action_start|><|action_pad|><|action_end|>"}],
        },
    ]
    text, images = processor.render(conversation)
    assert len(images) == 1 and text == (
        "<|im_start|>system\nbe helpful<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "<|state_start|><|state_pad|><|state_end|>pick<|vla|><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<|action_start|><|action_pad|><|action_end|><|im_end|>\n"
    )
    encoded = processor.apply_chat_template(
        [conversation],
        tokenize=True,
        padding=True,
        padding_side="left",
        min_pixels=64 * 28 * 28,
        max_pixels=128 * 28 * 28,
        return_dict=True,
        return_tensors="pt",
    )
    ids = encoded["input_ids"][0].tolist()
    assert ids[:3] == [151644, 8948, 198]  # <|im_start|> system \n
    assert ids[7:11] == [151644, 872, 198, 151652]  # <|im_start|> user \n <|vision_start|>
    assert ids[11:92] == [151655] * 81 and ids[92] == 151653  # 252x252: 18x18 patches, 2x2 merged
    assert ids[93:96] == [151668, 151669, 151670] and ids[97] == 151671
    assert ids[-7:] == [77091, 198, 151665, 151666, 151667, 151645, 198]
    assert encoded["image_grid_thw"].tolist() == [[1, 18, 18]]
    assert encoded["pixel_values"].shape == (324, 3 * 2 * 14 * 14)
    assert encoded["mm_token_type_ids"][0].sum() == 81 and encoded["attention_mask"].all()


def test_vision_tables_are_the_towers_own(tiny_backbone: str) -> None:
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    config: Any = Qwen2_5_VLConfig(**qwen2_5_vl.CONFIGS[tiny_backbone])
    visual = Qwen2_5_VisionTransformerPretrainedModel._from_config(config.vision_config)
    tables = _qwen2_5_vl.vision_tables(visual, [[1, 18, 18], [1, 18, 18]])
    assert tables.tokens == [81, 81] and tables.full_lengths == [324, 324] and tables.max_grid_size == 18
    # 112-pixel windows are 4x4 merged tokens: a 9x9 token grid is 3x3 windows of 16, 16, 4 … tokens.
    assert len(tables.window_lengths) == 18 and sum(tables.window_lengths) == 648
    assert tables.window_lengths[:3] == [64, 64, 16]
    _qwen2_5_vl.check_static_rotary(visual, tables)
    wrong = dataclasses.replace(tables, pos_ids=[[w, h] for h, w in tables.pos_ids])
    with pytest.raises(SubstitutionMismatch, match="rotary position ids"):
        _qwen2_5_vl.check_static_rotary(visual, wrong)


# --- the small policy -----------------------------------------------------------------------------------


def test_eo1_small_builds_offline_with_the_policys_dtypes(small: TracedPolicy) -> None:
    assert small.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    assert small.substitutions == [eo1.SUBSTITUTION]
    assert small.program("prefix").input_names == eo1.PROGRAM_INPUTS
    assert small.program("prefix").output_names == eo1.PREFIX_OUTPUTS
    assert small.config["image_grid_thw"] == [[1, 18, 18], [1, 18, 18]]
    assert small.config["vlm_base"] == TINY_QWEN2_5_VL and "stand-in" in str(small.config["processor"])
    start, end = small.config["action_span"]  # type: ignore[misc]
    assert end - start == 8
    torch.testing.assert_close(small.plan.constants["t.00"], torch.tensor([1.0]))
    policy: Any = small.eager["prefix"].owner
    backbone = policy.model.vlm_backbone
    assert {p.dtype for p in backbone.parameters()} == {torch.bfloat16}  # dtype="auto": the checkpoint's
    assert {b.dtype for b in backbone.buffers()} == {torch.float32}  # the rotary tables stay fp32
    assert backbone.lm_head.weight is backbone.model.language_model.embed_tokens.weight
    assert policy.model.state_proj.weight.dtype == torch.float32  # the flow head is fp32


def test_eo1_small_has_no_data_dependent_ops(small: TracedPolicy) -> None:
    assert not data_dependent_ops(small)


@pytest.mark.parametrize("program", ["prefix", "denoise_step"])
def test_eo1_small_to_edge(small: TracedPolicy, program: str) -> None:
    check_to_edge(dataclasses.replace(small, programs=[small.program(program)]))


@pytest.mark.parametrize("frame_index", [0, 1])
def test_eo1_small_plan_equals_predict_action_chunk(small: TracedPolicy, frame_index: int) -> None:
    # The plan through the exported programs, through the eager modules and the policy's own
    # predict_action_chunk (its original, unpatched code fed the frame's noise) agree.
    assert check_plan(small, frame_index).shape == (1, 8, 7)


def test_eo1_static_prefix_equals_the_original(small: TracedPolicy) -> None:
    prefix: Any = small.eager["prefix"]
    policy = prefix.owner
    frame = small.make_frame(0)
    batch: dict[str, Any] = {key: frame[key] for key in eo1.PROGRAM_INPUTS}
    batch["image_grid_thw"] = torch.tensor(prefix.tables.grid)
    batch["mm_token_type_ids"] = (frame["input_ids"] == 151655).long()
    eo1.check_static_prefix(policy, batch, prefix, prefix.tables)
    with torch.no_grad():
        keys, values, mask, positions = prefix(*(frame[key] for key in eo1.PROGRAM_INPUTS))
    start, end = prefix.prompt.act_start, prefix.prompt.act_end
    assert keys.shape[:2] == values.shape[:2] == (2, 1) and keys.shape[3] == start  # 2 layers, batch 1
    assert torch.equal(mask, frame["attention_mask"][:, :end])
    assert torch.equal(positions, frame["position_ids"][..., start:end])


def test_eo1_from_a_saved_checkpoint(small: TracedPolicy, tiny_backbone: str, tmp_path: Path) -> None:
    # pretrained_path set: the policy's own _from_config path, no offline config needed, same dtypes.
    small.eager["prefix"].owner.save_pretrained(str(tmp_path))
    loaded = eo1.trace_eo1_with(seed=0, checkpoint=tmp_path)
    assert loaded.config["backbone_dtype"] == "torch.bfloat16" and loaded.checkpoint == str(tmp_path)
    frame = small.make_frame(0)
    with torch.no_grad():
        expected = small.plan.run(small.eager, frame)["action"]
        assert torch.equal(loaded.plan.run(loaded.eager, frame)["action"], expected)


def test_eo1_static_vision_tower_is_checked(tiny_backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _qwen2_5_vl.static_attention_forward

    def shifted(attn: Any, lengths: list[int]) -> Any:
        forward = real(attn, lengths)
        return lambda *args, **kwargs: forward(*args, **kwargs) + 1e-2

    monkeypatch.setattr(_qwen2_5_vl, "static_attention_forward", shifted)
    with pytest.raises(SubstitutionMismatch, match="static vision tower"):
        eo1.trace_eo1_with(seed=0, checkpoint=None, overrides=OVERRIDES)


def test_eo1_unknown_backbone_is_a_one_line_cause() -> None:
    with pytest.raises(MissingOfflineConfig, match="no offline config for 'someone/other-vlm'") as error:
        eo1.trace_eo1_with(seed=0, checkpoint=None, overrides={"vlm_base": "someone/other-vlm"})
    assert "\n" not in str(error.value)
