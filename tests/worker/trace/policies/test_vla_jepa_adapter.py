"""The VLA-JEPA adapter: built offline on a tiny Qwen3-VL and V-JEPA 2, traced, its plan equal to the policy.

VLA-JEPA is built by LeRobot's own code from its default config with the offline Qwen3-VL and V-JEPA 2
configs and the processor stand-ins. The tests register configs shrunk to two text layers, one vision block
(a DeepStack one) and a one-block video encoder under test names, with LeRobot's own ``DiT-test`` action
head preset and a one-block world-model predictor, so the same adapter code runs in seconds; the
full-size configs are checked as data only, never built.
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
from worker.trace.policies import registry
from worker.trace.policies.adapters import _qwen3_vl, vla_jepa
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import qwen3_vl, vjepa2
from worker.trace.policies.offline.hub import MissingOfflineConfig

TINY_QWEN3_VL = "test/tiny-qwen3-vl"
TINY_VJEPA2 = "test/tiny-vjepa2"
OVERRIDES: dict[str, Any] = {
    "qwen_model_name": TINY_QWEN3_VL,
    "jepa_encoder_name": TINY_VJEPA2,
    "action_model_type": "DiT-test",
    "action_num_layers": 2,
    "action_hidden_size": 32,
    "predictor_depth": 1,
    "predictor_num_heads": 2,
    "num_inference_timesteps": 3,
}


def tiny_qwen3_vl() -> dict[str, Any]:
    config = copy.deepcopy(qwen3_vl.QWEN3_VL_2B_CONFIG)
    config["text_config"].update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=2,
    )
    config["text_config"]["rope_scaling"]["mrope_section"] = [4, 2, 2]  # head_dim 16 / 2
    config["vision_config"].update(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
        deepstack_visual_indexes=[0],
    )
    return config


def tiny_vjepa2() -> dict[str, Any]:
    config = copy.deepcopy(vjepa2.VJEPA2_VITL_CONFIG)
    config.update(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_pooler_layers=1,
        pred_hidden_size=16,
        pred_num_hidden_layers=1,
        pred_num_attention_heads=2,
    )
    return config


def register_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(qwen3_vl.CONFIGS, TINY_QWEN3_VL, tiny_qwen3_vl())
    monkeypatch.setitem(qwen3_vl.PROCESSORS, TINY_QWEN3_VL, qwen3_vl.StandInQwen3VLProcessor)
    monkeypatch.setitem(vjepa2.CONFIGS, TINY_VJEPA2, tiny_vjepa2())
    monkeypatch.setitem(vjepa2.VIDEO_PROCESSORS, TINY_VJEPA2, vjepa2.VIDEO_PROCESSOR)


@pytest.fixture
def tiny_models(monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)


@pytest.fixture(scope="module")
def small() -> Iterator[TracedPolicy]:
    """VLA-JEPA on the tiny models, traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        register_tiny(monkeypatch)
        yield timed(
            "vla_jepa (small)",
            lambda: vla_jepa.trace_vla_jepa_with(seed=0, checkpoint=None, overrides=OVERRIDES),
        )


# --- offline data ---------------------------------------------------------------------------------------


def test_vla_jepa_is_registered_and_has_no_offline_cause() -> None:
    assert "vla_jepa" in registry.supported() and "vla_jepa" not in NO_OFFLINE_BUILD
    assert registry.get_adapter("vla_jepa") is vla_jepa.trace_vla_jepa_with


def test_the_policys_defaults_name_the_offline_checkpoints() -> None:
    from lerobot.policies.vla_jepa.configuration_vla_jepa import VLAJEPAConfig

    fields = VLAJEPAConfig.__dataclass_fields__
    assert fields["qwen_model_name"].default == qwen3_vl.QWEN3_VL_2B
    assert fields["jepa_encoder_name"].default == vjepa2.VJEPA2_VITL_FPC64_256


def test_qwen3_vl_config_builds_the_published_sizes() -> None:
    from transformers import Qwen3VLConfig

    config: Any = Qwen3VLConfig(**copy.deepcopy(qwen3_vl.QWEN3_VL_2B_CONFIG))
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2048, 28, 6144)
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (16, 8, 128)
    assert text.vocab_size == 151936 and text.rope_parameters["mrope_section"] == [24, 20, 20]
    assert text.rope_parameters["rope_theta"] == 5_000_000 and text.dtype == torch.bfloat16
    assert (vision.depth, vision.hidden_size, vision.out_hidden_size, vision.num_heads) == (
        24,
        1024,
        2048,
        16,
    )
    assert list(vision.deepstack_visual_indexes) == [5, 11, 17]
    assert (vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size) == (16, 2, 2)
    assert config.tie_word_embeddings and (config.image_token_id, config.video_token_id) == (151655, 151656)


