"""The Wall-X adapter: built offline on a tiny WALL-OSS config, traced, and its chunk plan equal to predict.

Wall-X is built by LeRobot's own code from its default config, with the offline WALL-OSS-Flow config and
processor stand-in. The tests register a config shrunk to two text layers (each with its two MLP
experts) and two vision blocks (one window-attention block, one full-attention block) under a test
name, and an 8-token action chunk, so the same adapter code runs in seconds; the full-size config is
checked as data only, never built.
"""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_vla_adapters import check_to_edge, data_dependent_ops, timed

from coverfarm.offline_causes import NO_OFFLINE_BUILD
from worker.trace.policies import registry
from worker.trace.policies.adapters import wall_x
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import wall_x as offline
from worker.trace.policies.offline.hub import MissingOfflineConfig

TINY_WALL_OSS = "test/tiny-wall-oss-flow"
OVERRIDES: dict[str, Any] = {"pretrained_name_or_path": TINY_WALL_OSS, "chunk_size": 8, "n_action_steps": 8}


def tiny_wall_oss() -> dict[str, Any]:
    config = copy.deepcopy(offline.WALL_OSS_FLOW_CONFIG)
    config.update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        experts=[
            {"hidden_size": 64, "intermediate_size": 128, "hidden_act": "silu"},
            {"hidden_size": 64, "intermediate_size": 32, "hidden_act": "silu"},
        ],
        dim_inputs=[64, 64],
    )
    config["rope_scaling"] = {"type": "mrope", "mrope_section": [2, 3, 3]}  # head_dim 16 / 2
    config["vision_config"].update(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
        window_size=224,  # 8x8-token windows: four per 9x9-token image (the tests' exports stay small)
        fullatt_block_indexes=[1],
    )
    return config


def register_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(offline.CONFIGS, TINY_WALL_OSS, tiny_wall_oss())
    monkeypatch.setitem(offline.PROCESSORS, TINY_WALL_OSS, offline.StandInWallXProcessor)


@pytest.fixture
def tiny_checkpoint(monkeypatch: pytest.MonkeyPatch) -> str:
    register_tiny(monkeypatch)
    return TINY_WALL_OSS


@pytest.fixture(scope="module")
def small() -> Iterator[TracedPolicy]:
    """Wall-X on the tiny config, traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        register_tiny(monkeypatch)
        yield timed(
            "wall_x (small)", lambda: wall_x.trace_wall_x_with(seed=0, checkpoint=None, overrides=OVERRIDES)
        )


def prefix_of(traced: TracedPolicy) -> Any:
    """The eager prefix module (its ``owner`` is the policy, its ``layout`` the prompt's)."""
    return traced.eager["prefix"]


# --- offline data ---------------------------------------------------------------------------------------


def test_wall_x_is_registered_and_has_no_offline_cause() -> None:
    assert "wall_x" in registry.supported() and "wall_x" not in NO_OFFLINE_BUILD
    assert registry.get_adapter("wall_x") is wall_x.trace_wall_x_with
    assert wall_x.default_checkpoint() == offline.WALL_OSS_FLOW


def test_wall_oss_flow_config_builds_the_published_sizes() -> None:
    from lerobot.policies.wall_x.qwen_model import Qwen2_5_VLConfig

    config: Any = Qwen2_5_VLConfig(**copy.deepcopy(offline.WALL_OSS_FLOW_CONFIG))
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2048, 36, 11008)
    assert (text.num_attention_heads, text.num_key_value_heads, text.vocab_size) == (16, 2, 151936)
    assert (vision.depth, vision.hidden_size, vision.out_hidden_size) == (32, 1280, 2048)
    assert config.num_experts == 2 and config.mlp_moe and not config.attention_moe
    assert [e["intermediate_size"] for e in config.experts] == [11008, 2048]
    assert config.dim_inputs == (2048, 2048)
    # The flow head's widths are WallXConfig's padded action and state dimensions.
    assert sum(config.dof_config.values()) == sum(config.agent_pos_config.values()) == 20
    assert config.dtype == torch.bfloat16


