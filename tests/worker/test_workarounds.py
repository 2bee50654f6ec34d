"""Lowering workarounds: each rewrite on real ExecuTorch lowerings (what the Vulkan partitioner is
handed, what the program computes on the runtime), the lower stage's flag, and the CLI's one-line
refusals."""

from __future__ import annotations

import operator
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.pass_manager import ExportedProgramPassManager
from executorch.runtime import Runtime

from coverfarm.workarounds import WORKAROUNDS
from coverfarm_cli import main
from worker.lower.workarounds import REWRITES, rewrites

ROOT = Path(__file__).resolve().parents[2]


class Norms(torch.nn.Module):
    """diffusion's Conv1dBlock pattern (conv1d, GroupNorm on (N, C, L), Mish), a second 3-D GroupNorm
    whose output is a program output, and a GroupNorm on a 4-D input, which the rewrite leaves alone."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same weights in every instance: eager's and the lowered one's
        self.conv = torch.nn.Conv1d(2, 8, 3, padding=1)
        self.norm = torch.nn.GroupNorm(4, 8)
        self.out_norm = torch.nn.GroupNorm(2, 8)
        self.image_norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x: torch.Tensor, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.norm(self.conv(x))
        return torch.nn.functional.mish(y), self.out_norm(y), self.image_norm(image)


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, 2, 16, generator=generator), torch.randn(1, 4, 5, 6, generator=generator)


def lowered(names: tuple[str, ...], vulkan: bool) -> EdgeProgramManager:
    program = torch.export.export(Norms().eval(), inputs())
    passes = ExportedProgramPassManager(rewrites(names)) if names else None
    partitioners = [VulkanPartitioner()] if vulkan else []
    return to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioners)


def norm_input_ranks(edge: EdgeProgramManager) -> list[int]:
    """The rank of each native_group_norm's input the Vulkan partitioner took, over its delegates."""
    graph_module = edge.exported_program().graph_module
    ranks = []
    for name, child in graph_module.named_children():
        if not name.startswith("lowered_module"):
            continue
        for node in child.original_module.graph.nodes:
            if node.op == "call_function" and "native_group_norm" in str(node.target):
                ranks.append(node.args[0].meta["val"].dim())
    return sorted(ranks)


def test_group_norm_4d_hands_vulkan_each_3d_group_norm_as_4d() -> None:
    # Stock: Vulkan takes the two 3-D norms as they are (the input its kernel writes zeros for).
    assert norm_input_ranks(lowered((), vulkan=True)) == [3, 3, 4]
    assert norm_input_ranks(lowered(("group_norm_4d",), vulkan=True)) == [4, 4, 4]


def test_group_norm_4d_computes_what_eager_computes_on_the_runtime() -> None:
    """The rewritten program, run on the wheel's portable kernels (no delegate), gives eager's outputs,
    the one that is now a view of the rewritten norm included; the 4-D norm's node is untouched."""
    edge = lowered(("group_norm_4d",), vulkan=False)
    graph = edge.exported_program().graph
    norms = [n for n in graph.nodes if "native_group_norm" in str(n.target)]
    views = [n for n in graph.nodes if "view_copy" in str(n.target)]
    assert len(norms) == 3 and len(views) == 4  # one before and one after each 3-D norm
    outputs = next(n for n in graph.nodes if n.op == "output").args[0]
    assert "view_copy" in str(outputs[1].target) and outputs[2].target is operator.getitem
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    got = program.load_method("forward").execute(list(inputs()))
    with torch.no_grad():
        expected = Norms().eval()(*inputs())
    for device, eager in zip(got, expected, strict=True):
        assert device.shape == eager.shape
        torch.testing.assert_close(device, eager, rtol=1e-5, atol=1e-5)


class DiTPieces(torch.nn.Module):
    """multi_task_dit's two Vulkan refusals: a LayerNorm without affine parameters (its DiT blocks'), one
    with a weight and no bias, and a logical_not of a bool mask."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 8)
        self.plain = torch.nn.LayerNorm(8, elementwise_affine=False)
        self.no_bias = torch.nn.LayerNorm(8, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.plain(self.linear(x))
        keep = torch.logical_not(mask).unsqueeze(-1)
        return torch.where(keep, y, torch.zeros_like(y)), self.no_bias(y)


DIT_INPUTS = (
    torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1)),
    torch.tensor([[True, False] * 2]),
)
DIT_NAMES = ("layer_norm_affine", "logical_not_as_bitwise_not")


def delegated(edge: EdgeProgramManager) -> list[torch.fx.Node]:
    return [
        node
        for name, child in edge.exported_program().graph_module.named_children()
        if name.startswith("lowered_module")
        for node in child.original_module.graph.nodes
        if node.op == "call_function"
    ]


def test_layer_norm_affine_and_logical_not_hand_vulkan_what_its_runtime_runs() -> None:
    def lower(names: tuple[str, ...]) -> EdgeProgramManager:
        passes = ExportedProgramPassManager(rewrites(names)) if names else None
        program = torch.export.export(DiTPieces().eval(), DIT_INPUTS)
        return to_edge_transform_and_lower(
            program, transform_passes=passes, partitioner=[VulkanPartitioner()]
        )

    def what(edge: EdgeProgramManager) -> tuple[list[str], list[tuple[bool, bool]]]:
        nodes = delegated(edge)
        names = sorted(str(n.target).split(".")[-2] for n in nodes if "_not" in str(n.target))
        norms = [
            (n.args[2] is None, n.args[3] is None) for n in nodes if "native_layer_norm" in str(n.target)
        ]
        return names, norms

    # Stock: Vulkan takes what its runtime refuses at load (no weight; logical_not has no kernel).
    assert what(lower(())) == (["logical_not"], [(True, True), (False, True)])
    assert what(lower(DIT_NAMES)) == (["bitwise_not"], [(False, False), (False, False)])


def test_layer_norm_affine_and_logical_not_compute_what_eager_computes_on_the_runtime() -> None:
    module = DiTPieces().eval()
    passes = ExportedProgramPassManager(rewrites(DIT_NAMES))
    edge = to_edge_transform_and_lower(torch.export.export(module, DIT_INPUTS), transform_passes=passes)
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    got = program.load_method("forward").execute(list(DIT_INPUTS))
    with torch.no_grad():
        expected = module(*DIT_INPUTS)
    for device, eager in zip(got, expected, strict=True):
        torch.testing.assert_close(device, eager, rtol=1e-5, atol=1e-5)


def test_every_named_workaround_has_a_rewrite() -> None:
    assert set(REWRITES) == set(WORKAROUNDS)


def test_the_lower_stage_takes_the_flag_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "worker.lower.stage", "--trace-dir", str(tmp_path), "--backend", "vulkan",
         "--out", str(tmp_path / "out"), "--events", str(tmp_path / "e.jsonl"), "--workaround", "nope"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2 and "invalid choice: 'nope'" in refused.stderr


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--backend", "xnnpack", "--workaround", "group_norm_4d"],
            "coverfarm: error: --workaround: workaround group_norm_4d is for vulkan cells; backend xnnpack "
            "has none",
        ),
        (
            ["--backend", "vulkan", "--workaround", "group_norm"],
            "coverfarm: error: --workaround: unknown workaround 'group_norm'; known: group_norm_4d, "
            "layer_norm_affine, logical_not_as_bitwise_not",
        ),
    ],
)
def test_a_workaround_the_cell_cannot_take_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--policy", "diffusion", *argv]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert said == line