def test_qwen3_vl_config_is_the_cosmos_reason2_layout() -> None:
    # Cosmos-Reason2-2B is a fine-tune of Qwen3-VL-2B-Instruct: LeRobot's copy of its config is the same
    # architecture.
    from lerobot.policies.groot.groot_n1_7 import _cosmos_reason2_qwen3_vl_config
    from transformers import Qwen3VLConfig

    ours: Any = Qwen3VLConfig(**copy.deepcopy(qwen3_vl.QWEN3_VL_2B_CONFIG))
    cosmos: Any = _cosmos_reason2_qwen3_vl_config()
    assert ours.text_config.to_dict() == cosmos.text_config.to_dict()
    assert ours.vision_config.to_dict() == cosmos.vision_config.to_dict()


def test_vjepa2_config_builds_the_published_sizes() -> None:
    from transformers import VJEPA2Config, VJEPA2VideoProcessor

    config: Any = VJEPA2Config(**copy.deepcopy(vjepa2.VJEPA2_VITL_CONFIG))
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (1024, 24, 16)
    assert (config.patch_size, config.tubelet_size, config.crop_size, config.image_size) == (16, 2, 256, 256)
    assert (config.pred_hidden_size, config.pred_num_hidden_layers, config.pred_num_mask_tokens) == (
        384,
        12,
        10,
    )
    processor: Any = VJEPA2VideoProcessor(**copy.deepcopy(vjepa2.VIDEO_PROCESSOR))
    assert processor.size.shortest_edge == 292 and processor.crop_size.height == 256
    video = torch.rand(4, 3, 300, 320)
    pixels = processor(videos=[video], return_tensors="pt", do_rescale=False)["pixel_values_videos"]
    assert pixels.shape == (1, 4, 3, 256, 256)


def test_stand_in_processor_renders_vla_jepas_prompt() -> None:
    processor = qwen3_vl.StandInQwen3VLProcessor()
    tokenizer = processor.tokenizer
    assert len(tokenizer) == 151669 and "<|action_0|>" not in tokenizer.get_vocab()
    assert tokenizer.add_tokens(["<|action_0|>"], special_tokens=True) == 1
    assert tokenizer.add_tokens(["<|embodied_action|>"], special_tokens=True) == 1
    assert tokenizer.convert_tokens_to_ids("<|action_0|>") == 151669
    assert tokenizer.convert_tokens_to_ids("<|embodied_action|>") == 151670
    image = torch.rand(3, 256, 256)
    conversation = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": image},
                {"type": "text", "text": "pick <|action_0|><|action_0|> then <|embodied_action|>."},
            ],
        }
    ]
    text, images = processor.render(conversation, add_generation_prompt=True)
    assert len(images) == 1 and text == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "pick <|action_0|><|action_0|> then <|embodied_action|>.<|im_end|>\n<|im_start|>assistant\n"
    )
    encoded = processor.apply_chat_template(
        [conversation],
        tokenize=True,
        add_generation_prompt=True,
        return_dict=True,
        processor_kwargs={"padding": True, "return_tensors": "pt", "device": "cpu", "do_rescale": False},
    )
    ids = encoded["input_ids"][0].tolist()
    assert ids[:4] == [151644, 872, 198, 151652]  # <|im_start|> user \n <|vision_start|>
    assert ids[4:68] == [151655] * 64 and ids[68] == 151653  # 16x16 patches, 2x2 merged
    assert ids[70:72] == [151669, 151669] and ids[73] == 151670
    assert ids[-5:] == [151645, 198, 151644, 77091, 198]  # <|im_end|> \n <|im_start|> assistant \n
    assert encoded["image_grid_thw"].tolist() == [[1, 16, 16]]
    assert encoded["pixel_values"].shape == (256, 3 * 2 * 16 * 16)
    assert encoded["mm_token_type_ids"][0].sum() == 64 and encoded["attention_mask"].all()
    torch.testing.assert_close(  # do_rescale=False: [0, 1] floats normalized with mean and std 0.5
        encoded["pixel_values"].min(), torch.tensor(-1.0), atol=1e-2, rtol=0
    )


# --- the small policy -----------------------------------------------------------------------------------


def owner_and_span(traced: TracedPolicy) -> tuple[Any, list[int]]:
    """The traced policy object and the embodied-action tokens' span the adapter recorded."""
    prefix: Any = traced.eager["prefix"]
    span: Any = traced.config["embodied_span"]
    return prefix.owner, list(span)


