"""The pi0_fast adapter: built offline, traced into a prefix and a static decode step, equal to the policy.

PI0-FAST is built by LeRobot's own code from its default config with the offline tokenizer stand-ins;
the tests shrink only openpi's hard-coded Gemma and SigLIP sizes (as for pi0 and pi05) and the config's
chunk and decoding lengths, so the same adapter code runs in seconds. The plan run with the exported
programs equals the plan run with the eager modules, and both equal the tokens the policy's own
decoding loop (``sample_actions_fast_kv_cache``) picks, with and without an early stop at the
end-of-action marker; ``detokenize_actions`` of the plan's tokens is ``predict_action_chunk``'s chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_vla_adapters import timed

from worker.trace.policies.adapters import pi0_fast
from worker.trace.policies.base import TracedPolicy
from worker.trace.policies.offline import fast_tokenizer
from worker.trace.policies.offline.hub import MissingOfflineConfig
from worker.trace.policies.registry import get_adapter, supported

TINY_GEMMA = {
    "gemma_2b": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32},
    "gemma_300m": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32},
}
SMALL = {"chunk_size": 4, "n_action_steps": 4, "max_decoding_steps": 6, "tokenizer_max_length": 48}


@pytest.fixture
def tiny_paligemma(monkeypatch: pytest.MonkeyPatch) -> None:
    shrink_paligemma(monkeypatch)


@pytest.fixture(scope="module")
def traced() -> Iterator[TracedPolicy]:
    """The small policy traced once for the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        shrink_paligemma(monkeypatch)
        yield small()


