"""The vision-language-action adapters: built offline, traced, and their chunk plans equal the policy.

Each policy is built by LeRobot's own code from its default config with the offline backbone configs
and tokenizer stand-ins; the smoke tests shrink only what the policy's config (or, for openpi's
hard-coded Gemma sizes, its one size table) allows, so the same adapter code runs in seconds. For each:
the plan run with the exported programs equals the plan run with the eager modules on frame 0, and the
policy's own ``predict_action_chunk`` (fed the same noise) equals the plan's output, which checks the
cache hand-over between the programs, the Euler (or X-VLA) update inside the step, and the recorded
substitutions.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from worker.trace.policies.adapters import groot, openpi, smolvla, xvla
from worker.trace.policies.adapters._core_aten import EMPTY_LIKE_SUBSTITUTION
from worker.trace.policies.adapters._flow import euler_times
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import cosmos_reason2, florence2, smolvlm2
from worker.trace.policies.offline.hub import MissingOfflineConfig, known
from worker.trace.policies.offline.paligemma import TOKENIZER as PALIGEMMA_TOKENIZER
from worker.trace.policies.offline.tokens import StandInTokenizer
from worker.trace.policies.registry import get_adapter, supported


def timed(label: str, trace: Callable[[], TracedPolicy]) -> TracedPolicy:
    start = time.monotonic()
    policy = trace()
    print(f"\ntrace {label}: {time.monotonic() - start:.1f} s")
    return policy


def check_plan(
    policy: TracedPolicy, frame_index: int = 0, *, exact_eager_chunk: bool = False
) -> torch.Tensor:
    """The plan through the exported programs equals it through the eager modules, and the policy's own
    chunk (``eager_chunk``) equals both: within float tolerance, or bit for bit with ``exact_eager_chunk``."""
    frame = policy.make_frame(frame_index)
    assert set(frame) == set(policy.plan.frame_inputs)
    for program in policy.programs:
        signature = program.exported.graph_signature
        assert len(signature.user_inputs) == len(program.input_names)
        assert len(signature.user_outputs) == len(program.output_names)
    exported = {program.name: program.exported.module() for program in policy.programs}
    with torch.no_grad():
        through_exported = policy.plan.run(exported, frame)
        through_eager = policy.plan.run(policy.eager, frame)
    torch.testing.assert_close(through_exported, through_eager)
    assert policy.eager_chunk is not None
    tolerance = {"rtol": 0.0, "atol": 0.0} if exact_eager_chunk else {}
    torch.testing.assert_close(policy.eager_chunk(frame), through_eager, **tolerance)
    return through_eager["action"]


def check_to_edge(policy: TracedPolicy) -> None:
    """Every program is Core ATen: ``to_edge`` (what the lower stage starts with) accepts it."""
    from executorch.exir import to_edge

    for program in policy.programs:
        to_edge(program.exported)


def data_dependent_ops(policy: TracedPolicy, *also: str) -> set[str]:
    """The programs' random, data-dependent and ``also`` ops (targets containing any of those names)."""
    suspects = ("rand", "normal", "multinomial", "aten.item", "scalar_dense", "nonzero", *also)
    return {
        str(node.target)
        for program in policy.programs
        for node in program.exported.graph.nodes
        if node.op == "call_function" and any(s in str(node.target) for s in suspects)
    }


# --- offline data ---------------------------------------------------------------------------------------


def test_the_vla_names_are_registered() -> None:
    assert {"smolvla", "xvla", "pi0", "pi05", "groot"} <= set(supported())


def test_stand_in_tokens_have_the_vocabulary_and_padded_length() -> None:
    ids, mask = PALIGEMMA_TOKENIZER("Pick up the cube", 48)
    assert ids.shape == mask.shape == (1, 48) and ids.dtype == torch.long and mask.dtype == torch.bool
    assert ids[0, 0] == 2 and ids[0, 5] == 108  # <bos>, four words, "\n"
    assert mask[0, :6].all() and not mask[0, 6:].any() and (ids[0, 6:] == 0).all()
    assert ((ids >= 0) & (ids < 257152)).all()
    again, _ = PALIGEMMA_TOKENIZER("pick up the cube", 48)
    assert torch.equal(ids, again)  # stable, case-folded
    other, _ = PALIGEMMA_TOKENIZER("pick up the ball", 48)
    assert not torch.equal(ids, other)
    truncated, truncated_mask = PALIGEMMA_TOKENIZER("a b c d e f g", 4)
    assert truncated.tolist() == [[2, *PALIGEMMA_TOKENIZER.word_ids("a b")[:2], 108]] and truncated_mask.all()


def test_stand_in_tokenizer_rejects_ids_outside_its_vocabulary() -> None:
    with pytest.raises(ValueError, match="outside its vocabulary"):
        StandInTokenizer(checkpoint="x", vocab_size=10, pad=0, first=1, last=11)


