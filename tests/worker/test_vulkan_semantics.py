"""The tracker's repros 1-4 as assertions: what VulkanPartitioner takes, why it refuses the rest, and how
connected groups relate to partitions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from lowerhelp import blockers, lower_events
from tracker_repros import Blocks, Fn, Put

from worker.lower.fast.pattern_cache import cached_pattern_graphs


@pytest.fixture(scope="module", autouse=True)
def pattern_graphs_built_once() -> Iterator[None]:
    with cached_pattern_graphs():
        yield


def test_float32_linear_is_taken_whole() -> None:
    events = lower_events(torch.nn.Linear(64, 64), (torch.randn(4, 64),))
    assert events["partitioned"]["partitions"] == 1
    assert events["partitioned"]["ops_on_backend"] == events["edge"]["ops"]
    assert blockers(events) == {}


def test_bf16_linear_stays_on_cpu_for_its_dtype() -> None:
    linear = torch.nn.Linear(64, 64).to(torch.bfloat16)
    events = lower_events(linear, (torch.randn(4, 64, dtype=torch.bfloat16),))
    assert events["partitioned"]["partitions"] == 0
    assert events["partitioned"]["ops_on_backend"] == 0
    # Constant propagation folds the weight's transpose, so only the matmul is left (the tracker's repro,
    # run without it, also lists permute_copy).
    assert blockers(events) == {"aten.addmm.default": "dtype not supported"}
    assert events["partitioned"]["macs_on_backend"] == 0
    assert events["edge"]["macs"] == 4 * 64 * 64


def test_conv2d_is_taken_only_with_batch_one() -> None:
    conv = torch.nn.Conv2d(3, 8, 3)
    one = lower_events(conv, (torch.randn(1, 3, 32, 32),))
    two = lower_events(conv, (torch.randn(2, 3, 32, 32),))
    assert one["partitioned"]["partitions"] == 1 and blockers(one) == {}
    assert two["partitioned"]["partitions"] == 0
    assert blockers(two) == {"aten.convolution.default": "op args not supported"}


@pytest.mark.parametrize(
    ("module", "inputs", "op"),
    [
        (torch.nn.ELU(), (torch.randn(1, 16, 32),), "aten.elu.default"),
        (torch.nn.Mish(), (torch.randn(1, 16, 32),), "aten.log1p.default"),
        (Fn(lambda t: t.var(dim=-1, keepdim=True)), (torch.randn(1, 16, 32),), "aten.var.correction"),
        (
            torch.nn.ConvTranspose1d(16, 8, 4, stride=2, padding=1),
            (torch.randn(1, 16, 32),),
            "aten.convolution.default",
        ),
        (Put(), (torch.randn(8, 32), torch.tensor([1, 3])), "aten.index_put.default"),
    ],
    ids=["elu", "mish-log1p", "var", "conv-transpose-1d", "index_put"],
)
def test_ops_without_vulkan_support_carry_the_partitioners_reason(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], op: str
) -> None:
    events = lower_events(module, inputs)
    left = blockers(events)
    assert op in left
    # The reason is the text VulkanSupportedOperators logs, not one of ours.
    assert left[op] in {"no operator implementation", "op args not supported"}, left[op]
    support_rows = {row["op"]: row["reason"] for row in events["support"]["blockers"]}
    assert support_rows[op] == left[op]


class Chain(torch.nn.Module):
    """Linear layers joined by an elu each: every elu stays on the CPU and cuts the chain."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.sigmoid(torch.nn.functional.elu(layer(x)))
        return x


def test_groups_equal_partitions_on_a_chain_cut_by_unsupported_ops() -> None:
    events = lower_events(Chain(5), (torch.randn(1, 32),))
    assert events["support"]["connected_groups"] == 6
    assert events["partitioned"]["partitions"] == 6
    assert blockers(events) == {"aten.elu.default": "no operator implementation"}


class Disconnected(torch.nn.Module):
    """Two supported groups with no path between them through the CPU op: the partitioner merges them."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * 2.0 + 1.0
        b = torch.nn.functional.elu(x)
        return a, b * 3.0 + 1.0


class Diamond(torch.nn.Module):
    """One connected group whose two halves would form a cycle through the CPU op: the partitioner splits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x * 2.0)
        b = torch.nn.functional.elu(a)
        return a + b


def test_partitioner_merges_disconnected_groups() -> None:
    events = lower_events(Disconnected(), (torch.randn(1, 32),))
    assert events["support"]["connected_groups"] == 2
    assert events["partitioned"]["partitions"] == 1


def test_partitioner_splits_a_connected_group() -> None:
    events = lower_events(Diamond(), (torch.randn(1, 32),))
    assert events["support"]["connected_groups"] == 1
    assert events["partitioned"]["partitions"] == 2


def test_repro_4_blocks_are_one_group_but_a_partition_each() -> None:
    events = lower_events(Blocks(4), (torch.randn(1, 32),))
    assert events["support"]["connected_groups"] == 1
    assert events["partitioned"]["partitions"] == 5
    assert blockers(events) == {"aten.elu.default": "no operator implementation"}
