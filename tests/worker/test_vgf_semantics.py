"""What VgfPartitioner(VgfCompileSpec("TOSA-1.0+FP")) takes, lowered for real (its TOSA serialized and
compiled into a VGF blob by the ML SDK's model converter), and the reasons its own support check and its
partition pruning give."""

from __future__ import annotations

import torch
from lowerhelp import blockers, lower_events

SORT_REASON = "Not included in BaseTOSASupportList or a registered tosa_support_check"
ARGMAX_REASON = "TOSA ARGMAX produces int32 but aten.argmax returns int64."
NOOP_REASON = (
    "Partition contained only ops which are removed in the TOSA lowering, leading to an empty partition."
)


class TwoLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class LinearSortArgmax(torch.nn.Module):
    """A linear VGF takes; a sort and an argmax its support check refuses; a view between two sorts,
    which it accepts but whose partition (the view alone) the partitioner drops."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.linear(x)
        sorted_once = torch.sort(y, dim=-1)[0].view(16)
        return torch.sort(sorted_once)[0], torch.argmax(y, dim=-1)


def test_two_linears_lower_to_one_vgf_delegate() -> None:
    events = lower_events(TwoLinear(), (torch.randn(2, 8),), backend="vgf")
    assert events["partitioned"]["partitions"] == 1
    assert blockers(events) == {}
    assert events["partitioned"]["ops_on_backend"] == events["edge"]["ops"]
    assert events["partitioned"]["macs_on_backend"] == events["edge"]["macs"] == 2 * (8 * 16 + 16 * 4)
    assert events["lowered"]["delegates"] == 1
    assert events["exported"]["bytes"] > 0


def test_refusals_and_the_dropped_no_op_partition_give_the_partitioners_own_reasons() -> None:
    events = lower_events(LinearSortArgmax(), (torch.randn(2, 8),), backend="vgf")
    support = {row["op"]: row["reason"] for row in events["support"]["blockers"]}
    assert support == {"aten.sort.default": SORT_REASON, "aten.argmax.default": ARGMAX_REASON}
    # The view was accepted by the support check; the partitioner dropped its partition and said why.
    assert blockers(events) == {
        "aten.sort.default": SORT_REASON,
        "aten.argmax.default": ARGMAX_REASON,
        "aten.view_copy.default": NOOP_REASON,
    }
    assert events["partitioned"]["partitions"] == 1
    assert events["lowered"]["delegates"] == 1


class IntegerIndex(torch.nn.Module):
    """An index computed at run time in int64: the TOSA check names the index's node in its reason."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[torch.argsort(x[:, 0])]


def test_a_reason_naming_an_input_node_names_its_position_instead() -> None:
    events = lower_events(IntegerIndex(), (torch.randn(4, 8),), backend="vgf")
    reasons = blockers(events)
    assert reasons["aten.index.Tensor"] == "Non-constant int64 input <input 1>"
