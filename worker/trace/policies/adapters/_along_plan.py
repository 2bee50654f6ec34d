"""The end every multi-program adapter shares: export each program along the chunk plan, run it where later
programs need its outputs, and return the ``TracedPolicy``.

An adapter gives its programs (``Program``: the eager module, the program's own input and output names),
the plan that runs them for one chunk (``prefix_then_steps_plan`` for a prefix and N steps) and frame 0.
``trace_along_plan`` walks the plan's calls over frame 0 and the plan's constants: the first call of each
program exports it with that call's inputs as the example, and each call runs (eagerly, or through the
exported program) while a program not yet exported comes later, so that its example inputs are what the
plan hands it. ``predicted_chunk`` is the usual ``eager_chunk``: the policy's own ``predict_action_chunk``
on a reset policy, without gradients, its random draws replayed from the frame.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from worker.trace.policies.adapters._core_aten import EMPTY_LIKE_SUBSTITUTION, export_core
from worker.trace.policies.adapters._randomness import replay
from worker.trace.policies.base import ChunkPlan, TracedPolicy, TracedProgram

Environment = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Program:
    """One of the policy's programs: its eager module and how it is exported along the plan.

    ``input_names`` / ``output_names`` are the exported program's names for its positional inputs and
    outputs; by default its first call's (a step program names them generically: ``x``, ``t``).
    ``example`` gives its example inputs from the environment at its first call (frame 0, the plan's
    constants, the earlier calls' outputs); by default that call's inputs. ``outputs_from`` is what
    computes the outputs later calls read: the eager module, or the exported program (where the eager
    module cannot run on fake weights). ``check`` is called with the outputs of its first call (a static
    variant checked against the original); ``export_after_run`` runs and checks that call before the
    program is exported instead of after.
    """

    name: str
    module: torch.nn.Module
    input_names: Sequence[str] | None = None
    output_names: Sequence[str] | None = None
    example: Callable[[Environment], Sequence[torch.Tensor]] | None = None
    outputs_from: Literal["eager", "exported"] = "eager"
    check: Callable[[tuple[torch.Tensor, ...]], None] | None = None
    export_after_run: bool = False

    def __post_init__(self) -> None:
        if self.export_after_run and self.outputs_from == "exported":
            raise ValueError(f"{self.name}: a program run before it is exported runs eagerly")


def trace_along_plan(
    name: str,
    programs: Sequence[Program],
    plan: ChunkPlan,
    *,
    frame: Environment,
    make_frame: Callable[[int], dict[str, torch.Tensor]],
    eager_chunk: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None,
    seed: int,
    checkpoint: Path | None,
    config: dict[str, object] | Callable[[], dict[str, object]],
    substitutions: Sequence[str] = (),
    tolerance: tuple[float, float] = (1e-3, 1e-3),
) -> TracedPolicy:
    """The policy ``name``: each of ``programs`` that ``plan`` calls exported at its first call, walking the
    plan over ``frame`` (frame 0); ``programs`` holds each program once, in the order of the traced
    policy's programs, and all of them are its eager modules. ``config`` is the recorded config, or a
    function giving it once the programs are exported. The ``empty_like`` substitution is recorded after
    ``substitutions`` when any export needed it."""
    specs = {program.name: program for program in programs}
    pending = {call.program for call in plan.calls}
    exported: dict[str, TracedProgram] = {}
    runners: dict[str, Callable[..., Any]] = {}
    replaced = False
    env: dict[str, torch.Tensor] = {**plan.constants, **frame}

    def export(
        spec: Program, args: Sequence[torch.Tensor], inputs: Sequence[str], outputs: Sequence[str]
    ) -> None:
        nonlocal replaced
        program, empty_like = export_core(
            spec.name,
            spec.module,
            args,
            inputs if spec.input_names is None else spec.input_names,
            outputs if spec.output_names is None else spec.output_names,
        )
        exported[spec.name] = program
        replaced = replaced or empty_like

    for call in plan.calls:
        if not pending:
            break
        spec = specs[call.program]
        first = call.program in pending
        pending.discard(call.program)
        if first and spec.example is not None:
            args = tuple(spec.example(env))
        else:
            args = tuple(env[key] for key in call.inputs)
        if first and not spec.export_after_run:
            export(spec, args, call.inputs, call.outputs)
        if not (pending or (first and (spec.check is not None or spec.export_after_run))):
            break  # every program is exported: no later call reads this one's outputs
        if spec.name not in runners:
            runners[spec.name] = (
                exported[spec.name].exported.module() if spec.outputs_from == "exported" else spec.module
            )
        with torch.no_grad():
            outs = _as_tuple(runners[spec.name](*args))
        if first and spec.check is not None:
            spec.check(outs)
        if first and spec.export_after_run:
            export(spec, args, call.inputs, call.outputs)
        env.update(zip(call.outputs, outs, strict=True))

    return TracedPolicy(
        policy=name,
        programs=[exported[program.name] for program in programs if program.name in exported],
        plan=plan,
        eager={program.name: program.module for program in programs},
        make_frame=make_frame,
        eager_chunk=eager_chunk,
        config=config() if callable(config) else config,
        substitutions=[*substitutions, *([EMPTY_LIKE_SUBSTITUTION] if replaced else [])],
        seed=seed,
        checkpoint=None if checkpoint is None else str(checkpoint),
        tolerance=tolerance,
    )


def predicted_chunk(
    policy: Any,
    batch: Mapping[str, Any],
    *,
    draws: Sequence[torch.Tensor] | None = None,
    within: Sequence[contextlib.AbstractContextManager[Any]] = (),
    **kwargs: Any,
) -> dict[str, torch.Tensor]:
    """``{"action": policy.predict_action_chunk(batch, **kwargs)}`` on the reset policy, without gradients,
    inside ``within``; with ``draws``, its random draws are those tensors (``replay``)."""
    policy.reset()
    with torch.no_grad(), contextlib.ExitStack() as stack:
        for context in within:
            stack.enter_context(context)
        if draws is None:
            return {"action": policy.predict_action_chunk(batch, **kwargs)}
        return {"action": replay(lambda: policy.predict_action_chunk(batch, **kwargs), draws)}


def _as_tuple(result: object) -> tuple[torch.Tensor, ...]:
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, list | tuple):
        return tuple(result)
    raise TypeError(f"a program returned {type(result).__name__}, expected tensors")
