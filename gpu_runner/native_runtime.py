"""A native, torch-free ExecuTorch ``executor_runner`` binary as the runtime that executes a bundle.

The host's owner builds it from ExecuTorch (``examples/portable/executor_runner``, with
``EXECUTORCH_BUILD_VULKAN=ON`` for Vulkan, event tracer off) and gives its path with
``--executor-runner PATH`` or ``COVERFARM_EXECUTOR_RUNNER``. coverfarm never builds it.

What the binary offers, and so what this module relies on (ExecuTorch's ``executor_runner.cpp``):
``--model_path``; ``--inputs a.bin,b.bin`` (raw bytes, one file per method input in order, each
checked against the tensor's byte size); ``--num_executions N``; ``--output_file X``, which writes each
tensor output ``i`` as raw bytes to ``X-<i>.bin``; ``--bundleio_rtol/--bundleio_atol`` for bundled
programs (``.bpte``) when built with bundled IO. It logs through ExecuTorch's PAL on stderr
(``I 00:00:00.012345 executorch:executor_runner.cpp:431] Model loaded in 12.3 ms.``): recent builds
log the load time and each execution's time, older ones only the total of all executions.

One process runs one program call, so a chunk plan costs a process start and a program load per
call. Latency is therefore taken from the binary's own execution times with ``--num_executions`` on
each call of the plan, never from the wall clock of the processes; the result says which.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpu_runner.manifest import ProgramSpec, TensorSpec
from gpu_runner.result import NativeRuntimeInfo
from gpu_runner.runtime import RUNTIME_BACKEND, Program, RuntimeFailure, RuntimeKind

ENV_VAR = "COVERFARM_EXECUTOR_RUNNER"
CALL_TIMEOUT_S = 900.0
HELP_TIMEOUT_S = 20.0
# The names ExecuTorch backends register under (``register_backend({"VulkanBackend", ...})``).
BACKEND_NAMES = (
    *RUNTIME_BACKEND.values(),
    "QnnBackend",
    "CoreMLBackend",
    "MPSBackend",
    "NeuronBackend",
    "OpenvinoBackend",
    "VgfBackend",
    "EthosUBackend",
)
# ExecuTorch's default PAL log line: level, time since start, "executorch:<file>:<line>] message".
# Board PALs sometimes drop the time or bracket the location; the pip wheel's pybindings print
# "[method.cpp:85] message" with no level. All are accepted.
_LOG_LINE = re.compile(
    r"^(?:(?P<level>[DIEF]) (?:[0-9:.]+ )?\[?executorch:[^\]]*\]|\[[\w.]+:\d+\]) (?P<message>.*)$"
)
_LOADED = re.compile(r"^Model loaded in (?P<ms>[0-9.eE+-]+) ms\.?$")
_ITERATION = re.compile(r"^Iteration (?P<i>\d+) of (?P<n>\d+): (?P<ms>[0-9.eE+-]+) ms$")
_TOTAL = re.compile(r"^Model executed successfully (?P<n>\d+) time\(s\)(?: in (?P<ms>[0-9.eE+-]+) ms)?\.?$")
_NOT_REGISTERED = re.compile(r"Backend (?P<name>\w+) is not registered")
_LDD_LINE = re.compile(r"^\s*(?P<name>\S+) => (?P<path>/\S+)", re.MULTILINE)
_HELP_FLAG = re.compile(r"^\s+-(?P<flag>\w+) \(", re.MULTILINE)


def configured_path(explicit: Path | None = None) -> Path | None:
    """The binary given on the command line, else ``COVERFARM_EXECUTOR_RUNNER``, else none."""
    if explicit is not None:
        return explicit
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value) if value else None


def check_binary(path: Path) -> None:
    if not path.is_file():
        raise RuntimeFailure(f"executor_runner {path} does not exist")
    if not os.access(path, os.X_OK):
        raise RuntimeFailure(f"executor_runner {path} is not executable")


@dataclass
class RunnerLog:
    """What one ``executor_runner`` process said about itself."""

    load_ms: float | None = None
    iteration_ms: list[float] = field(default_factory=list)
    executions: int | None = None
    total_execute_ms: float | None = None
    not_registered: list[str] = field(default_factory=list)
    bundleio_passed: bool | None = None
    errors: list[str] = field(default_factory=list)  # E and F (fatal: a failed check) messages


def parse_log(text: str) -> RunnerLog:
    log = RunnerLog()
    for line in text.splitlines():
        match = _LOG_LINE.match(line.rstrip())
        if match is None:
            continue
        level, message = match.group("level") or "", match.group("message").strip()
        found = _NOT_REGISTERED.search(message)
        if found:
            log.not_registered.append(found.group("name"))
        if (level and level in "EF") or found:
            log.errors.append(message)
        if loaded := _LOADED.match(message):
            log.load_ms = float(loaded.group("ms"))
        elif iteration := _ITERATION.match(message):
            log.iteration_ms.append(float(iteration.group("ms")))
        elif total := _TOTAL.match(message):
            log.executions = int(total.group("n"))
            log.total_execute_ms = float(total.group("ms")) if total.group("ms") else None
        elif "Test_result: PASS" in message:
            log.bundleio_passed = True
        elif "Test_result: FAIL" in message:
            log.bundleio_passed = False
    return log


def encode(array: np.ndarray, spec: TensorSpec) -> bytes:
    """``array`` as the raw little-endian bytes ``--inputs`` reads, after checking it against the manifest."""
    if list(array.shape) != spec.shape or str(array.dtype) != spec.dtype:
        raise RuntimeFailure(
            f"input {spec.name} is {array.dtype}{list(array.shape)}, "
            f"the manifest says {spec.dtype}{spec.shape}"
        )
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def decode(path: Path, spec: TensorSpec) -> np.ndarray:
    """An ``X-<i>.bin`` output file as the manifest's dtype and shape."""
    dtype = np.dtype(spec.dtype).newbyteorder("<")
    expected = int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize
    try:
        data = path.read_bytes()
    except OSError:
        raise RuntimeFailure(f"executor_runner wrote no {path.name} for output {spec.name}") from None
    if len(data) != expected:
        raise RuntimeFailure(
            f"output {spec.name} ({path.name}) has {len(data)} bytes, "
            f"{spec.dtype}{spec.shape} needs {expected}"
        )
    return np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(spec.shape)


