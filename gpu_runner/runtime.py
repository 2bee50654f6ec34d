"""The one place that talks to the ExecuTorch runtime (``executorch.runtime``), in numpy terms.

Upstream behaviour worked around here, and only here: the pip wheel's pybindings
(``executorch.extension.pybindings.portable_lib``) ``import torch`` before loading their extension,
link libtorch, and accept and return only ``torch.Tensor`` ("Unsupported python type
<class 'numpy.ndarray'>"). So with the pip wheel, loading the runtime brings torch into the process
whatever the runner does. The runner's own code never imports torch; ``_tensor_io`` borrows the tensor
type the runtime already loaded, to wrap numpy arrays without copying. A runtime built without torch
needs only that function changed.

It also defines the interface every way of executing a program implements (``ProgramRuntime``): this
Python runtime (``PythonRuntime``) and a native ``executor_runner`` binary
(``gpu_runner.native.runtime.NativeRuntime``). The bundle runner talks to that interface only.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO, cast

import numpy as np

from coverfarm import backends
from coverfarm.bundle_manifest import ProgramSpec
from coverfarm.device_result import DeviceFailure, TimingRules
from farmrun.stats import Timed, timed_loop

# The runtime name of each coverfarm backend's delegate, as ``backend_registry`` lists it.
RUNTIME_BACKEND = backends.runtime_backends()

_LIBTORCH = re.compile(r"/(libtorch[^/]*|libc10[^/]*)\.so[^/]*$")
# A line the runtime logs (ExecuTorch's ET_LOG on stderr): "[VGFSetup.cpp:1497] Failed to create VGF …".
_LOG_LINE = re.compile(r"^\[[\w.+-]+:\d+\] \S")
SAID_LINES = 3  # the runtime's last log lines kept with a failure: where it gave up, and why


class RuntimeFailure(Exception):
    """The runtime could not be loaded, or refused a program or a call; the message is the cause.

    ``failure`` classifies it (``coverfarm.device_result.DeviceFailure``) where the runtime knows more than
    one line: the class, the program, the runtime's own message, a signal, its last lines.
    """

    def __init__(self, message: str, failure: DeviceFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


def executorch_version() -> str | None:
    try:
        return importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _runtime() -> Any:
    try:
        from executorch.runtime import Runtime
    except ImportError as error:
        raise RuntimeFailure(f"the ExecuTorch runtime is not importable: {error}") from None
    return Runtime.get()


def registered_backends() -> list[str]:
    return sorted(_runtime().backend_registry.registered_backend_names)


class _Tee(io.TextIOBase):
    """A text stream that keeps what is written and passes it on."""

    def __init__(self, passed_on: TextIO) -> None:
        self.kept = io.StringIO()
        self.passed_on = passed_on

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.passed_on.write(text)

    def flush(self) -> None:
        self.passed_on.flush()


@contextlib.contextmanager
def runtime_log() -> Iterator[list[str]]:
    """The lines the runtime logs within the block: the wheel's pybindings write ExecuTorch's log through
    Python's ``sys.stderr``, native code may write to file descriptor 2 itself; both are collected (and
    passed on as they were), the log lines kept when the block ends."""
    said: list[str] = []
    sys.stderr.flush()
    tee = _Tee(sys.stderr)
    with tempfile.TemporaryFile() as sink, contextlib.redirect_stderr(tee):
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            native = sink.read()
            os.write(2, native)
            text = tee.kept.getvalue() + native.decode(errors="replace")
            said.extend(line for line in text.splitlines() if _LOG_LINE.match(line))


def runtime_said(said: Sequence[str]) -> str:
    """The runtime's last log lines, as a failure's cause quotes them ("" when it logged none)."""
    return f"; the runtime said: {' / '.join(said[-SAID_LINES:])}" if said else ""


def unavailable_backends(names: Sequence[str]) -> dict[str, str]:
    """Those of ``names`` registered in the runtime whose ``is_available`` is False, each with what the
    runtime logged while it was asked (VgfBackend: "Vulkan driver does not support ARM tensor
    extensions (VK_ARM_tensors)")."""
    registry = _runtime().backend_registry
    registered = set(registry.registered_backend_names)
    found: dict[str, str] = {}
    for name in (n for n in names if n in registered):
        with runtime_log() as said:
            available = registry.is_available(name)
        if not available:
            found[name] = " / ".join(said[-SAID_LINES:]) or "the runtime says it is not available"
    return found


def _tensor_io() -> tuple[Callable[[np.ndarray], Any], Callable[[Any], np.ndarray]]:
    """numpy -> runtime value and back (see the module docstring for why torch appears here)."""
    _runtime()  # the pip runtime imports torch itself; this borrows its tensor type, never loads it first
    torch = sys.modules.get("torch")
    if torch is None:
        raise RuntimeFailure("this ExecuTorch runtime exchanges no tensor type the runner knows")

    def to_runtime(array: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(array))

    def from_runtime(value: Any) -> np.ndarray:
        return np.asarray(value.numpy())

    return to_runtime, from_runtime


class LoadedProgram:
    """One loaded ``.pte``'s ``forward`` method, called with numpy arrays."""

    def __init__(self, name: str, method: Any, keep: tuple[Any, ...] = ()) -> None:
        self.name = name
        self._method = method
        # What the method reads from while it lives: a program loaded from bytes reads them in place
        # (the runtime's Program keeps no reference to them).
        self._keep = keep
        self._to, self._from = _tensor_io()

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        try:
            outputs = self._method.execute([self._to(a) for a in inputs])
        except Exception as error:  # the pybindings raise RuntimeError with the runtime's error code
            cause = f"program {self.name} failed to run: {error}"
            failure = DeviceFailure(kind="crashed", cause=cause, program=self.name, message=str(error))
            raise RuntimeFailure(cause, failure) from None
        return [self._from(o) for o in outputs]


def load_program(name: str, pte: Path, backend: str | None) -> LoadedProgram:
    """Load ``pte``'s ``forward``: from the file, or from its bytes for a backend whose delegate does not
    run from a mapped file (``BackendInfo.load_from_bytes``)."""
    runtime = _runtime()
    known = backends.info(backend or "")
    source: bytes | Path = pte.read_bytes() if known and known.load_from_bytes else pte
    try:
        with runtime_log() as said:
            program = runtime.load_program(source)
            method = program.load_method("forward")
    except Exception as error:
        cause = f"program {name} failed to load: {error}{_why(runtime, backend)}{runtime_said(said)}"
        failure = DeviceFailure(kind="refused_at_load", cause=cause, program=name, message=str(error))
        raise RuntimeFailure(cause, failure) from None
    return LoadedProgram(name, method, keep=(program, source))


def _why(runtime: Any, backend: str | None) -> str:
    """The runtime logs "Backend X is not registered" to stderr but raises only an error code."""
    needed = RUNTIME_BACKEND.get(backend or "")
    registered = sorted(runtime.backend_registry.registered_backend_names)
    if needed and needed not in registered:
        return (
            f" ({needed} is not registered in this ExecuTorch runtime; registered: {', '.join(registered)})"
        )
    return ""


def libtorch_libraries() -> list[str]:
    """The libtorch / c10 shared libraries mapped into this process, from /proc/self/maps."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    found = {m.group(1) for line in lines if (m := _LIBTORCH.search(line))}
    return sorted(found)


RuntimeKind = Literal["python", "native"]


class Program(Protocol):
    """One loaded program's ``forward``: numpy arrays in, numpy arrays out (the manifest's order)."""

    name: str

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class ChunkWork:
    """What a runtime times: the bundle's action chunk, chunk ``i`` on frame ``frame(i)``.

    ``run(i)`` runs chunk ``i`` through the loaded programs and returns the plan's outputs; ``check(i,
    outputs)`` compares a timed chunk's outputs with the reference of its frame and must be called
    outside the timed window for every timed chunk.
    """

    frames: int  # distinct inputs the chunks cycle over (1: frame 0 only)
    run: Callable[[int], Mapping[str, np.ndarray]]
    check: Callable[[int, Mapping[str, np.ndarray]], None]

    def frame(self, index: int) -> int:
        return index % self.frames


@dataclass
class TimedChunks(Timed):
    """A runtime's timed chunks: the loop's samples and what one sample covers. Every timed chunk's
    outputs went through ``ChunkWork.check``."""

    method: str = ""


class ProgramRuntime(Protocol):
    """A way to execute a bundle's programs on this host.

    ``time_chunk`` times ``work``'s chunks under ``rules`` (``farmrun.stats.timed_loop`` bounds an
    in-process loop; a runtime that cannot loop in process follows the same rules its own way) and says
    what a sample covers, because the runtimes cannot measure the same thing: in-process calls are timed
    end to end, a binary that runs one call per process only from its own logs.
    """

    kind: RuntimeKind

    def registered_backends(self) -> list[str]: ...

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program: ...

    def time_chunk(self, work: ChunkWork, rules: TimingRules) -> TimedChunks: ...

    def close(self) -> None:
        """Stop whatever the runtime keeps running for its loaded programs."""


class PythonRuntime:
    """The installed ``executorch.runtime`` (the pip wheel: portable kernels and XNNPACK)."""

    kind: RuntimeKind = "python"
    LATENCY_METHOD = (
        "wall clock of each whole action chunk in the runner process (executorch.runtime), numpy "
        "hand-over included, loading and the output check excluded"
    )

    def prepare(self) -> None:
        """Import the runtime now, so that timing the programs' load does not include it."""
        _runtime()

    def registered_backends(self) -> list[str]:
        return registered_backends()

    def close(self) -> None:
        """Nothing runs apart from this process."""

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program:
        return load_program(spec.name, pte, backend)

    def time_chunk(self, work: ChunkWork, rules: TimingRules) -> TimedChunks:
        def check(index: int, outputs: object, _ms: float) -> None:
            work.check(index, cast(Mapping[str, np.ndarray], outputs))

        timed = timed_loop(work.run, rules, after=check)
        return TimedChunks(**vars(timed), method=self.LATENCY_METHOD)
