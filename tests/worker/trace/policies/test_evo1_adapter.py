"""The EVO1 adapter: built offline on a tiny InternVL3, traced, and its chunk plan equal to the policy.

EVO1 is built by LeRobot's own code from its default config, with the embedder's ``AutoModel`` and
``AutoTokenizer`` lookups answered from the offline InternVL3 config and the tokenizer stand-in. The tests
register an InternVL3 config shrunk in width and depth (two vision layers of width 32, two text layers of
width 64, of which the policy keeps one) under a test name, and shrink the action head and its step
count, so the same adapter code runs in seconds; the geometry stays the checkpoint's (448-pixel tiles,
256 image tokens per view, the 151,674-row vocabulary). The full-size config is checked as data only.
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
from worker.trace.policies.adapters import evo1
from worker.trace.policies.adapters._randomness import SubstitutionMismatch
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import internvl3
from worker.trace.policies.offline.hub import MissingOfflineConfig

TINY_INTERNVL3 = "test/tiny-internvl3"
OVERRIDES: dict[str, Any] = {
    "vlm_model_name": TINY_INTERNVL3,
    "vlm_num_layers": 1,
    "embed_dim": 64,  # the text model's width: the head cross-attends to its hidden states
    "hidden_dim": 64,
    "state_hidden_dim": 64,
    "num_heads": 4,
    "num_layers": 2,
    "chunk_size": 8,
    "n_action_steps": 8,
    "num_inference_timesteps": 3,
}


def tiny_internvl3() -> dict[str, Any]:
    config = copy.deepcopy(internvl3.INTERNVL3_1B_CONFIG)
    config["text_config"].update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
    )
    config["vision_config"].update(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_hidden_layers=2,
        initializer_range=0.02,  # the checkpoint's 1e-10 would make every random vision weight ~0
    )
    return config


def register_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(internvl3.CONFIGS, TINY_INTERNVL3, tiny_internvl3())
    monkeypatch.setitem(internvl3.TOKENIZERS, TINY_INTERNVL3, internvl3.StandInInternVL3Tokenizer)


def lerobot_policy(traced: TracedPolicy) -> Any:
    prefix: Any = traced.eager["prefix"]
    return prefix.owner


@pytest.fixture
def tiny_embedder(monkeypatch: pytest.MonkeyPatch) -> str:
    register_tiny(monkeypatch)
    return TINY_INTERNVL3


@pytest.fixture(scope="module")
def small() -> Iterator[TracedPolicy]:
    """EVO1 on the tiny embedder, traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        register_tiny(monkeypatch)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        yield timed(
            "evo1 (small)", lambda: evo1.trace_evo1_with(seed=0, checkpoint=None, overrides=OVERRIDES)
        )


# --- offline data ---------------------------------------------------------------------------------------


def test_evo1_is_registered_and_has_no_offline_cause() -> None:
    assert "evo1" in registry.supported() and "evo1" not in NO_OFFLINE_BUILD
    assert registry.get_adapter("evo1") is evo1.trace_evo1_with
    assert evo1.default_vlm_model_name() == internvl3.INTERNVL3_1B