def shrink_paligemma(monkeypatch: pytest.MonkeyPatch) -> None:
    """openpi's Gemma sizes and PaliGemma's SigLIP are in LeRobot's code, not its config: shrink them."""
    from lerobot.policies.pi0_fast import modeling_pi0_fast
    from transformers.models.auto import CONFIG_MAPPING

    def tiny_paligemma_config() -> Any:
        config = CONFIG_MAPPING["paligemma"]()
        config.vision_config.update({"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2})
        return config

    module: Any = modeling_pi0_fast
    gemma = module.GemmaConfig
    monkeypatch.setattr(module, "get_gemma_config", lambda variant: gemma(**TINY_GEMMA[variant]))
    monkeypatch.setattr(module, "CONFIG_MAPPING", {**CONFIG_MAPPING, "paligemma": tiny_paligemma_config})
    real = module.PaliGemmaForConditionalGenerationWithPiGemma

    def tiny_model(config: Any) -> Any:
        # LeRobot sets the projection to gemma_2b's width (2048) after building the config.
        config.vision_config.projection_dim = config.text_config.hidden_size
        return real(config=config)

    monkeypatch.setattr(module, "PaliGemmaForConditionalGenerationWithPiGemma", tiny_model)


def small(**overrides: Any) -> TracedPolicy:
    return timed(
        "pi0_fast (small)",
        lambda: pi0_fast.trace_pi0_fast_with(seed=0, checkpoint=None, overrides={**SMALL, **overrides}),
    )


def run_plan(policy: TracedPolicy, frame: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    exported = {program.name: program.exported.module() for program in policy.programs}
    with torch.no_grad():
        through_exported = policy.plan.run(exported, frame)
        through_eager = policy.plan.run(policy.eager, frame)
    torch.testing.assert_close(through_exported, through_eager, rtol=0, atol=0)
    return through_eager


def data_dependent_ops(policy: TracedPolicy) -> set[str]:
    suspects = ("rand", "normal", "multinomial", "aten.item", "scalar_dense", "nonzero", "masked_select")
    return {
        str(node.target)
        for program in policy.programs
        for node in program.exported.graph.nodes
        if node.op == "call_function" and any(s in str(node.target) for s in suspects)
    }


def lerobot_policy(policy: TracedPolicy) -> Any:
    return policy.eager["prefix"].policy  # type: ignore[attr-defined]


def count_forward_passes(policy: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """The policy's own tokens for ``batch`` and how many language-model passes its loop ran."""
    paligemma = policy.model.paligemma_with_expert
    real = paligemma.forward
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    paligemma.forward = counted
    try:
        with torch.no_grad():
            tokens = pi0_fast.policy_tokens(policy, batch)
    finally:
        del paligemma.forward
    return tokens, calls


# --- offline tokenizers ---------------------------------------------------------------------------------


def test_pi0_fast_is_registered() -> None:
    assert "pi0_fast" in supported()
    assert get_adapter("pi0_fast") is pi0_fast.trace_pi0_fast_with


def test_fast_stand_in_round_trips_its_tokens_and_quantised_actions() -> None:
    from scipy.fft import dct, idct

    processor = fast_tokenizer.fast_processor(fast_tokenizer.FAST_ACTION_TOKENIZER)
    assert (processor.scale, processor.vocab_size, processor.min_token) == (10, 2048, -354)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(2, 10, 7))
    tokens = processor(torch.from_numpy(actions))  # LeRobot passes a CPU tensor
    assert len(tokens) == 2 and all(len(item) == 70 for item in tokens)
    assert all(0 <= i < processor.vocab_size for item in tokens for i in item)
    for item in tokens:  # decode is the exact inverse of the BPE stand-in's encoding
        assert processor.bpe_tokenizer(processor.bpe_tokenizer.decode(item))["input_ids"] == item
    quantised = np.around(dct(actions, axis=1, norm="ortho") * processor.scale)
    expected = idct(quantised / processor.scale, axis=1, norm="ortho")
    np.testing.assert_array_equal(processor.decode(tokens), expected)
    np.testing.assert_allclose(processor.decode(tokens), actions, atol=0.1)  # lossy: scale 10
    assert processor.bpe_tokenizer.decode([5, 4096, 6]) == chr(5) + chr(6)  # unknown ids decode to nothing
    with pytest.raises(OverflowError):
        processor.bpe_tokenizer.decode([-1])


def test_lerobot_decodes_the_stand_in_tokens() -> None:
    from types import SimpleNamespace

    from lerobot.policies.pi0_fast.modeling_pi0_fast import PI0FastPolicy

    processor = fast_tokenizer.fast_processor(fast_tokenizer.FAST_ACTION_TOKENIZER)
    actions = np.random.default_rng(1).uniform(-1, 1, size=(1, 10, 7))
    tokens = processor(actions)
    owner: Any = SimpleNamespace(action_tokenizer=processor)  # all the method reads of the policy
    decoded = PI0FastPolicy.decode_actions_with_fast(owner, [torch.tensor(tokens[0])], 10, 7)
    np.testing.assert_allclose(decoded, processor.decode(tokens), rtol=0, atol=1e-12)


def test_paligemma_stand_in_has_the_vocabulary_pi0_fast_reads() -> None:
    tokenizer = fast_tokenizer.paligemma_tokenizer("google/paligemma-3b-pt-224")
    assert (tokenizer.vocab_size, tokenizer.bos_token_id) == (257152, 2)
    prefix = tokenizer.encode("Action: ", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(prefix) == ["Action", ":", "▁"]
    ids = [0, 1, 2, 108, 5, 255999, 256000, 257023, 257024, 257151, *prefix]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[6:10] == ["<loc0000>", "<loc1023>", "<seg000>", "<seg127>"]
    assert tokenizer.convert_tokens_to_ids(pieces) == ids and len(set(pieces)) == len(pieces)
    bar = tokenizer.convert_tokens_to_ids("|")
    assert 109 <= bar < 256000 and bar not in prefix
    with pytest.raises(MissingOfflineConfig, match="no offline tokenizer for 'someone/else'"):
        fast_tokenizer.paligemma_tokenizer("someone/else")


# --- the adapter ----------------------------------------------------------------------------------------


def test_pi0_fast_small_plan(traced: TracedPolicy) -> None:
    policy = traced
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "decode_step": 5}
    assert policy.substitutions == [pi0_fast.SUBSTITUTION]
    assert policy.plan.outputs == ("action_tokens",)
    assert [int(policy.plan.constants[f"t.{k:03d}"]) for k in range(1, 6)] == [1, 2, 3, 4, 5]
    assert "observation.state" not in policy.plan.frame_inputs  # the state is in the prompt
    prefix_length = 3 * 256 + 48 + 1  # three cameras of 16x16 patches, the prompt, BOS
    assert (policy.config["prefix_length"], policy.config["cache_length"]) == (
        prefix_length,
        prefix_length + 5,
    )
    assert policy.config["decode_steps"] == 5 and "stand-in" in str(policy.config["action_tokenizer"])
    assert not data_dependent_ops(policy)
    assert policy.eager_chunk is not None
    lerobot = lerobot_policy(policy)
    for index in (0, 1):
        frame = policy.make_frame(index)
        assert set(frame) == set(policy.plan.frame_inputs)
        tokens = run_plan(policy, frame)["action_tokens"]
        assert tokens.shape == (1, 6) and tokens.dtype == torch.long
        assert torch.equal(policy.eager_chunk(frame)["action_tokens"], tokens)
        # With random weights the loop never picks '|': it runs all its steps, as the plan does.
        own, passes = count_forward_passes(lerobot, frame)
        assert torch.equal(own, tokens) and passes == 6
    prompt = pi0_fast.prompt(torch.linspace(-0.999, 0.999, 32)[None], 32)
    head, state = prompt.removesuffix(";\n").split(", State: ")
    assert head == f"Task: {pi0_fast.TASK}" and [int(s) for s in state.split()][::31] == [0, 255]


@pytest.mark.parametrize("program", ["prefix", "decode_step"])
def test_pi0_fast_small_programs_are_core_aten(traced: TracedPolicy, program: str) -> None:
    """``to_edge`` (what the lower stage starts with) accepts each program."""
    from executorch.exir import to_edge

    to_edge(traced.program(program).exported)


def test_pi0_fast_plan_detokenizes_to_predict_action_chunk(traced: TracedPolicy) -> None:
    lerobot = lerobot_policy(traced)
    frame = traced.make_frame(0)
    tokens = run_plan(traced, frame)["action_tokens"]
    batch = {key: frame[key] for key in traced.plan.frame_inputs}
    # Random weights do not write "Action:" first: the default validation rejects the chunk upstream.
    with pytest.raises(AssertionError, match="does not start with"):
        lerobot.predict_action_chunk(batch)
    lerobot.config.validate_action_token_prefix = False
    try:
        with torch.no_grad():
            chunk = lerobot.predict_action_chunk(batch)
            expected = lerobot.detokenize_actions(tokens, action_horizon=4, action_dim=32)
            assert chunk.shape == (1, 4, 32) and torch.equal(chunk, expected)
            lerobot.reset()
            assert torch.equal(lerobot.select_action(batch), expected[:, 0])
    finally:
        lerobot.config.validate_action_token_prefix = True
        lerobot.reset()
    # detokenize_actions reads the FAST tokens between "Action: " and "|" through the stand-ins.
    tokenizer = lerobot._paligemma_tokenizer
    actions = np.random.default_rng(2).uniform(-1, 1, size=(1, 4, 32))
    fast = torch.tensor(lerobot.action_tokenizer(actions)[0])
    written = torch.cat(
        [
            torch.tensor(tokenizer.encode("Action: ", add_special_tokens=False)),
            257152 - 1 - 128 - fast,
            torch.tensor(tokenizer.convert_tokens_to_ids(["|", "<000777>"])),
        ]
    )
    decoded = lerobot.detokenize_actions(written[None], action_horizon=4, action_dim=32)
    assert decoded.abs().max() > 0.1
    np.testing.assert_allclose(decoded.numpy(), lerobot.action_tokenizer.decode([fast]), rtol=0, atol=1e-6)


@pytest.mark.usefixtures("tiny_paligemma")
def test_pi0_fast_early_stop_is_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    first = small()
    picked = run_plan(first, first.make_frame(0))["action_tokens"][0].tolist()
    monkeypatch.setitem(fast_tokenizer.ACTION_PIECES, "|", picked[2])  # the loop now stops there
    policy = small()
    assert policy.config["end_of_action_id"] == picked[2]
    frame = policy.make_frame(0)
    tokens = run_plan(policy, frame)["action_tokens"]
    stop = picked.index(picked[2])
    assert tokens[0].tolist() == picked[: stop + 1] + [0] * (5 - stop)
    own, passes = count_forward_passes(lerobot_policy(policy), frame)
    assert torch.equal(own, tokens) and passes == stop + 1
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "decode_step": 5}  # the plan runs every step


@pytest.mark.usefixtures("tiny_paligemma")
def test_pi0_fast_traces_with_fake_weights(tmp_path: Path) -> None:
    from worker.fake_programs import to_meta
    from worker.trace.fake_weights import building_fake, is_fake

    with building_fake():
        policy = small(max_decoding_steps=3)
    assert policy.plan.runs_per_chunk() == {"prefix": 1, "decode_step": 2}
    weights = next(iter(policy.program("decode_step").exported.state_dict.values()))
    assert is_fake(weights)
    assert not data_dependent_ops(policy)
    for program in policy.programs:  # the trace stage saves them with meta weights, the lower stage loads
        torch.export.save(to_meta(program.exported), tmp_path / f"{program.name}.pt2")
        loaded = torch.export.load(tmp_path / f"{program.name}.pt2")
        assert len(list(loaded.graph.nodes)) == len(list(program.exported.graph.nodes))


@pytest.mark.usefixtures("tiny_paligemma")
def test_pi0_fast_unknown_action_tokenizer_is_a_one_line_cause() -> None:
    with pytest.raises(RuntimeError, match="Failed to load required tokenizers") as raised:
        pi0_fast.trace_pi0_fast_with(
            seed=0, checkpoint=None, overrides={"action_tokenizer_name": "someone/other-fast"}
        )
    assert isinstance(raised.value.__cause__, MissingOfflineConfig)
    assert "no offline processor for 'someone/other-fast'" in str(raised.value.__cause__)


@pytest.mark.usefixtures("tiny_paligemma")
def test_pi0_fast_rejects_sampling() -> None:
    with pytest.raises(NotImplementedError, match="greedy decoding"):
        pi0_fast.trace_pi0_fast_with(seed=0, checkpoint=None, overrides={"temperature": 0.5})