def test_stand_in_processor_tokenizes_wall_xs_prompt() -> None:
    from lerobot.policies.wall_x.utils import get_wallx_normal_text, preprocesser_call, replace_action_token

    processor = offline.StandInWallXProcessor()
    tokenizer = processor.tokenizer
    assert len(tokenizer) == 153715 and tokenizer.init_kwargs["action_token_start_index"] == 151667
    assert tokenizer.convert_tokens_to_ids("<|propri|>") == 151665
    assert tokenizer.convert_tokens_to_ids("<|action|>") == tokenizer.encode("<|action|>")[0] == 151666
    assert tokenizer.convert_tokens_to_ids("<|action_token_2047|>") == 153714
    text, _ = get_wallx_normal_text(
        {"instruction": "pick up the cube."}, 4, 0, None, ["observation.images.face_view"]
    )
    (text,) = replace_action_token([text], None, None)
    image = torch.zeros((3, 252, 252), dtype=torch.uint8)
    inputs = preprocesser_call(
        processor, images=[[image]], text=[text], padding=True, truncation=True, max_length=768
    )
    ids = inputs["input_ids"][0].tolist()
    assert ids[:3] == [151644, 8948, 198]  # <|im_start|> system \n
    assert ids.count(151655) == 81 and inputs["image_grid_thw"].tolist() == [[1, 18, 18]]
    assert ids.count(151665) == 1 and ids[-4:] == [151666] * 4
    assert ids[-8:-4] == [198, 151644, 77091, 198]  # \n <|im_start|> assistant \n
    assert inputs["attention_mask"].all() and inputs["labels"] is None
    truncated = tokenizer([text, "short"], return_tensors="pt", padding=True, truncation=True, max_length=20)
    assert truncated["input_ids"].shape == (2, 20) and truncated["input_ids"][1, 0] == tokenizer.pad_token_id
    assert truncated["attention_mask"][1].tolist() == [0] * 19 + [1]


# --- the small policy -----------------------------------------------------------------------------------