def test_a_missing_offline_config_names_what_is_known() -> None:
    with pytest.raises(
        MissingOfflineConfig, match=r"no offline config for 'someone/else'; known: \['HuggingFace"
    ):
        known(smolvlm2.CONFIGS, "someone/else")


def test_smolvlm2_config_builds_the_published_sizes() -> None:
    from transformers import SmolVLMConfig

    config: Any = SmolVLMConfig(**smolvlm2.SMOLVLM2_500M_CONFIG)
    assert (config.text_config.hidden_size, config.text_config.num_hidden_layers) == (960, 32)
    assert (config.vision_config.image_size, config.vision_config.patch_size, config.scale_factor) == (
        512,
        16,
        4,
    )
    assert config.text_config.vocab_size == smolvlm2.TOKENIZERS[smolvlm2.SMOLVLM2_500M].vocab_size


def test_euler_times_are_euler_integrates() -> None:
    assert [round(float(t), 6) for t in euler_times(4)] == [1.0, 0.75, 0.5, 0.25]


# --- smolvla --------------------------------------------------------------------------------------------

TINY_SMOLVLM = "test/tiny-smolvlm"


@pytest.fixture
def tiny_smolvlm(monkeypatch: pytest.MonkeyPatch) -> str:
    config = copy.deepcopy(smolvlm2.SMOLVLM2_500M_CONFIG)
    config["text_config"].update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=4,
    )
    config["vision_config"].update(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=64
    )
    monkeypatch.setitem(smolvlm2.CONFIGS, TINY_SMOLVLM, config)
    monkeypatch.setitem(smolvlm2.TOKENIZERS, TINY_SMOLVLM, smolvlm2.TOKENIZERS[smolvlm2.SMOLVLM2_500M])
    return TINY_SMOLVLM


def test_smolvla_small(tiny_smolvlm: str) -> None:
    overrides = {
        "vlm_model_name": tiny_smolvlm,
        "num_vlm_layers": 4,
        "num_steps": 3,
        "chunk_size": 8,
        "n_action_steps": 8,
        "resize_imgs_with_padding": (64, 64),
    }
    policy = timed(
        "smolvla (small)", lambda: smolvla.trace_smolvla_with(seed=0, checkpoint=None, overrides=overrides)
    )
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    assert policy.substitutions == [smolvla.SUBSTITUTION, EMPTY_LIKE_SUBSTITUTION]  # apply_rope's empty_like
    assert not data_dependent_ops(policy)
    check_to_edge(policy)
    assert check_plan(policy).shape == (1, 8, 6)
    assert policy.config["vlm_model_name"] == tiny_smolvlm and "stand-in" in str(policy.config["tokenizer"])


def test_smolvla_static_position_ids_are_checked(tiny_smolvlm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.trace.policies.adapters._randomness import SubstitutionMismatch

    real = smolvla._static_embeddings_forward

    def shifted(embeddings: Any) -> Any:
        forward = real(embeddings)
        return lambda pixels, mask: forward(pixels, mask) + 1e-3

    monkeypatch.setattr(smolvla, "_static_embeddings_forward", shifted)
    overrides = {"vlm_model_name": tiny_smolvlm, "num_vlm_layers": 4, "resize_imgs_with_padding": (64, 64)}
    with pytest.raises(SubstitutionMismatch, match=r"observation\.image"):
        smolvla.trace_smolvla_with(seed=0, checkpoint=None, overrides=overrides)


def test_smolvla_unknown_backbone_is_a_one_line_cause() -> None:
    with pytest.raises(MissingOfflineConfig, match="no offline config for 'someone/other-vlm'"):
        smolvla.trace_smolvla_with(seed=0, checkpoint=None, overrides={"vlm_model_name": "someone/other-vlm"})


@pytest.mark.real_policy
def test_smolvla_default_builds_offline_and_traces() -> None:
    policy = timed("smolvla", lambda: get_adapter("smolvla")(seed=0, checkpoint=None))
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 10}
    keys = policy.program("prefix").exported.graph_signature.user_outputs
    assert len(keys) == 3


# --- xvla -----------------------------------------------------------------------------------------------


def tiny_florence() -> dict[str, Any]:
    config = copy.deepcopy(florence2.FLORENCE2_LARGE_CONFIG)
    config["vision_config"].update(
        dim_embed=[32, 64, 64, 128],
        num_heads=[2, 2, 4, 4],
        num_groups=[2, 2, 4, 4],
        depths=[1, 1, 1, 1],
        projection_dim=64,
    )
    config["text_config"].update(
        d_model=64,
        encoder_layers=1,
        decoder_layers=1,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
    )
    return config