def test_vla_jepa_small_builds_offline_with_the_policys_dtypes(small: TracedPolicy) -> None:
    assert small.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    assert small.substitutions == [vla_jepa.SUBSTITUTION]
    assert small.program("prefix").input_names == vla_jepa.PROGRAM_INPUTS
    assert small.plan.frame_inputs == (*vla_jepa.PROGRAM_INPUTS, "state", "noise")
    assert [int(small.plan.constants[f"t.{k:02d}"]) for k in range(3)] == [0, 333, 666]
    assert small.config["image_grid_thw"] == [[1, 16, 16], [1, 16, 16]]
    assert small.config["qwen_model_name"] == TINY_QWEN3_VL and "stand-in" in str(small.config["processor"])
    start, end = owner_and_span(small)[1]
    assert end - start == 32
    policy = owner_and_span(small)[0]
    qwen, encoder = policy.model.qwen.model, policy.model.video_encoder
    assert {p.dtype for p in qwen.parameters()} == {torch.bfloat16}  # torch_dtype: bf16
    assert {p.dtype for p in encoder.parameters()} == {torch.bfloat16}
    assert qwen.lm_head.weight is qwen.model.language_model.embed_tokens.weight
    assert {p.dtype for p in policy.model.action_model.parameters()} == {torch.float32}
    assert {p.dtype for p in policy.model.video_predictor.parameters()} == {torch.float32}
    frame = small.make_frame(0)
    assert frame["position_ids"].shape == (3, *frame["input_ids"].shape)
    assert frame["state"].shape == (1, 1, 8) and frame["noise"].shape == (1, 7, 7)


def test_vla_jepa_small_has_no_data_dependent_ops(small: TracedPolicy) -> None:
    assert not data_dependent_ops(small)


@pytest.mark.parametrize("program", ["prefix", "denoise_step"])
def test_vla_jepa_small_to_edge(small: TracedPolicy, program: str) -> None:
    check_to_edge(dataclasses.replace(small, programs=[small.program(program)]))


@pytest.mark.parametrize("frame_index", [0, 1])
def test_vla_jepa_small_plan_equals_predict_action_chunk(small: TracedPolicy, frame_index: int) -> None:
    # The plan through the exported programs, through the eager modules and the policy's own
    # predict_action_chunk (its original, unpatched code on the raw observation, fed the frame's noise)
    # agree.
    assert check_plan(small, frame_index).shape == (1, 7, 7)


def test_vla_jepa_eager_chunk_takes_only_its_frames(small: TracedPolicy) -> None:
    frame = small.make_frame(0)
    frame["pixel_values"] = frame["pixel_values"] + 1
    assert small.eager_chunk is not None
    with pytest.raises(KeyError, match="frames make_frame made"):
        small.eager_chunk(frame)


def test_vla_jepa_from_a_saved_checkpoint(small: TracedPolicy, tiny_models: None, tmp_path: Path) -> None:
    owner_and_span(small)[0].save_pretrained(str(tmp_path))
    loaded = vla_jepa.trace_vla_jepa_with(seed=1, checkpoint=tmp_path)
    assert loaded.config["backbone_dtype"] == "torch.bfloat16" and loaded.checkpoint == str(tmp_path)
    frame = small.make_frame(0)
    with torch.no_grad():
        expected = small.plan.run(small.eager, frame)["action"]
        assert torch.equal(loaded.plan.run(loaded.eager, frame)["action"], expected)


def test_vla_jepa_static_prefix_is_checked(tiny_models: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _qwen3_vl.static_deepstack

    def shifted(*args: Any) -> torch.Tensor:
        return real(*args) + 1e-1

    monkeypatch.setattr(_qwen3_vl, "static_deepstack", shifted)
    with pytest.raises(SubstitutionMismatch, match="static prefix"):
        vla_jepa.trace_vla_jepa_with(seed=0, checkpoint=None, overrides=OVERRIDES)


def test_vla_jepa_builds_with_fake_weights(tiny_models: None) -> None:
    from worker.trace.fake_weights import building_fake, is_fake

    with building_fake():
        traced = vla_jepa.trace_vla_jepa_with(seed=0, checkpoint=None, overrides=OVERRIDES)
    policy = owner_and_span(traced)[0]
    assert is_fake(policy.model.qwen.model.lm_head.weight)
    assert {p.dtype for p in policy.model.qwen.model.parameters()} == {torch.bfloat16}
    assert [p.name for p in traced.programs] == ["prefix", "denoise_step"]


@pytest.mark.parametrize(
    ("override", "what"),
    [("qwen_model_name", "config"), ("jepa_encoder_name", "config")],
)
def test_vla_jepa_unknown_checkpoint_is_a_one_line_cause(tiny_models: None, override: str, what: str) -> None:
    overrides = {**OVERRIDES, override: "someone/other-model"}
    with pytest.raises(MissingOfflineConfig, match=f"no offline {what} for 'someone/other-model'") as error:
        vla_jepa.trace_vla_jepa_with(seed=0, checkpoint=None, overrides=overrides)
    assert "\n" not in str(error.value)
