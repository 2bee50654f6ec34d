"""STAND-IN runtimes for the timing tests only: the real Python runtime with one thing changed.

``FlakyOutputRuntime`` alters the output of one execution of one program (the ``flaky_call``-th call of
that program, counted from its load), as a GPU op that is wrong on some runs and right on others would.
``SlowRuntime`` sleeps before every program call, so a chunk takes long enough to show the time bounds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coverfarm.bundle_manifest import ProgramSpec
from gpu_runner.runtime import Program, PythonRuntime


class _Wrapped:
    def __init__(self, inner: Program, runtime: FlakyOutputRuntime | SlowRuntime) -> None:
        self.name = inner.name
        self.inner, self.runtime, self.calls = inner, runtime, 0

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.calls += 1
        return self.runtime.after(self, self.inner(inputs))


class FlakyOutputRuntime(PythonRuntime):
    def __init__(self, program: str, flaky_call: int) -> None:
        self.program, self.flaky_call = program, flaky_call

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program:
        return _Wrapped(super().load_program(spec, pte, backend), self)

    def after(self, program: _Wrapped, outputs: list[np.ndarray]) -> list[np.ndarray]:
        if program.name == self.program and program.calls == self.flaky_call:
            outputs = [outputs[0] + 1.0, *outputs[1:]]
        return outputs


class SlowRuntime(PythonRuntime):
    def __init__(self, seconds_per_call: float) -> None:
        self.seconds = seconds_per_call

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program:
        return _Wrapped(super().load_program(spec, pte, backend), self)

    def after(self, program: _Wrapped, outputs: list[np.ndarray]) -> list[np.ndarray]:
        time.sleep(self.seconds)
        return outputs