def test_xvla_small() -> None:
    overrides = {
        "florence_config": tiny_florence(),
        "hidden_size": 64,
        "depth": 2,
        "num_heads": 2,
        "num_denoising_steps": 3,
    }
    policy = timed("xvla (small)", lambda: xvla.trace_xvla_with(seed=0, checkpoint=None, overrides=overrides))
    assert policy.plan.runs_per_chunk() == {"vlm": 1, "denoise_step": 3}
    assert policy.substitutions == [xvla.SUBSTITUTION]
    assert not data_dependent_ops(policy)
    check_to_edge(policy)
    assert check_plan(policy).shape == (1, 32, 20)
    torch.testing.assert_close(policy.plan.constants["t.00"], torch.tensor([1.0]))


def test_xvla_without_the_offline_backbone_fails_as_upstream_does() -> None:
    with pytest.raises(ValueError, match="vision_config is required"):
        xvla.trace_xvla_with(seed=0, checkpoint=None, overrides={"florence_config": {}})


# --- pi0 and pi05 ---------------------------------------------------------------------------------------

TINY_GEMMA = {
    "gemma_2b": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32},
    "gemma_300m": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32},
}


@pytest.fixture
def tiny_openpi(monkeypatch: pytest.MonkeyPatch) -> None:
    """openpi's Gemma sizes and PaliGemma's SigLIP are in LeRobot's code, not its config: shrink them."""
    from lerobot.policies.pi0 import modeling_pi0
    from lerobot.policies.pi05 import modeling_pi05
    from transformers.models.auto import CONFIG_MAPPING

    def tiny_paligemma_config() -> Any:
        config = CONFIG_MAPPING["paligemma"]()
        config.vision_config.update({"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2})
        return config

    for module in (modeling_pi0, modeling_pi05):
        gemma = module.GemmaConfig
        monkeypatch.setattr(
            module, "get_gemma_config", lambda variant, gemma=gemma: gemma(**TINY_GEMMA[variant])
        )
        monkeypatch.setattr(module, "CONFIG_MAPPING", {**CONFIG_MAPPING, "paligemma": tiny_paligemma_config})
        real = module.PaliGemmaForConditionalGenerationWithPiGemma

        def tiny_paligemma(config: Any, real: Any = real) -> Any:
            # LeRobot sets the projection to gemma_2b's width (2048) after building the config.
            config.vision_config.projection_dim = config.text_config.hidden_size
            return real(config=config)

        monkeypatch.setattr(module, "PaliGemmaForConditionalGenerationWithPiGemma", tiny_paligemma)


@pytest.mark.parametrize("name", ["pi0", "pi05"])
@pytest.mark.usefixtures("tiny_openpi")
def test_openpi_small(name: str) -> None:
    overrides = {"num_inference_steps": 3, "chunk_size": 10, "n_action_steps": 10}
    policy = timed(
        f"{name} (small)", lambda: openpi.trace_openpi(name, seed=0, checkpoint=None, overrides=overrides)
    )
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 3}
    prefix = policy.program("prefix")
    assert ("state" in prefix.output_names) == (name == "pi0")
    assert ("observation.state" in prefix.input_names) == (name == "pi0")
    assert not data_dependent_ops(policy)
    check_to_edge(policy)
    assert check_plan(policy).shape == (1, 10, 32)


@pytest.mark.usefixtures("tiny_openpi")
def test_openpi_small_builds_with_fake_weights(tmp_path: Path) -> None:
    # SigLIP's truncated-normal initialisation cannot run on fake tensors as torch writes it
    # (worker.trace.fake_weights.building_fake): the full-size pi0 and pi05 are built with fake weights.
    from worker.fake_programs import from_meta, to_meta
    from worker.trace.fake_weights import building_fake, is_fake

    overrides = {"num_inference_steps": 2, "chunk_size": 10, "n_action_steps": 10}
    with building_fake():
        policy = openpi.trace_openpi("pi0", seed=0, checkpoint=None, overrides=overrides)
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "denoise_step": 2}
    assert all(is_fake(value) for value in policy.program("prefix").exported.state_dict.values())
    for program in policy.programs:  # as the trace stage saves them and the lower stage loads them
        torch.export.save(to_meta(program.exported), tmp_path / f"{program.name}.pt2")
        loaded = from_meta(torch.export.load(tmp_path / f"{program.name}.pt2"))
        assert set(loaded.state_dict) == set(program.exported.state_dict)