def test_internvl3_config_builds_the_published_sizes() -> None:
    from transformers import InternVLConfig

    config: Any = InternVLConfig(**internvl3.INTERNVL3_1B_CONFIG)
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (896, 24, 4864)
    assert (text.num_attention_heads, text.num_key_value_heads, text.vocab_size) == (14, 2, 151674)
    assert text.rope_parameters["rope_type"] == "dynamic" and text.rope_parameters["factor"] == 2.0
    assert (vision.hidden_size, vision.num_hidden_layers, vision.num_attention_heads) == (1024, 24, 16)
    assert (tuple(vision.image_size), tuple(vision.patch_size), vision.intermediate_size) == (
        (448, 448),
        (14, 14),
        4096,
    )
    # 32x32 patches, pixel-shuffled by 0.5: the 256 image tokens per tile the prompt holds.
    assert (448 // 14 * config.downsample_ratio) ** 2 == config.image_seq_length == 256
    assert config.image_token_id == internvl3.SPECIAL_IDS["<IMG_CONTEXT>"] == 151667
    assert len(internvl3.StandInInternVL3Tokenizer()) == text.vocab_size


def test_stand_in_tokenizer_gives_the_embedders_ids() -> None:
    from lerobot.policies.evo1.internvl3_embedder import IMG_CONTEXT_TOKEN

    tokenizer = internvl3.StandInInternVL3Tokenizer()
    assert tokenizer.convert_tokens_to_ids(IMG_CONTEXT_TOKEN) == 151667
    prompt = "Image-1: <img>" + "<IMG_CONTEXT>" * 3 + "</img>\npick up the cube"
    encoded = tokenizer([prompt, "pick"], return_tensors="pt", padding=True, truncation=True, max_length=9)
    ids, mask = encoded["input_ids"].tolist(), encoded["attention_mask"].tolist()
    assert ids[0][1:6] == [151665, 151667, 151667, 151667, 151666] and ids[0][6] == 198  # <img> … </img> \n
    assert all(256 <= i < 151643 for i in (ids[0][0], *ids[0][7:]))  # words: ordinary Qwen2 ids
    assert len(ids[0]) == 9 and mask[0] == [1] * 9  # truncated on the right to max_length
    assert ids[1][1:] == [internvl3.PAD_ID] * 8 and mask[1] == [1] + [0] * 8  # padded on the right


# --- the small policy -----------------------------------------------------------------------------------


def test_evo1_small_builds_offline_with_the_policys_dtypes(small: TracedPolicy) -> None:
    assert small.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    assert small.substitutions == [evo1.SUBSTITUTION]
    assert small.program("prefix").input_names == evo1.PREFIX_INPUTS == small.plan.frame_inputs
    assert small.program("prefix").output_names == evo1.PREFIX_OUTPUTS
    assert [int(small.plan.constants[f"t.{k:02d}"]) for k in range(3)] == [0, 333, 666]
    assert small.config["vlm_model_name"] == TINY_INTERNVL3 and "stand-in" in str(small.config["tokenizer"])
    assert small.config["image_tokens"] == 3 * 256 and small.config["embedder_text_layers"] == 1
    policy = lerobot_policy(small)
    embedder = policy.model.embedder.model
    assert {p.dtype for p in embedder.parameters()} == {torch.bfloat16}  # vlm_dtype
    assert {p.dtype for p in policy.model.action_head.parameters()} == {torch.float32}
    frame = small.make_frame(0)
    assert frame["observation.images.image"].shape == (1, 3, 448, 448)
    assert frame["noise"].shape == (1, 8 * 24) and float(frame["noise"].min()) >= 0


def test_evo1_small_has_no_data_dependent_ops(small: TracedPolicy) -> None:
    assert not data_dependent_ops(small)


@pytest.mark.parametrize("program", ["prefix", "denoise_step"])
def test_evo1_small_to_edge(small: TracedPolicy, program: str) -> None:
    check_to_edge(dataclasses.replace(small, programs=[small.program(program)]))


@pytest.mark.parametrize("frame_index", [0, 1])
def test_evo1_small_plan_equals_predict_action_chunk(small: TracedPolicy, frame_index: int) -> None:
    # The plan through the exported programs, through the eager modules and the policy's own
    # predict_action_chunk (its original, unpatched code given the frame's torch.rand draw) agree.
    action = check_plan(small, frame_index)
    assert action.shape == (1, 8, 24) and not action[..., 7:].any()  # masked to the 7 action dims


def test_evo1_static_prefix_is_checked(small: TracedPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix: Any = small.eager["prefix"]
    policy, frame = prefix.owner, small.make_frame(0)
    with torch.no_grad():
        static = prefix(*(frame[key] for key in evo1.PREFIX_INPUTS))
    evo1.check_static_prefix(policy, frame, static)
    shifted = (static[0] + 1e-3, *static[1:])
    with pytest.raises(SubstitutionMismatch, match="context_tokens"):
        evo1.check_static_prefix(policy, frame, shifted)


def test_evo1_static_rope_refuses_a_prompt_it_would_rescale(small: TracedPolicy) -> None:
    rotary = lerobot_policy(small).model.embedder.model.language_model.rotary_emb
    evo1.static_rotary_forward(rotary, int(rotary.original_max_seq_len))
    with pytest.raises(SubstitutionMismatch, match="dynamic RoPE"):
        evo1.static_rotary_forward(rotary, int(rotary.original_max_seq_len) + 1)


def test_evo1_from_a_saved_checkpoint(small: TracedPolicy, tiny_embedder: str, tmp_path: Path) -> None:
    lerobot_policy(small).save_pretrained(str(tmp_path))
    loaded = evo1.trace_evo1_with(seed=1, checkpoint=tmp_path)  # another seed: the weights are the file's
    assert loaded.config["embedder_dtype"] == "torch.bfloat16" and loaded.checkpoint == str(tmp_path)
    frame = small.make_frame(0)
    with torch.no_grad():
        expected = small.plan.run(small.eager, frame)["action"]
        assert torch.equal(loaded.plan.run(loaded.eager, frame)["action"], expected)


def test_evo1_traces_with_fake_weights(tiny_embedder: str) -> None:
    from worker.trace.fake_weights import building_fake, is_fake

    with building_fake():
        policy = evo1.trace_evo1_with(seed=0, checkpoint=None, overrides=OVERRIDES)
    assert is_fake(next(iter(policy.program("prefix").exported.state_dict.values())))
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    assert not data_dependent_ops(policy)


def test_evo1_unknown_embedder_is_a_one_line_cause() -> None:
    # The embedder asks for its tokenizer first, then for the model.
    with pytest.raises(MissingOfflineConfig, match="no offline tokenizer for 'someone/other-vlm'") as error:
        evo1.trace_evo1_with(seed=0, checkpoint=None, overrides={"vlm_model_name": "someone/other-vlm"})
    assert "\n" not in str(error.value)
