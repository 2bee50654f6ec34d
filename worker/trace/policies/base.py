"""What a policy adapter returns: the policy's programs and the plan that runs them for one action chunk.

A policy becomes one or more ``torch.export`` programs (static shapes, batch 1). One action chunk is a
fixed sequence of program calls over a small environment of named tensors: the frame's inputs
(observation tensors, initial noise), constants (timesteps), and every call's outputs. A denoising
policy is an observation program called once and a step program called N times, each step reading the
previous step's output. The device runner replays exactly this plan with numpy; the engine counts runs
per chunk from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Call:
    """One run of one program: positional inputs and outputs, by environment name."""

    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class ChunkPlan:
    """How one action chunk runs: frame inputs, constants, the calls in order, and the final outputs."""

    frame_inputs: tuple[str, ...]
    calls: tuple[Call, ...]
    outputs: tuple[str, ...]
    constants: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def runs_per_chunk(self) -> dict[str, int]:
        return dict(Counter(call.program for call in self.calls))

    def run(
        self,
        programs: Mapping[str, Callable[..., object]],
        frame: Mapping[str, torch.Tensor],
        record: list[tuple[Call, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Run the chunk with the given callables (eager modules or ``ExportedProgram.module()``)."""
        missing = set(self.frame_inputs) - set(frame)
        if missing:
            raise KeyError(f"frame lacks inputs {sorted(missing)}")
        env: dict[str, torch.Tensor] = {**self.constants, **frame}
        for call in self.calls:
            args = tuple(env[name] for name in call.inputs)
            result = programs[call.program](*args)
            outs = _as_tuple(result)
            if len(outs) != len(call.outputs):
                raise ValueError(
                    f"program {call.program} returned {len(outs)} outputs, the plan names {len(call.outputs)}"
                )
            env.update(zip(call.outputs, outs, strict=True))
            if record is not None:
                record.append((call, args, outs))
        return {name: env[name] for name in self.outputs}


def _as_tuple(result: object) -> tuple[torch.Tensor, ...]:
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, list | tuple):
        return tuple(result)
    raise TypeError(f"a program returned {type(result).__name__}, expected tensors")


@dataclass(frozen=True)
class TracedProgram:
    """One exported program with the names of its positional inputs and outputs."""

    name: str
    exported: torch.export.ExportedProgram
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


@dataclass
class TracedPolicy:
    """Everything the trace step produces for one policy.

    ``eager`` holds the policy's own eager modules, one callable per program name, computing the same
    function as the exported program (the reference outputs come from these). ``make_frame(i)`` builds
    frame ``i``'s inputs deterministically (frame 0 is the test case; frames 0..15 the 16-frame check).
    ``eager_chunk`` computes one action chunk with the policy's own public API where it can take the
    frame's inputs (for example the noise), so that the plan itself is checked against the policy.
    """

    policy: str
    programs: list[TracedProgram]
    plan: ChunkPlan
    eager: dict[str, Callable[..., object]]
    make_frame: Callable[[int], dict[str, torch.Tensor]]
    eager_chunk: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None
    config: dict[str, object] = field(default_factory=dict)  # the policy config as recorded
    substitutions: list[str] = field(default_factory=list)
    seed: int = 0
    checkpoint: str | None = None
    tolerance: tuple[float, float] = (1e-3, 1e-3)  # (rtol, atol) for the test case on a device

    def program(self, name: str) -> TracedProgram:
        for program in self.programs:
            if program.name == name:
                return program
        raise KeyError(name)
