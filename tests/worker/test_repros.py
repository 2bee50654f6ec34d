"""Blocker groups, what-if program counts and verified repros through the engine's lower path
(``worker.engine.lower``: the lower stage's child process, the fold, the repro child) on a "policy" made
of tiny programs with the tracker's known Vulkan blockers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tracker_repros import Fn, Put

from coverfarm.result import Blocker, ResultDocument, StageResult, StageStatus
from worker.engine import lower
from worker.repros.script import repro_text
from worker.repros.verify import judge, run_repros

CONV_RUNS = 3  # the conv program runs 3 times per chunk: its heavy math counts 3 times

# name -> (module, example inputs, runs per chunk)
PROGRAMS: dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...], int]] = {
    "bf16_linear": (
        torch.nn.Linear(64, 64).to(torch.bfloat16),
        (torch.randn(4, 64, dtype=torch.bfloat16),),
        1,
    ),
    "conv_batch2": (torch.nn.Conv2d(3, 8, 3), (torch.randn(2, 3, 32, 32),), CONV_RUNS),
    "conv_batch1": (torch.nn.Conv2d(3, 8, 3), (torch.randn(1, 3, 32, 32),), 1),
    "elu": (torch.nn.ELU(), (torch.randn(1, 16, 32),), 1),
    "mish": (torch.nn.Mish(), (torch.randn(1, 16, 32),), 1),
    "var": (Fn(lambda t: t.var(dim=-1, keepdim=True)), (torch.randn(1, 16, 32),), 1),
    "index_put": (Put(), (torch.randn(8, 32), torch.tensor([1, 3])), 1),
}

BF16_MACS = 4 * 64 * 64
CONV_MACS = 2 * 8 * 30 * 30 * (3 * 3 * 3)  # batch x out channels x output pixels x (in x kernel)
EXPECTED = {
    ("aten.addmm.default", "dtype not supported"): (1, BF16_MACS),
    ("aten.convolution.default", "op args not supported"): (1, CONV_RUNS * CONV_MACS),
    ("aten.elu.default", "no operator implementation"): (1, 0),
    ("aten.log1p.default", "no operator implementation"): (1, 0),
    ("aten.var.correction", "no operator implementation"): (1, 0),
    ("aten.index_put.default", "no operator implementation"): (1, 0),
}


def lower_tiny(
    tmp_path_factory: pytest.TempPathFactory,
    backend: str,
    programs: dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...], int]],
) -> ResultDocument:
    """Trace the programs as a policy's trace stage would, then run the engine's lower path on them."""
    trace_dir = tmp_path_factory.mktemp("trace")
    entries = []
    for name, (module, inputs, runs) in programs.items():
        torch.export.save(torch.export.export(module.eval(), inputs), trace_dir / f"{name}.pt2")
        entries.append({"name": name, "pt2": f"{name}.pt2", "runs_per_chunk": runs})
    manifest = {"programs": entries}
    (trace_dir / "trace.json").write_text(json.dumps(manifest))
    doc = ResultDocument(policy="tiny", backend=backend, trace=StageResult(status=StageStatus.OK))
    work = tmp_path_factory.mktemp("work")
    lower(doc, manifest, trace_dir, work, lambda _m: None, tmp_path_factory.mktemp("repro-cache"))
    return doc


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory) -> ResultDocument:
    return lower_tiny(tmp_path_factory, "vulkan", PROGRAMS)


def by_key(doc: ResultDocument) -> dict[tuple[str, str], Blocker]:
    return {(b.op, b.reason): b for b in doc.blockers}


def test_groups_counts_and_heavy_math(lowered: ResultDocument) -> None:
    assert lowered.partition.status is StageStatus.OK, lowered.partition.error
    groups = by_key(lowered)
    assert {key: (b.count, b.macs) for key, b in groups.items()} == EXPECTED
    # Heavy math: the bf16 matmul, the batch-2 conv (3 runs) and the batch-1 conv, which Vulkan takes.
    assert lowered.heavy_macs.total == BF16_MACS + CONV_RUNS * CONV_MACS + CONV_MACS // 2
    assert lowered.heavy_macs.on_backend == CONV_MACS // 2
    left = sum(b.macs for b in lowered.blockers)
    assert left == lowered.heavy_macs.total - lowered.heavy_macs.on_backend
    # Sorted as the tracker sorts: heavy math lost first.
    assert [b.op for b in lowered.blockers[:2]] == ["aten.convolution.default", "aten.addmm.default"]


def test_what_if_counts_programs_with_the_group_supported(lowered: ResultDocument) -> None:
    groups = by_key(lowered)
    count = lowered.programs.count
    assert count is not None
    # Mish's log1p sits between two Vulkan programs: supported, they become one.
    assert groups[("aten.log1p.default", "no operator implementation")].programs_if_supported == count - 1
    # A lone op on the CPU, supported, becomes one program of its own.
    for op in ("aten.elu.default", "aten.var.correction", "aten.convolution.default"):
        blocker = next(b for b in lowered.blockers if b.op == op)
        assert blocker.programs_if_supported == count + 1, op


def test_every_generated_repro_runs_and_reproduces_its_reason(lowered: ResultDocument) -> None:
    for blocker in lowered.blockers:
        assert blocker.repro is not None, (blocker.op, blocker.repro_note)
        repro = blocker.repro
        assert repro.error is None, (blocker.op, repro.error, repro.output[-2000:])
        assert repro.reproduced, (blocker.op, blocker.reason, repro.reason_seen, repro.output[-2000:])
        assert repro.reason_seen == blocker.reason and repro.delegated is False
        assert blocker.op in repro.text and "VulkanPartitioner()" in repro.text
        assert f"refuses it: {blocker.reason}" in repro.output
        # Each repro's output is its own: a logging handler set up during one does not leak into the next.
        assert f"Due to [{blocker.reason}]" in repro.output and "Logging error" not in repro.output
    conv = by_key(lowered)[("aten.convolution.default", "op args not supported")]
    assert conv.example is not None
    assert conv.example["args"][0] == {
        "kind": "tensor", "shape": [2, 3, 32, 32], "dtype": "float32", "source": "input"
    }  # fmt: skip
    assert conv.example["args"][1]["source"] == "param"
    stored = ResultDocument.model_validate_json(lowered.model_dump_json())
    assert stored.blockers == lowered.blockers


def test_a_wrong_repro_is_not_marked_ready(lowered: ResultDocument, tmp_path: Path) -> None:
    bf16 = by_key(lowered)[("aten.addmm.default", "dtype not supported")]
    assert bf16.example is not None
    # The same matmul in float32: Vulkan takes it, so it does not show "dtype not supported".
    as_float = json.loads(json.dumps(bf16.example).replace('"bfloat16"', '"float32"'))
    wrong = repro_text(as_float, "vulkan", bf16.reason)
    # A repro that shows a different reason than its group's.
    elu = by_key(lowered)[("aten.elu.default", "no operator implementation")]
    assert elu.example is not None
    mislabelled = repro_text(elu.example, "vulkan", "dtype not supported")
    outcomes = run_repros({"wrong": wrong, "mislabelled": mislabelled}, tmp_path, tmp_path / "cache", 180)
    float_repro = judge(wrong, outcomes["wrong"], bf16.reason)
    assert float_repro.error is None, float_repro.output
    assert float_repro.delegated is True and float_repro.reason_seen is None
    assert not float_repro.reproduced
    elu_repro = judge(mislabelled, outcomes["mislabelled"], "dtype not supported")
    assert elu_repro.reason_seen == "no operator implementation" and not elu_repro.reproduced
    # The second time it comes from the cache, and the stored repro is the same, field for field: a
    # document never depends on which process filled the cache first.
    again = run_repros({"wrong": wrong}, tmp_path / "again", tmp_path / "cache", 180)
    assert again["wrong"].cached and not outcomes["wrong"].cached
    assert judge(wrong, again["wrong"], bf16.reason) == float_repro


def test_xnnpack_repros_show_its_own_reasons(tmp_path_factory: pytest.TempPathFactory) -> None:
    doc = lower_tiny(tmp_path_factory, "xnnpack", {"var": PROGRAMS["var"]})
    assert doc.partition.status is StageStatus.OK, doc.partition.error
    [var] = [b for b in doc.blockers if b.op == "aten.var.correction"]
    assert var.repro is not None and var.repro.error is None, var.repro
    assert "XnnpackPartitioner()" in var.repro.text
    assert var.repro.reproduced and var.repro.reason_seen == var.reason
    assert var.programs_if_supported is None  # XNNPACK does not partition through the capability check


class LinearAtan(torch.nn.Module):
    """A linear, then atan (a core ATen op OpenVINO's PyTorch frontend has no conversion for)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.atan(self.linear(x))


def test_openvino_repros_show_its_own_reasons(tmp_path_factory: pytest.TempPathFactory) -> None:
    doc = lower_tiny(tmp_path_factory, "openvino", {"atan": (LinearAtan(), (torch.randn(4, 8),), 1)})
    assert doc.partition.status is StageStatus.OK, doc.partition.error
    [atan] = doc.blockers
    # OpenvinoOperatorsSupport's own words, printed where it refuses the node.
    assert (atan.op, atan.reason) == ("aten.atan.default", "Op not supported:  torch.ops.aten.atan.default")
    assert atan.repro is not None and atan.repro.error is None, atan.repro
    assert "OpenvinoPartitioner([])" in atan.repro.text
    assert atan.repro.reproduced and atan.repro.reason_seen == atan.reason
    # OpenVINO partitions through the capability check: the what-if is replayed as for Vulkan.
    assert atan.programs_if_supported == 1


class LinearArgmax(torch.nn.Module):
    """A linear, then argmax (TOSA's ARGMAX gives int32 where aten's gives int64: VGF refuses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self.linear(x), dim=-1)


class IntegerIndex(torch.nn.Module):
    """Rows picked by an index computed at run time (int64): VGF's check names the index's node."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[torch.argsort(x[:, 0])]


def test_vgf_repros_show_its_own_reasons(tmp_path_factory: pytest.TempPathFactory) -> None:
    programs = {
        "argmax": (LinearArgmax(), (torch.randn(4, 8),), 1),
        "index": (IntegerIndex(), (torch.randn(4, 8),), 1),
    }
    doc = lower_tiny(tmp_path_factory, "vgf", programs)
    assert doc.partition.status is StageStatus.OK, doc.partition.error
    assert doc.export.status is StageStatus.OK, doc.export.error
    groups = {b.op: b for b in doc.blockers}
    argmax, index = groups["aten.argmax.default"], groups["aten.index.Tensor"]
    # The check names the index's node (aten_argsort_default here, x1 in the repro): both read as its
    # position, so the repro shows the group's reason.
    assert index.reason == "Non-constant int64 input <input 1>"
    assert index.repro is not None and index.repro.reproduced, index.repro
    # What the TOSA support check told the partitioner's WhyNoPartitionReporter.
    assert (argmax.op, argmax.reason) == (
        "aten.argmax.default",
        "TOSA ARGMAX produces int32 but aten.argmax returns int64.",
    )
    assert argmax.repro is not None and argmax.repro.error is None, argmax.repro
    assert 'VgfPartitioner(VgfCompileSpec("TOSA-1.0+FP"))' in argmax.repro.text
    assert argmax.repro.reproduced and argmax.repro.reason_seen == argmax.reason
    # VGF partitions through the capability check: the what-if is replayed as for Vulkan (the argmax
    # would join its linear's program: no program fewer, none more).
    assert doc.programs.count is not None and argmax.programs_if_supported == doc.programs.count
