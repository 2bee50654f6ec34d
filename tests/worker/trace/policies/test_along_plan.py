"""``trace_along_plan``, the driver the multi-program adapters end in, on two toy programs: each program is
exported at its first call with that call's inputs, calls run only while a later program still needs their
outputs, and the traced policy carries the plan, the eager modules and the names as given."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

from worker.trace.policies.adapters._along_plan import Program, predicted_chunk, trace_along_plan
from worker.trace.policies.adapters._common import prefix_then_steps_plan
from worker.trace.policies.base import Call, ChunkPlan, TracedPolicy

# The prefix's calls by kind, and the checks: not a module attribute, which torch.export puts back as it
# was before tracing.
EVENTS: list[str] = []


class Prefix(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        EVENTS.append("export" if torch.compiler.is_exporting() else "run")
        return observation * 2, observation.sum(-1, keepdim=True)


class Step(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(
        self, context: torch.Tensor, total: torch.Tensor, x: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        x_next = x + t * context + total
        return x_next, x_next[:, :2]


def frame(index: int) -> dict[str, torch.Tensor]:
    return {"observation": torch.full((1, 3), float(index + 1)), "noise": torch.full((1, 3), 0.5)}


def plan(steps: int = 3) -> ChunkPlan:
    return prefix_then_steps_plan(
        Call("prefix", ("observation",), ("context", "total")),
        ("context", "total"),
        first_sample="noise",
        sample="x",
        chunk="action",
        times=[torch.tensor([float(k)]) for k in range(steps)],
    )


def trace(*programs: Program, steps: int = 3) -> TracedPolicy:
    return trace_along_plan(
        "toy",
        programs,
        plan(steps),
        frame=frame(0),
        make_frame=frame,
        eager_chunk=None,
        seed=3,
        checkpoint=None,
        config=lambda: {"note": "built after the exports"},
        substitutions=["a"],
    )


def test_each_program_is_exported_at_its_first_call_and_only_needed_calls_run() -> None:
    prefix, step = Prefix(), Step()
    traced = trace(
        Program("prefix", prefix),
        Program("denoise_step", step, ("context", "total", "x", "t"), ("x_next", "action")),
    )
    assert [p.name for p in traced.programs] == ["prefix", "denoise_step"]
    assert traced.program("prefix").input_names == ("observation",)
    assert traced.program("prefix").output_names == ("context", "total")
    assert traced.program("denoise_step").input_names == ("context", "total", "x", "t")
    assert traced.eager == {"prefix": prefix, "denoise_step": step}
    # eager runs (exporting leaves the modules' attributes as they were): the prefix once, for the step's
    # example inputs; the step never, no later program reads its outputs
    assert (prefix.calls, step.calls) == (1, 0)
    assert traced.config == {"note": "built after the exports"}
    assert traced.substitutions == ["a"] and traced.seed == 3 and traced.checkpoint is None
    exported = {p.name: p.exported.module() for p in traced.programs}
    with torch.no_grad():
        through_exported = traced.plan.run(exported, frame(1))
        through_eager = traced.plan.run(traced.eager, frame(1))
    torch.testing.assert_close(through_exported, through_eager)


def test_checks_example_inputs_and_exported_outputs() -> None:
    seen: list[str] = []
    examples: list[tuple[str, ...]] = []

    def example(env: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        examples.append(tuple(sorted(env)))
        return env["context"], env["total"], env["noise"] + 1, env["t.00"]

    prefix = Prefix()
    traced = trace(
        Program("prefix", prefix, outputs_from="exported", check=lambda outs: seen.append(f"{len(outs)}")),
        Program(
            "denoise_step", Step(), ("context", "total", "x", "t"), ("x_next", "action"), example=example
        ),
    )
    assert seen == ["2"]
    assert prefix.calls == 0  # the prefix's outputs came from its exported program
    assert examples == [("context", "noise", "observation", "t.00", "t.01", "t.02", "total")]
    assert len(traced.programs) == 2


def test_a_program_is_exported_then_run_and_checked_or_run_and_checked_then_exported() -> None:
    for export_after_run, expected in (
        (False, ["export", "run", "check"]),
        (True, ["run", "check", "export"]),
    ):
        EVENTS.clear()
        trace(
            Program(
                "prefix",
                Prefix(),
                check=lambda outs: EVENTS.append("check"),
                export_after_run=export_after_run,
            ),
            Program("denoise_step", Step(), ("context", "total", "x", "t"), ("x_next", "action")),
        )
        assert expected == EVENTS
    with pytest.raises(ValueError, match="runs eagerly"):
        Program("prefix", Prefix(), outputs_from="exported", export_after_run=True)


def test_a_program_the_plan_never_calls_is_eager_only() -> None:
    traced = trace(
        Program("prefix", Prefix()),
        Program("denoise_step", Step(), ("context", "total", "x", "t"), ("x_next", "action")),
        Program("unused", Step()),
    )
    assert [p.name for p in traced.programs] == ["prefix", "denoise_step"]
    assert set(traced.eager) == {"prefix", "denoise_step", "unused"}


class Toy:
    def __init__(self) -> None:
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def predict_action_chunk(self, batch: dict[str, torch.Tensor], scale: float = 1.0) -> torch.Tensor:
        assert not torch.is_grad_enabled()
        return batch["x"] * scale + torch.randn(2)


def test_predicted_chunk_resets_and_replays_the_draws() -> None:
    policy = Toy()
    chunk = predicted_chunk(policy, {"x": torch.ones(2)}, draws=[torch.zeros(2)], scale=3.0)
    assert policy.resets == 1
    torch.testing.assert_close(chunk["action"], torch.full((2,), 3.0))
