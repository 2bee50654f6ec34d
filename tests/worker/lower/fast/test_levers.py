"""Each fast-lowering lever runs only against the upstream source it was written against: on the default
stack every lever is active; a lever whose recorded digest does not match is left off, its part of
lowering runs stock, the result says so, and the program is the same."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from executorch.backends.vulkan.patterns import pattern_registry

from coverfarm.result import ResultDocument, StageResult, StageStatus
from coverfarm.stacks import DEFAULT_STACK, detect_stack, installed_versions
from worker.child.bounded import StageRun
from worker.child.events import read_events
from worker.lower.assemble import fold_lower_events
from worker.lower.fast import levers
from worker.lower.fast.switch import fast_lowering
from worker.lower.stage import main as lower_main


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.elu(self.a(x)))  # elu stays on the CPU: two partitions


@pytest.fixture
def states_fresh() -> Iterator[None]:
    levers.lever_states.cache_clear()
    yield
    levers.lever_states.cache_clear()


def foreign(name: str) -> tuple[levers.Lever, ...]:
    """LEVERS with ``name`` recorded against an upstream source this environment does not have."""
    return tuple(
        dataclasses.replace(lever, written_against={"0" * 64: "executorch 0.0.0, torch 0.0.0"})
        if lever.name == name
        else lever
        for lever in levers.LEVERS
    )


def test_on_the_default_stack_every_lever_is_active(states_fresh: None) -> None:
    detected = detect_stack(installed_versions())
    if detected.name != DEFAULT_STACK:
        pytest.skip(f"not the default stack: {detected.description}")
    assert levers.lever_states() == {lever.name: levers.ACTIVE for lever in levers.LEVERS}
    assert levers.partitioner_impl("fast") == "fast"


def test_a_lever_whose_digest_does_not_match_is_left_off_and_says_why(
    monkeypatch: pytest.MonkeyPatch, states_fresh: None
) -> None:
    monkeypatch.setattr(levers, "LEVERS", foreign("exact_partitioner"))
    state = levers.lever_states()["exact_partitioner"]
    digest = levers.upstream_digest(levers.LEVERS[0])
    assert state == (
        f"stock: upstream source digest {digest[:12]} on {levers._versions()} is not one it was written "
        "against (executorch 0.0.0, torch 0.0.0)"
    )
    assert levers.partitioner_impl("fast") == "stock"
    assert levers.partitioner_impl("stock") == "stock"


def test_an_upstream_function_that_is_gone_leaves_its_lever_off(states_fresh: None) -> None:
    gone = dataclasses.replace(levers.LEVERS[1], wraps=("executorch.exir.backend.backend_api:no_such",))
    assert levers.lever_state(gone).startswith("stock: upstream code it wraps is not there (AttributeError")


def test_a_lever_left_off_leaves_upstream_as_it_is() -> None:
    states = dict.fromkeys((lever.name for lever in levers.LEVERS), levers.ACTIVE)
    builders = {name: entry.get_graphs_fn for name, entry in pattern_registry.fusable_patterns.items()}
    with fast_lowering(states):
        cached = {name: entry.get_graphs_fn for name, entry in pattern_registry.fusable_patterns.items()}
    with fast_lowering(states | {"pattern_cache": "stock: test"}):
        stock = {name: entry.get_graphs_fn for name, entry in pattern_registry.fusable_patterns.items()}
    assert stock == builders
    assert all(cached[name] is not builders[name] for name in builders if builders[name] is not None)


def lower_through_the_stage(root: Path) -> tuple[ResultDocument, bytes]:
    """The lower stage's ``main`` on a small traced program, folded into a result document."""
    trace = root / "trace"
    trace.mkdir()
    torch.export.save(torch.export.export(Small().eval(), (torch.randn(1, 8),)), trace / "forward.pt2")
    programs = [{"name": "forward", "pt2": "forward.pt2", "runs_per_chunk": 1}]
    (trace / "trace.json").write_text(json.dumps({"programs": programs}))
    events = root / "events.jsonl"
    argv = ["--trace-dir", str(trace), "--backend", "vulkan", "--lowering", "fast"]
    assert lower_main([*argv, "--out", str(root / "out"), "--events", str(events)]) == 0
    doc = ResultDocument(policy="small", backend="vulkan", trace=StageResult(status=StageStatus.OK))
    fold_lower_events(doc, {"programs": programs}, trace, StageRun(read_events(events), 0, None), 60.0)
    return doc, (root / "out" / "forward.pte").read_bytes()


def test_the_result_records_a_lever_left_off_and_the_rest_stay_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, states_fresh: None
) -> None:
    """(That a lever's part run stock gives the same program is each lever's own test.)"""
    off_here = {name for name, state in levers.lever_states().items() if state != levers.ACTIVE}
    levers.lever_states.cache_clear()
    monkeypatch.setattr(levers, "LEVERS", foreign("deferred_constant_copies"))
    doc, pte = lower_through_the_stage(tmp_path)
    assert doc.levers["deferred_constant_copies"].startswith("stock: upstream source digest ")
    off = {name for name, state in doc.levers.items() if state != levers.ACTIVE}
    assert off == off_here | {"deferred_constant_copies"}
    assert set(doc.levers) == {lever.name for lever in levers.LEVERS}
    assert doc.export.status is StageStatus.OK and doc.programs.count == 2 and pte