def test_wall_x_small_builds_offline_with_the_policys_dtypes(small: TracedPolicy) -> None:
    assert small.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 10}
    assert small.substitutions == [wall_x.SUBSTITUTION]
    assert small.program("prefix").input_names == wall_x.PREFIX_INPUTS
    assert small.program("denoise_step").input_names == (
        "inputs_embeds",
        *wall_x.STEP_FRAME_INPUTS,
        "x",
        "t",
    )
    assert small.plan.frame_inputs == (*wall_x.FRAME_INPUTS, "noise")
    assert small.config["image_grid_thw"] == [[1, 18, 18], [1, 18, 18]]
    assert (
        small.config["pretrained_name_or_path"] == TINY_WALL_OSS
        and small.config["prediction_mode"] == "diffusion"
    )
    span: Any = small.config["action_span"]
    assert span[1] - span[0] == 8
    times = torch.linspace(0, 1, 11)
    assert torch.equal(small.plan.constants["t.00"], times[:2])
    assert torch.equal(small.plan.constants["t.09"], times[9:])
    policy = prefix_of(small).owner
    model = policy.model
    float32 = {name for name, p in model.named_parameters() if p.dtype == torch.float32}
    assert float32 and all(
        "layernorm" in n or n == "model.norm.weight" or "action_preprocessor" in n for n in float32
    )
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert model.visual.blocks[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert model.model.embed_tokens.weight.shape == (153715, 64)  # resized to the tokenizer
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_wall_x_small_has_no_data_dependent_ops(small: TracedPolicy) -> None:
    assert not data_dependent_ops(small)


@pytest.mark.parametrize("program", ["prefix", "denoise_step"])
def test_wall_x_small_to_edge_and_save(small: TracedPolicy, program: str) -> None:
    check_to_edge(dataclasses.replace(small, programs=[small.program(program)]))
    torch.export.save(small.program(program).exported, io.BytesIO())  # what the trace stage writes


def test_wall_x_small_plan_equals_predict_action_chunk(small: TracedPolicy) -> None:
    # The plan through the exported programs and through the eager modules agree, and the eager plan is
    # the policy's own predict_action_chunk (its original code: odeint over the same noise) bit for bit.
    frame = small.make_frame(0)
    assert set(frame) == set(small.plan.frame_inputs)
    exported = {program.name: program.exported.module() for program in small.programs}
    assert small.eager_chunk is not None
    with torch.no_grad():
        through_exported = small.plan.run(exported, frame)["action"]
        through_eager = small.plan.run(small.eager, frame)["action"]
        policy = small.eager_chunk(frame)["action"]
    assert through_eager.shape == (1, 8, 7)
    torch.testing.assert_close(through_exported, through_eager)
    assert torch.equal(through_eager, policy)


def test_wall_x_small_plan_equals_predict_action_chunk_on_another_frame(small: TracedPolicy) -> None:
    frame = small.make_frame(1)
    assert small.eager_chunk is not None
    with torch.no_grad():
        assert torch.equal(small.plan.run(small.eager, frame)["action"], small.eager_chunk(frame)["action"])


def test_wall_x_frames_are_what_preprocess_inputs_makes(small: TracedPolicy) -> None:
    frame = small.make_frame(1)
    types = frame["moe_token_types"][0]
    assert frame["input_ids"][0][types].eq(151666).all() and int(types.sum()) == 8
    assert frame["dof_mask"][0, 0].tolist() == [1.0] * 7 + [0.0] * 13
    assert frame["agent_pos_mask"][0, 0].tolist() == [1.0] * 8 + [0.0] * 12
    assert frame["position_ids"].shape == (3, 1, frame["input_ids"].shape[1])
    assert not torch.equal(frame["pixel_values"], small.make_frame(0)["pixel_values"])


def test_wall_x_from_a_saved_checkpoint(small: TracedPolicy, tiny_checkpoint: str, tmp_path: Path) -> None:
    # The saved policy is rebuilt by WallXPolicy (offline) and its own weights are loaded over it.
    prefix_of(small).owner.save_pretrained(str(tmp_path))
    loaded = wall_x.trace_wall_x_with(seed=1, checkpoint=tmp_path)
    assert loaded.config["backbone_dtype"] == "torch.bfloat16" and loaded.checkpoint == str(tmp_path)
    frame = small.make_frame(0)
    call = small.plan.calls[1]
    with torch.no_grad():
        embeds = prefix_of(small)(*(frame[key] for key in wall_x.PREFIX_INPUTS))
        assert torch.equal(prefix_of(loaded)(*(frame[key] for key in wall_x.PREFIX_INPUTS)), embeds)
        step_inputs = [embeds, *(frame[key] for key in call.inputs[1:-1]), small.plan.constants["t.00"]]
        step: Any = small.eager["denoise_step"]
        reloaded: Any = loaded.eager["denoise_step"]
        for expected, got in zip(step(*step_inputs), reloaded(*step_inputs), strict=True):
            assert torch.equal(expected, got)


def test_wall_x_static_routing_is_checked(tiny_checkpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = wall_x.static_moe_forward

    def shifted(moe: Any, experts: list[list[int]]) -> Any:
        forward = real(moe, experts)
        return lambda *args: forward(*args) + 1e-2

    monkeypatch.setattr(wall_x, "static_moe_forward", shifted)
    with pytest.raises(SubstitutionMismatch, match="static expert routing"):
        wall_x.trace_wall_x_with(seed=0, checkpoint=None, overrides=OVERRIDES)


def test_wall_x_layout_is_checked_on_the_host(small: TracedPolicy) -> None:
    policy = prefix_of(small).owner
    frame = small.make_frame(0)
    layout = wall_x.find_layout(frame, policy.model, 8)
    assert layout == prefix_of(small).layout
    assert layout.experts[1] == list(range(layout.act_start, layout.act_end))
    with pytest.raises(ValueError, match="must hold 7 contiguous"):
        wall_x.find_layout(frame, policy.model, 7)
    shuffled = dict(frame, moe_token_types=frame["moe_token_types"].roll(1, dims=1))
    with pytest.raises(ValueError, match="moe_token_types"):
        wall_x.find_layout(shuffled, policy.model, 8)


def test_wall_x_unknown_checkpoint_is_a_one_line_cause() -> None:
    with pytest.raises(MissingOfflineConfig, match="no offline config for 'someone/other-vla'") as error:
        wall_x.trace_wall_x_with(
            seed=0, checkpoint=None, overrides={"pretrained_name_or_path": "someone/other-vla"}
        )
    assert "\n" not in str(error.value)
