"""Real or fake weights: the option as asked, or the estimate against the worker's memory."""

from __future__ import annotations

import contextlib

import pytest
import torch

from coverfarm import tracker
from coverfarm.result import ResultDocument, StageResult, StageStatus
from coverfarm.worker_memory import GB, worker_memory_gb
from worker.trace.fake_weights import building_fake
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy, TracedProgram
from worker.trace.stage import parameter_bytes
from worker.trace.weights import decide, estimated_peak_gb, export_not_run, needs_worker_gb


def test_auto_takes_real_weights_when_the_estimate_fits() -> None:
    small = 200 * 2**20
    weights = decide("auto", small, worker_gb=24.0)
    assert weights.mode == "real" and weights.requested == "auto"
    assert weights.estimated_peak_gb == round(estimated_peak_gb(small), 2) < 24.0
    assert "fits" in weights.reason


def test_auto_takes_fake_weights_when_the_estimate_does_not_fit() -> None:
    big = 12 * GB  # a 3 B-parameter policy in fp32
    weights = decide("auto", big, worker_gb=24.0)
    assert weights.mode == "fake"
    assert weights.needs_worker_gb == needs_worker_gb(big) > 24
    assert "exceeds this worker's 24.0 GB" in weights.reason


def test_an_explicit_choice_is_taken_as_asked() -> None:
    assert decide("real", 12 * GB, worker_gb=8.0).mode == "real"
    assert decide("fake", None, worker_gb=64.0).mode == "fake"


def test_the_export_cell_of_a_fake_weight_cell_names_the_worker_it_needs() -> None:
    weights = decide("auto", 12 * GB, worker_gb=24.0)
    doc = ResultDocument(
        policy="pi0",
        backend="vulkan",
        trace=StageResult(status=StageStatus.OK),
        partition=StageResult(status=StageStatus.OK),
        export=export_not_run(weights),
        weights=weights,
    )
    assert tracker.export_cell(doc) == f"needs ≥ {weights.needs_worker_gb} GB worker"
    assert doc.export.error is not None
    assert doc.export.error.message == (
        f"fake weights: export needs real weights (≥ {weights.needs_worker_gb} GB worker)"
    )


def test_worker_memory_comes_from_the_environment_or_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COVERFARM_WORKER_MEMORY_GB", "64")
    assert worker_memory_gb() == 64.0
    monkeypatch.setenv("COVERFARM_WORKER_MEMORY_GB", "lots")
    with pytest.raises(ValueError, match="must be a number of GB"):
        worker_memory_gb()
    monkeypatch.delenv("COVERFARM_WORKER_MEMORY_GB")
    assert worker_memory_gb() > 0


class _TiedLM(torch.nn.Module):
    """An embedding and an LM head tied to it, with a buffer beside them."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 8)
        self.head = torch.nn.Linear(8, 100, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(8))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.embed(ids) * self.scale)
        return out


class _Owner(torch.nn.Module):
    """A second program over the same model, which it names ``owner.…``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.owner = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.owner(ids) * 2
        return out


@pytest.mark.parametrize("fake", [False, True], ids=["real", "fake"])
def test_parameter_bytes_counts_each_storage_once_across_programs_and_tied_weights(fake: bool) -> None:
    with building_fake() if fake else contextlib.nullcontext():
        model = _TiedLM()
    ids = torch.zeros(1, 3, dtype=torch.long)
    programs = [
        TracedProgram(name, torch.export.export(module, (ids,)), ("ids",), ("logits",))
        for name, module in (("prefix", model), ("step", _Owner(model)))
    ]
    names = [sorted(program.exported.state_dict) for program in programs]
    assert names == [
        ["embed.weight", "head.weight", "scale"],
        ["owner.embed.weight", "owner.head.weight", "owner.scale"],
    ]
    plan = ChunkPlan(("ids",), (Call("prefix", ("ids",), ("logits",)),), ("logits",))
    traced = TracedPolicy("tied", programs, plan, eager={}, make_frame=lambda index: {})
    assert parameter_bytes(traced) == (100 * 8 + 8) * 4  # the tied matrix once, the buffer once