def runner_args(
    binary: Path,
    pte: Path,
    inputs: Sequence[Path] = (),
    *,
    executions: int = 1,
    output_base: Path | None = None,
    bundleio: tuple[float, float] | None = None,
) -> list[str]:
    """The command line (gflags ``--flag=value``); ``bundleio`` is (rtol, atol) for a ``.bpte``."""
    args = [str(binary), f"--model_path={pte}", f"--num_executions={executions}"]
    if inputs:
        if any("," in str(path) for path in inputs):
            raise RuntimeFailure(f"input paths cannot hold a comma for --inputs: {list(map(str, inputs))}")
        args.append(f"--inputs={','.join(map(str, inputs))}")
    if output_base is not None:
        args.append(f"--output_file={output_base}")
    if bundleio is not None:
        args += [f"--bundleio_rtol={bundleio[0]}", f"--bundleio_atol={bundleio[1]}"]
    return args


def linked_backend_libraries(binary: Path) -> list[Path]:
    """The ExecuTorch shared libraries the binary loads (``ldd``; names with "executorch" or "backend")."""
    try:
        run = subprocess.run(
            ["ldd", str(binary)], capture_output=True, text=True, timeout=HELP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    libraries = []
    for match in _LDD_LINE.finditer(run.stdout):
        name, path = match.group("name"), Path(match.group("path"))
        if ("executorch" in name or "backend" in name) and path.is_file():
            libraries.append(path)
    return libraries


def scan_backends(binary: Path, names: Sequence[str] = BACKEND_NAMES) -> list[str]:
    """Backends the binary can register: their registration names, as NUL-terminated string literals,
    in the binary and in the ExecuTorch libraries it loads.

    ExecuTorch registers each backend under a literal name at static initialisation (a backend library
    is linked with ``--whole-archive`` exactly so that this happens), so a name found in none of them
    cannot be registered. Over the pip wheel's own pybindings and their libraries this finds exactly
    what ``executorch.runtime``'s ``backend_registry`` lists (tested). Loading a bundle (the health
    check, or ``run-bundle``) remains the definitive test.
    """
    wanted = {name: f"\0{name}\0".encode() for name in names}
    found: set[str] = set()
    overlap = max(len(w) for w in wanted.values())
    for path in [binary, *linked_backend_libraries(binary)]:
        tail = b""
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                window = tail + chunk
                found.update(name for name, needle in wanted.items() if needle in window)
                tail = window[-overlap:]
    return sorted(found)


def help_flags(binary: Path) -> list[str]:
    """The flags ``--helpshort`` lists (gflags prints them and exits non-zero)."""
    try:
        run = subprocess.run(
            [str(binary), "--helpshort"], capture_output=True, text=True, timeout=HELP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(set(_HELP_FLAG.findall(run.stdout + run.stderr)))


def describe_binary(path: Path | None) -> NativeRuntimeInfo:
    """What the probe records about the native runtime (``none configured`` without a path)."""
    if path is None:
        return NativeRuntimeInfo(status=f"none configured (set {ENV_VAR} or --executor-runner)")
    try:
        check_binary(path)
    except RuntimeFailure as error:
        return NativeRuntimeInfo(path=str(path), status=str(error))
    flags = help_flags(path)
    # Every executor_runner parses its flags with gflags, which lists them for --helpshort.
    status = "ok" if "model_path" in flags else f"{path} is not an executor_runner: no --model_path flag"
    return NativeRuntimeInfo(
        path=str(path),
        status=status,
        registered_backends=scan_backends(path),
        backends_from="registration names in the binary and the ExecuTorch libraries it loads",
        flags=flags,
        bundle_io="bundleio_rtol" in flags,
    )


@dataclass
class Invocation:
    outputs: list[np.ndarray]
    log: RunnerLog
    wall_ms: float


class NativeProgram:
    """One ``.pte`` run by the binary, one process per call."""

    def __init__(self, runtime: NativeRuntime, spec: ProgramSpec, pte: Path, backend: str | None) -> None:
        self.name = spec.name
        self.spec = spec
        self.pte = pte
        self.backend = backend
        self._runtime = runtime

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.invoke(inputs, executions=1).outputs

    def invoke(self, inputs: Sequence[np.ndarray], executions: int, outputs: bool = True) -> Invocation:
        if len(inputs) != len(self.spec.inputs):
            raise RuntimeFailure(
                f"program {self.name} takes {len(self.spec.inputs)} inputs, was given {len(inputs)}"
            )
        with tempfile.TemporaryDirectory(prefix=f"coverfarm-{self.name}.") as work:
            folder = Path(work)
            files = []
            for i, (array, spec) in enumerate(zip(inputs, self.spec.inputs, strict=True)):
                files.append(folder / f"in-{i}.bin")
                files[-1].write_bytes(encode(array, spec))
            base = folder / "out" if outputs else None
            args = runner_args(self._runtime.binary, self.pte, files, executions=executions, output_base=base)
            log, wall_ms = self._runtime.execute(args, self)
            values = (
                [decode(folder / f"out-{i}.bin", s) for i, s in enumerate(self.spec.outputs)] if base else []
            )
        return Invocation(outputs=values, log=log, wall_ms=wall_ms)


class NativeRuntime:
    """``executor_runner`` behind the runtime interface (``gpu_runner.runtime.ProgramRuntime``)."""

    kind: RuntimeKind = "native"

    def __init__(self, binary: Path, timeout_s: float = CALL_TIMEOUT_S) -> None:
        check_binary(binary)
        self.binary = binary
        self.timeout_s = timeout_s
        self._backends: list[str] | None = None

    def registered_backends(self) -> list[str]:
        if self._backends is None:
            self._backends = scan_backends(self.binary)
        return self._backends

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program:
        """Load it once with ``--num_executions=0`` so a refused program fails here, with its cause."""
        program = NativeProgram(self, spec, pte, backend)
        self.execute(runner_args(self.binary, pte, executions=0), program, "failed to load")
        return program

    def execute(
        self, args: list[str], program: NativeProgram, what: str = "failed to run"
    ) -> tuple[RunnerLog, float]:
        start = time.perf_counter()
        try:
            run = subprocess.run(args, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeFailure(
                f"program {program.name} {what}: executor_runner ran over {self.timeout_s:.0f} s"
            ) from None
        except OSError as error:
            raise RuntimeFailure(f"executor_runner {self.binary} cannot be started: {error}") from None
        wall_ms = (time.perf_counter() - start) * 1e3
        log = parse_log(run.stderr + "\n" + run.stdout)
        if run.returncode != 0:
            raise RuntimeFailure(f"program {program.name} {what}: {self._cause(run, log, program.backend)}")
        return log, wall_ms

    def _cause(self, run: subprocess.CompletedProcess[str], log: RunnerLog, backend: str | None) -> str:
        status = f"signal {-run.returncode}" if run.returncode < 0 else f"status {run.returncode}"
        said = "; ".join(dict.fromkeys(log.errors)) or _last_line(run.stderr) or "no error logged"
        cause = f"executor_runner exited with {status}: {said}"
        needed = RUNTIME_BACKEND.get(backend or "")
        if needed and (needed in log.not_registered or needed not in self.registered_backends()):
            cause += f" ({needed} is not linked into {self.binary})"
        return cause

    def time_chunk(
        self,
        chunk: Callable[[], object],
        calls: Sequence[tuple[Program, Sequence[np.ndarray]]],
        warmup: int,
        iterations: int,
    ) -> tuple[list[float], str]:
        """Each call of the plan, on its own inputs, ``warmup + iterations`` times in one process;
        ``chunk_samples`` turns what the processes logged into samples."""
        del chunk  # one process per call: timing the chunk's wall clock would time process starts
        logs = []
        for program, inputs in calls:
            if not isinstance(program, NativeProgram):
                raise TypeError(f"{program.name} was not loaded by the native runtime")
            logs.append((program.name, program.invoke(inputs, warmup + iterations, outputs=False).log))
        return chunk_samples(logs, warmup, iterations)


def chunk_samples(
    logs: Sequence[tuple[str, RunnerLog]], warmup: int, iterations: int
) -> tuple[list[float], str]:
    """Chunk samples from each plan call's log of ``warmup + iterations`` executions, and what they cover.

    Sample ``j`` is the sum over the plan's calls of each call's ``warmup + j``-th execution time as the
    binary logs it: steady-state execution only, no process start, load or file I/O. A binary that logs
    only its total gives one sample, the sum of the calls' mean times, and says so.
    """
    executions = warmup + iterations
    per_call: list[list[float]] = []
    means: list[float] = []
    for name, log in logs:
        if len(log.iteration_ms) == executions:
            per_call.append(log.iteration_ms[warmup:])
        if log.total_execute_ms is None:
            raise RuntimeFailure(f"executor_runner logged no execution time for {name}")
        means.append(log.total_execute_ms / max(log.executions or executions, 1))
    if len(per_call) == len(logs):
        samples = [float(sum(times)) for times in zip(*per_call, strict=True)]
        return samples, (
            f"executor_runner's own per-execution times, summed over the plan's {len(logs)} calls "
            f"(each call one process with --num_executions={executions}, the first {warmup} "
            "dropped); process start, program load and .bin file I/O excluded; load_ms is the wall "
            "time of one load-only process per program"
        )
    return [float(sum(means))], (
        "this executor_runner logs only its total execution time: one sample, the sum over the "
        f"plan's {len(logs)} calls of each call's mean over --num_executions={executions} "
        "(warm-up executions included); process start, load and file I/O excluded"
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