def test_openpi_rejects_other_types(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an openpi flow-matching policy: 'act'"):
        openpi.trace_openpi("act", seed=0, checkpoint=None)


# --- groot ----------------------------------------------------------------------------------------------

TINY_GR00T: dict[str, Any] = {
    "select_layer": 1,
    "backbone_embedding_dim": 64,
    "hidden_size": 32,
    "input_embedding_dim": 48,
    "action_horizon": 16,
    "diffusion_model_cfg": {
        "positional_embeddings": None,
        "num_layers": 4,
        "num_attention_heads": 2,
        "attention_head_dim": 24,
        "norm_type": "ada_norm",
        "dropout": 0.2,
        "final_dropout": True,
        "output_dim": 32,
        "interleave_self_attention": True,
    },
    "vl_self_attention_cfg": {
        "positional_embeddings": None,
        "num_layers": 1,
        "num_attention_heads": 2,
        "attention_head_dim": 32,
        "dropout": 0.2,
        "final_dropout": True,
    },
}


@pytest.fixture
def tiny_cosmos(monkeypatch: pytest.MonkeyPatch) -> None:
    """LeRobot builds Cosmos-Reason2-2B's Qwen3-VL from a hard-coded config function: shrink it."""
    from lerobot.policies.groot import groot_n1_7

    real = groot_n1_7._cosmos_reason2_qwen3_vl_config

    def tiny_config() -> Any:
        config = real()
        config.text_config.update(
            {
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "num_hidden_layers": 2,
            }
        )
        config.text_config.rope_parameters["mrope_section"] = [4, 2, 2]  # head_dim 16 / 2
        config.vision_config.update(
            {
                "depth": 1,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "out_hidden_size": 64,
                "deepstack_visual_indexes": [0],
            }
        )
        return config

    monkeypatch.setattr(groot_n1_7, "_cosmos_reason2_qwen3_vl_config", tiny_config)


def test_cosmos_stand_in_processor_renders_the_qwen3_vl_prompt() -> None:
    processor = cosmos_reason2.StandInQwen3VLProcessor()
    image = torch.zeros((3, 256, 256), dtype=torch.uint8)
    conversation = [
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": "pick up the cube"}],
        }
    ]
    text = processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=False)
    assert text == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>pick up the cube<|im_end|>\n"
    encoded = processor(text=[text], images=[image], return_tensors="pt", padding=True)
    ids = encoded["input_ids"][0].tolist()
    assert ids[:4] == [151644, 872, 198, 151652]  # <|im_start|> user \n <|vision_start|>
    assert ids[4:68] == [151655] * 64 and ids[68] == 151653  # 16x16 patches, 2x2 merged
    assert ids[-2:] == [151645, 198] and len(ids) == 3 + 66 + 4 + 2
    assert all(256 <= i < 151643 for i in ids[69:73])
    assert encoded["image_grid_thw"].tolist() == [[1, 16, 16]]
    assert encoded["pixel_values"].shape == (256, 3 * 2 * 16 * 16)
    assert encoded["mm_token_type_ids"][0].sum() == 64 and encoded["attention_mask"].all()


def test_groot_discretized_times_are_get_actions() -> None:
    assert groot.discretized_times(4, 1000) == [0, 250, 500, 750]


@pytest.mark.usefixtures("tiny_cosmos")
def test_groot_small() -> None:
    from executorch.exir import to_edge

    overrides = {"chunk_size": 16, "n_action_steps": 16}
    policy = timed(
        "groot (small)",
        lambda: groot.trace_groot_with(
            seed=0, checkpoint=None, overrides=overrides, model_overrides=TINY_GR00T
        ),
    )
    assert policy.plan.runs_per_chunk() == {"backbone": 1, "denoise_step": 4}
    assert policy.substitutions == [groot.SUBSTITUTION]
    assert [int(policy.plan.constants[f"t.{k:02d}"]) for k in range(4)] == [0, 250, 500, 750]
    assert policy.program("backbone").input_names == groot.PROGRAM_INPUTS
    assert policy.config["image_grid_thw"] == [[1, 16, 16], [1, 16, 16]]
    assert "stand-in" in str(policy.config["processor"])
    # The programs run under the policy's bf16 autocast; after to_edge's decompositions (what the lower
    # stage partitions) they are Core ATen with no data-dependent op.
    suspects = ("rand", "normal", "multinomial", "aten.item", "scalar_dense", "nonzero", "masked_select")
    for program in policy.programs:
        edge = to_edge(program.exported).exported_program()
        targets = {  # op names, without the edge dialect's schema
            str(node.target).split(">:")[0] for node in edge.graph.nodes if node.op == "call_function"
        }
        assert not {t for t in targets if any(s in t for s in suspects)}, program.name
        assert torch.bfloat16 in {getattr(node.meta.get("val"), "dtype", None) for node in edge.graph.nodes}
    assert check_plan(policy).shape == (1, 16, 7)


def test_groot_unknown_base_model_is_a_one_line_cause() -> None:
    with pytest.raises(MissingOfflineConfig, match="no offline config for 'someone/other-groot'"):
        groot.trace_groot_with(seed=0, checkpoint=None, overrides={"base_model_path": "someone/other-groot"})
