"""Which runtime executes a bundle: the Python ``executorch.runtime`` or a native ``executor_runner``.

``auto`` (the default) takes the native binary when one is configured and has the bundle's backend
linked in, and the Python runtime otherwise, so a host without a binary behaves as before.

The native runtime still times a fixed count of executions per call (``time_chunk(chunk, calls, warmup,
iterations)``); ``CountedTiming`` puts it behind the bounded interface until it follows the rules itself:
the rules' minimum count, spread over the frames the chunks cycle over, and no check of the outputs of
timed executions, which that runtime does not hand back (the result says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol, get_args

import numpy as np

from gpu_runner.manifest import ProgramSpec
from gpu_runner.native_runtime import ENV_VAR, NativeRuntime, configured_path, scan_backends
from gpu_runner.result import TimingRules
from gpu_runner.runtime import (
    RUNTIME_BACKEND,
    ChunkWork,
    Program,
    ProgramRuntime,
    PythonRuntime,
    RuntimeFailure,
    RuntimeKind,
    TimedChunks,
)
from gpu_runner.stats import MIN_REACHED

RuntimeChoice = Literal["auto", "python", "native"]
CHOICES: tuple[str, ...] = get_args(RuntimeChoice)


def choose_runtime(
    choice: RuntimeChoice = "auto", backend: str | None = None, executor_runner: Path | None = None
) -> ProgramRuntime:
    """The runtime for a bundle of ``backend``; a choice that cannot be honoured raises with the cause."""
    if choice not in CHOICES:
        raise RuntimeFailure(f"unknown runtime {choice!r}; choose one of {', '.join(CHOICES)}")
    binary = configured_path(executor_runner)
    if choice == "python":
        return PythonRuntime()
    if choice == "native":
        if binary is None:
            raise RuntimeFailure(
                "the native runtime needs an executor_runner binary: "
                f"give --executor-runner PATH or set {ENV_VAR}"
            )
        return CountedTiming(NativeRuntime(binary))
    if binary is not None:
        native = NativeRuntime(binary)
        needed = RUNTIME_BACKEND.get(backend or "")
        if needed is None or needed in scan_backends(binary):
            return CountedTiming(native)
    return PythonRuntime()


class CountedRuntime(Protocol):
    """A runtime that times a fixed count of executions of each call (the native runtime today)."""

    kind: RuntimeKind

    def registered_backends(self) -> list[str]: ...

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program: ...

    def time_chunk(
        self,
        chunk: Callable[[], object],
        calls: Sequence[tuple[Program, Sequence[np.ndarray]]],
        warmup: int,
        iterations: int,
    ) -> tuple[list[float], str]: ...


class CountedTiming:
    """A ``CountedRuntime`` behind ``ProgramRuntime``: ``rules.min_chunks`` samples in all, spread over
    the frames the chunks cycle over, each frame's calls warmed up by ``rules.warmup`` executions."""

    def __init__(self, inner: CountedRuntime) -> None:
        self.inner = inner
        self.kind: RuntimeKind = inner.kind

    def registered_backends(self) -> list[str]:
        return self.inner.registered_backends()

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program:
        return self.inner.load_program(spec, pte, backend)

    def time_chunk(self, work: ChunkWork, rules: TimingRules) -> TimedChunks:
        total = rules.min_chunks
        frames = min(work.frames, total)
        samples: list[float] = []
        method = ""
        for frame in range(frames):
            count = total // frames + (1 if frame < total % frames else 0)
            taken, method = self.inner.time_chunk(_chunk(work, frame), work.calls(frame), rules.warmup, count)
            samples += taken
        return TimedChunks(
            samples_ms=samples,
            warmup=rules.warmup,
            seconds=sum(samples) / 1e3,
            stopped=MIN_REACHED + " (a fixed count: this runtime does not bound its executions in time)",
            method=method,
            outputs_note="this runtime hands back no outputs of its timed executions",
        )


def _chunk(work: ChunkWork, frame: int) -> Callable[[], object]:
    return lambda: work.run(frame)
