"""Asking a backend's own support check about every node, with its reasons."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
from torch.fx.passes.operator_support import OperatorSupportBase

from worker.lower.backends.reasons import canonical_reason, capability_reasons


class RefusesRelu(OperatorSupportBase):
    """Stands in for VulkanSupportedOperators: refuses relu through ``log_skip``, as it does."""

    def log_skip(self, node: torch.fx.Node, reason: str) -> None:
        raise AssertionError("replaced while capability_reasons runs")

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        if node.target is torch.relu:
            self.log_skip(node, "no operator implementation")
            return False
        if node.target is torch.tanh:
            raise AttributeError("'list' object has no attribute 'shape'")
        return True


def graph(*targets: object) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    for target in targets:
        x = g.call_function(target, (x,))
    g.output(x)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_reasons_come_from_the_checks_own_log_skip() -> None:
    support = RefusesRelu()
    reasons = capability_reasons(support, graph(torch.sigmoid, torch.relu))
    assert [(n.name, r) for n, r in reasons.items()] == [
        ("sigmoid", None),
        ("relu", "no operator implementation"),
    ]
    assert "log_skip" not in vars(support), "the check is left as it was"


class PrintsRefusal(OperatorSupportBase):
    """Stands in for OpenvinoOperatorsSupport: prints its refusal of relu, as it does, and no more."""

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        if node.target is torch.relu:
            print("Op not supported: ", "torch.ops.relu")
            return False
        return True


def test_reasons_come_from_what_the_check_prints(capsys: pytest.CaptureFixture[str]) -> None:
    reasons = capability_reasons(PrintsRefusal(), graph(torch.sigmoid, torch.relu))
    assert [(n.name, r) for n, r in reasons.items()] == [
        ("sigmoid", None),
        ("relu", "Op not supported:  torch.ops.relu"),
    ]
    assert capsys.readouterr().out == ""  # read as the reason, not left on the stage's stdout


def test_a_crash_inside_the_check_names_the_node() -> None:
    with pytest.raises(AttributeError) as raised:
        capability_reasons(RefusesRelu(), graph(torch.sigmoid, torch.tanh))
    assert "raised by RefusesRelu.is_node_supported on %tanh" in raised.value.__notes__[0]


def test_set_literals_in_reasons_read_the_same_in_every_process() -> None:
    a = canonical_reason("input[1] dtype torch.int64 not in {torch.float32, torch.float16}")
    b = canonical_reason("input[1] dtype torch.int64 not in {torch.float16, torch.float32}")
    assert a == b == "input[1] dtype torch.int64 not in {torch.float16, torch.float32}"
    assert canonical_reason("no operator implementation") == "no operator implementation"
