"""A native, torch-free ExecuTorch ``executor_runner`` binary as the runtime that executes a bundle.

The host's owner builds it from ExecuTorch (``examples/portable/executor_runner``, with
``EXECUTORCH_BUILD_VULKAN=ON`` for Vulkan, event tracer off) and gives its path with
``--executor-runner PATH`` or ``COVERFARM_EXECUTOR_RUNNER``, and the source it was built from with
``COVERFARM_EXECUTOR_RUNNER_VERSION``, ``COVERFARM_EXECUTOR_RUNNER_COMMIT`` and, for a candidate fix,
``COVERFARM_EXECUTOR_RUNNER_PATCHES`` (``gpu_runner.declared_source``). coverfarm never builds it.

What the binary offers, and so what this module relies on (ExecuTorch's ``executor_runner.cpp``):
``--model_path``; ``--inputs a.bin,b.bin`` (raw bytes, one file per method input in order, each
checked against the tensor's byte size); ``--num_executions N``; ``--output_file X``, which writes each
tensor output ``i`` as raw bytes to ``X-<i>.bin``; ``--bundleio_rtol/--bundleio_atol`` for bundled
programs (``.bpte``) when built with bundled IO. It logs through ExecuTorch's PAL on stderr
(``I 00:00:00.012345 executorch:executor_runner.cpp:431] Model loaded in 12.3 ms.``): recent builds
log the load time and each execution's time, older ones only the total of all executions.

A binary with ``--server_mode`` (ExecuTorch 1.4.1 and later) loads each program once and executes it once
per line read on stdin: it re-reads its ``--inputs`` files, runs, rewrites its ``--output_file`` outputs
and logs ``SERVER MODE DONE``. Each program of a bundle then gets one live process (``NativeServer``),
and an action chunk is timed end to end through them, file hand-over included, as the Python runtime's
chunk includes its numpy hand-over. An older binary runs one process per call; its latency is taken
from its own logged execution times, never from the wall clock of processes: each call of a timed chunk
is one process with ``--num_executions`` of the warm-ups and one timed execution, whose outputs it writes
(``execution_ms``). Either way every timed chunk's outputs are checked, and the result says how the
chunk was timed.

Failures are classified (``coverfarm.device_result.DeviceFailure``): a process that ends before its program
is loaded was refused at load, one that ends after was a crash (its signal and last lines), and one
that runs past its bound is out of time; the runtime's own message is kept in full.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, cast

import numpy as np

from coverfarm.bundle_manifest import ProgramSpec, TensorSpec
from coverfarm.device_result import (
    DeviceFailure,
    FailureKind,
    NativeRuntimeInfo,
    ProgramLoad,
    TimingRules,
)
from coverfarm.device_words import CRASHED_WHILE_RUNNING, REFUSED_AT_LOAD, short_message
from farmrun.stats import MIN_REACHED, timed_loop
from gpu_runner.declared_source import COMMIT_ENV_VAR, VERSION_ENV_VAR, DeclaredSource
from gpu_runner.runtime import (
    RUNTIME_BACKEND,
    ChunkWork,
    Program,
    RuntimeFailure,
    RuntimeKind,
    TimedChunks,
)

ENV_VAR = "COVERFARM_EXECUTOR_RUNNER"
CALL_TIMEOUT_S = 900.0
HELP_TIMEOUT_S = 20.0
TAIL_LINES = 40  # of a failed process's output kept in its failure
# What a server-mode executor_runner logs once its program is loaded, and after each execution.
SERVER_READY = "Running in server mode"
SERVER_DONE = "SERVER MODE DONE"
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
    server_mode: bool = False,
    quiet_outputs: bool = False,
) -> list[str]:
    """The command line (gflags ``--flag=value``); ``bundleio`` is (rtol, atol) for a ``.bpte``;
    ``quiet_outputs`` adds ``--print_output=none`` (binaries that print outputs by default)."""
    args = [str(binary), f"--model_path={pte}", f"--num_executions={executions}"]
    if server_mode:
        args.append("--server_mode")
    if quiet_outputs:
        args.append("--print_output=none")
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


def logs_through_pal(binary: Path) -> bool | None:
    """Whether the binary logs through ExecuTorch's PAL, which "Model loaded in N ms" is read from: a
    run on a missing program must log its refusal as a PAL line (builds with logging compiled out
    print nothing). None when the binary could not be run."""
    try:
        run = subprocess.run(
            [str(binary), "--model_path=/nonexistent/coverfarm-probe.pte", "--num_executions=0"],
            capture_output=True,
            text=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return any(_LOG_LINE.match(line.rstrip()) for line in (run.stderr + "\n" + run.stdout).splitlines())


def describe_binary(path: Path | None, declared: DeclaredSource | None = None) -> NativeRuntimeInfo:
    """What the probe records about the native runtime (``none configured`` without a path): what the
    binary says of itself (flags, backends, logging) and the source its owner declares."""
    problems = []
    if declared is None:
        try:
            declared = DeclaredSource.from_environment()
        except ValueError as error:
            problems.append(str(error))
            declared = DeclaredSource()
    if path is None:
        return NativeRuntimeInfo(status=f"none configured (set {ENV_VAR} or --executor-runner)")
    try:
        check_binary(path)
    except RuntimeFailure as error:
        return NativeRuntimeInfo(path=str(path), status=str(error))
    flags = help_flags(path)
    # Every executor_runner parses its flags with gflags, which lists them for --helpshort.
    status = "ok" if "model_path" in flags else f"{path} is not an executor_runner: no --model_path flag"
    # --etdump_path exists only in builds with ET_EVENT_TRACER_ENABLED (executor_runner.cpp).
    event_tracer = "etdump_path" in flags
    logging = logs_through_pal(path) if status == "ok" else None
    if event_tracer:
        problems.append(
            "built with the event tracer (--etdump_path): the Vulkan runtime's query pool then stops "
            "programs of more than about 2,000 dispatches; rebuild with EXECUTORCH_ENABLE_EVENT_TRACER=OFF"
        )
    if logging is False:
        problems.append("logs nothing through ExecuTorch's PAL: load times cannot be read from it")
    if declared.version is None or declared.commit is None:
        problems.append(
            f"its ExecuTorch source is not declared: set {VERSION_ENV_VAR} and {COMMIT_ENV_VAR} "
            "so that every result says which runtime ran it"
        )
    return NativeRuntimeInfo(
        path=str(path),
        status=status,
        registered_backends=scan_backends(path),
        backends_from="registration names in the binary and the ExecuTorch libraries it loads",
        flags=flags,
        bundle_io="bundleio_rtol" in flags,
        declared_version=declared.version,
        declared_commit=declared.commit,
        declared_patches=list(declared.patches),
        server_mode="server_mode" in flags,
        event_tracer=event_tracer,
        logging=logging,
        problems=problems,
    )


def shader_cache_state(environ: Mapping[str, str] | None = None, home: Path | None = None) -> str:
    """What the Vulkan driver's shader disk cache holds before a run's first load, which decides
    whether that load is cold: NVIDIA's GLCache (``__GL_SHADER_DISK_CACHE``, ``..._PATH``) and Mesa's
    cache (``MESA_SHADER_CACHE_DISABLE``, ``MESA_SHADER_CACHE_DIR``), under ``XDG_CACHE_HOME`` or
    ``~/.cache``."""
    env = os.environ if environ is None else environ
    cache_home = Path(env.get("XDG_CACHE_HOME") or (home or Path.home()) / ".cache")
    described = []
    for driver, off, path_var, default in (
        ("nvidia", "__GL_SHADER_DISK_CACHE", "__GL_SHADER_DISK_CACHE_PATH", cache_home / "nvidia/GLCache"),
        ("mesa", "MESA_SHADER_CACHE_DISABLE", "MESA_SHADER_CACHE_DIR", cache_home / "mesa_shader_cache"),
    ):
        disabled = env.get(off, "").strip().lower()
        if (driver == "nvidia" and disabled == "0") or (driver == "mesa" and disabled in ("1", "true")):
            described.append(f"{driver}: disabled ({off}={env[off]})")
            continue
        folder = Path(env[path_var]) if env.get(path_var) else default
        files = [f for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []
        if files:
            size = sum(f.stat().st_size for f in files)
            described.append(f"{driver}: {len(files)} files, {size / 1e6:.1f} MB in {folder}")
        elif folder.is_dir():
            described.append(f"{driver}: empty ({folder})")
    return "; ".join(described) or f"no shader disk cache found under {cache_home}"


def _strip(line: str) -> str:
    match = _LOG_LINE.match(line.rstrip())
    return match.group("message").strip() if match else line.strip()


def runtime_message(lines: Sequence[str]) -> str:
    """The runtime's own account of a failure, from a process's output: a C++ exception's ``what()``
    (the Vulkan backend's checks throw), then fatal and error log lines, else the last line."""
    found: list[str] = []
    for line in lines:
        text = line.strip()
        if "what():" in text:
            found.append(text.split("what():", 1)[1].strip())
        elif (match := _LOG_LINE.match(text)) and (match.group("level") or "") in ("E", "F"):
            found.append(match.group("message").strip())
        elif " is false!" in text or text.startswith("terminate called") or _NOT_REGISTERED.search(text):
            found.append(_strip(text))
    found = [text for text in dict.fromkeys(found) if text]
    if found:
        return "; ".join(found)
    meaningful = [line.strip() for line in lines if line.strip()]
    return _strip(meaningful[-1]) if meaningful else "no error logged"


def classify_exit(
    kind: FailureKind, program: str, returncode: int | None, lines: Sequence[str], what: str
) -> DeviceFailure:
    """A failure of class ``kind`` from how a process ended and what it printed."""
    message = runtime_message(lines)
    signal_number = -returncode if returncode is not None and returncode < 0 else None
    exit_status = returncode if returncode is not None and returncode >= 0 else None
    how = (
        f"signal {signal_number} ({_signal_name(signal_number)})"
        if signal_number is not None
        else f"status {exit_status}"
    )
    said = f"program {program} {what} ({how})" if kind == "crashed" else f"program {program} {what}"
    cause = f"{said}: {short_message(message)}"
    return DeviceFailure(
        kind=kind,
        cause=_one_line(cause),
        program=program,
        message=message,
        signal=signal_number,
        exit_status=exit_status,
        last_lines=[line.rstrip() for line in lines[-TAIL_LINES:]],
    )


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number or 0).name
    except ValueError:
        return "unknown"


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class _Output:
    """A child's merged stdout and stderr, read line by line by a thread (so neither pipe fills)."""

    def __init__(self, stream: Iterable[str]) -> None:
        self.lines: deque[str] = deque(maxlen=4 * TAIL_LINES)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Iterable[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, marker: str, timeout_s: float) -> tuple[list[str], bool]:
        """Lines up to and including one containing ``marker``; (lines, False) at end of output.
        Raises TimeoutError when neither comes within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        seen: list[str] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                raise TimeoutError from None
            if line is None:
                self._queue.put(None)  # stays at the end for any later reader
                return seen, False
            seen.append(line)
            self.lines.append(line)
            if marker in line:
                return seen, True


@dataclass
class Invocation:
    outputs: list[np.ndarray]
    log: RunnerLog
    wall_ms: float


class NativeServer:
    """One live ``executor_runner --server_mode`` process for one program: loaded once, then one
    execution per line written to its stdin, inputs and outputs through ``.bin`` files in ``folder``."""

    def __init__(self, runtime: NativeRuntime, spec: ProgramSpec, pte: Path, folder: Path) -> None:
        self.spec = spec
        self.timeout_s = runtime.timeout_s
        self.load_timeout_s = runtime.load_timeout_s
        folder.mkdir(parents=True, exist_ok=True)
        self.inputs = [folder / f"in-{i}.bin" for i in range(len(spec.inputs))]
        self.output_base = folder / "out"
        args = runner_args(
            runtime.binary,
            pte,
            self.inputs,
            output_base=self.output_base,
            server_mode=True,
            quiet_outputs=runtime.quiet_outputs,
        )
        try:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
        except OSError as error:
            cause = f"executor_runner {runtime.binary} cannot be started: {error}"
            failure = DeviceFailure(kind="runtime_unavailable", cause=cause)
            raise RuntimeFailure(failure.cause, failure) from None
        assert self.process.stdout is not None
        self.output = _Output(self.process.stdout)
        try:
            lines, ready = self.output.until(SERVER_READY, self.load_timeout_s)
        except TimeoutError:
            self._fail("out_of_time", f"did not load within {self.load_timeout_s:.0f} s", kill=True)
        if not ready:
            self._fail("refused_at_load", REFUSED_AT_LOAD)
        self.load_ms = parse_log("\n".join(lines)).load_ms

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.call(inputs)[0]

    def call(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], float]:
        """The outputs of one execution on ``inputs``, and the round trip's milliseconds (writing the
        inputs, the runner re-reading them, executing and writing its outputs, reading them back)."""
        if len(inputs) != len(self.spec.inputs):
            raise RuntimeFailure(
                f"program {self.spec.name} takes {len(self.spec.inputs)} inputs, was given {len(inputs)}"
            )
        start = time.perf_counter()
        for path, array, spec in zip(self.inputs, inputs, self.spec.inputs, strict=True):
            path.write_bytes(encode(array, spec))
        assert self.process.stdin is not None
        try:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
            _, done = self.output.until(SERVER_DONE, self.timeout_s)
        except BrokenPipeError:
            done = False
        except TimeoutError:
            self._fail("out_of_time", f"ran over {self.timeout_s:.0f} s", kill=True)
        if not done:
            self._fail("crashed", CRASHED_WHILE_RUNNING)
        folder = self.output_base.parent
        outputs = [decode(folder / f"out-{i}.bin", spec) for i, spec in enumerate(self.spec.outputs)]
        return outputs, (time.perf_counter() - start) * 1e3

    def _fail(self, kind: FailureKind, what: str, kill: bool = False) -> NoReturn:
        if kill:
            self.process.kill()
        try:
            returncode = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            returncode = self.process.wait()
        with contextlib.suppress(TimeoutError):
            self.output.until("\0", 5.0)  # what it printed last, up to the end of its output
        failure = classify_exit(kind, self.spec.name, returncode, list(self.output.lines), what)
        raise RuntimeFailure(failure.cause, failure)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()  # end of stdin ends the server's loop
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


class NativeProgram:
    """One ``.pte`` run by the binary: through its live server where the binary has server mode,
    else one process per call."""

    def __init__(
        self,
        runtime: NativeRuntime,
        spec: ProgramSpec,
        pte: Path,
        backend: str | None,
        load: ProgramLoad,
        server: NativeServer | None = None,
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.pte = pte
        self.backend = backend
        self.load = load
        self.server = server
        self._runtime = runtime

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.server is not None:
            return self.server(inputs)
        timing = self._runtime.per_call
        if timing is None:
            return self.invoke(inputs, executions=1).outputs
        executions = timing.warmup + 1  # the process's own warm-ups, then the timed execution
        run = self.invoke(inputs, executions)
        timing.took(self.name, run.log, executions)
        return run.outputs  # written after the last execution: the timed one's

    def invoke(self, inputs: Sequence[np.ndarray], executions: int) -> Invocation:
        """One process of ``executions`` executions on ``inputs``; the outputs it wrote after the last."""
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
            base = folder / "out"
            args = runner_args(
                self._runtime.binary,
                self.pte,
                files,
                executions=executions,
                output_base=base,
                quiet_outputs=self._runtime.quiet_outputs,
            )
            log, wall_ms = self._runtime.execute(args, self, "crashed", CRASHED_WHILE_RUNNING)
            values = [decode(folder / f"out-{i}.bin", s) for i, s in enumerate(self.spec.outputs)]
        return Invocation(outputs=values, log=log, wall_ms=wall_ms)


SHARED_MEMORY = Path("/dev/shm")
IO_DIR_ENV_VAR = "COVERFARM_NATIVE_IO_DIR"


def memory_folder() -> str | None:
    """Where a live server's ``.bin`` inputs and outputs go: ``COVERFARM_NATIVE_IO_DIR`` where set, else
    ``/dev/shm`` (memory, so that a call's hand-over is copies, not disk writes) where it is a writable
    folder, else the default temp folder."""
    if chosen := os.environ.get(IO_DIR_ENV_VAR):
        return chosen
    return str(SHARED_MEMORY) if SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK) else None


class NativeRuntime:
    """``executor_runner`` behind the runtime interface (``gpu_runner.runtime.ProgramRuntime``)."""

    kind: RuntimeKind = "native"
    SERVER_METHOD = (
        "wall clock of each whole action chunk through one live executor_runner --server_mode process "
        "per program (loaded once): each call writes its .bin inputs and one stdin line, the runner "
        "re-reads them, executes and rewrites its X-<i>.bin outputs, which are read back; loading excluded"
    )

    def __init__(
        self,
        binary: Path,
        timeout_s: float = CALL_TIMEOUT_S,
        declared: DeclaredSource | None = None,
        server_mode: bool = True,
        load_timeout_s: float | None = None,
    ) -> None:
        """``timeout_s`` bounds each call; ``load_timeout_s`` (default: the same) a server's load, which
        can take much longer than a call (a cold shader cache). ``server_mode=False`` runs one process
        per call even where the binary has server mode (to measure what server mode saves)."""
        check_binary(binary)
        self.binary = binary
        self.timeout_s = timeout_s
        self.load_timeout_s = timeout_s if load_timeout_s is None else load_timeout_s
        if declared is None:
            try:
                declared = DeclaredSource.from_environment()
            except ValueError as error:
                raise RuntimeFailure(
                    str(error), DeviceFailure(kind="runtime_unavailable", cause=str(error))
                ) from None
        self.declared = declared
        flags = help_flags(binary)
        self.server_mode = server_mode and "server_mode" in flags
        self.quiet_outputs = "print_output" in flags
        self._backends: list[str] | None = None
        self.per_call: PerCallTiming | None = None  # set while time_chunk times one process per call
        self._servers: list[NativeServer] = []
        self._work: tempfile.TemporaryDirectory[str] | None = None

    def registered_backends(self) -> list[str]:
        if self._backends is None:
            self._backends = scan_backends(self.binary)
        return self._backends

    def load_program(self, spec: ProgramSpec, pte: Path, backend: str | None) -> Program:
        """Load it once in a load-only process (``--num_executions=0``), so a refused program fails
        here with its cause and the run's first load is timed apart; then, with server mode, start the
        program's live process, whose load is the warm one."""
        probe = NativeProgram(self, spec, pte, backend, ProgramLoad(program=spec.name))
        log, wall_ms = self.execute(
            runner_args(self.binary, pte, executions=0, quiet_outputs=self.quiet_outputs),
            probe,
            "refused_at_load",
            REFUSED_AT_LOAD,
        )
        load = ProgramLoad(program=spec.name, first_ms=log.load_ms, first_wall_ms=wall_ms)
        server = None
        if self.server_mode:
            if self._work is None:
                self._work = tempfile.TemporaryDirectory(prefix="coverfarm-native.", dir=memory_folder())
            try:
                server = NativeServer(self, spec, pte, Path(self._work.name) / f"{len(self._servers)}")
            except RuntimeFailure as error:
                if error.failure is not None and backend:
                    error.failure.cause = self._with_backend_hint(error.failure.cause, backend)
                raise
            self._servers.append(server)
            load.warm_ms = server.load_ms
        return NativeProgram(self, spec, pte, backend, load, server)

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        if self._work is not None:
            self._work.cleanup()
            self._work = None

    def execute(
        self, args: list[str], program: NativeProgram, kind: FailureKind, what: str
    ) -> tuple[RunnerLog, float]:
        start = time.perf_counter()
        try:
            run = subprocess.run(args, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as expired:
            printed = _text(expired.stderr) + "\n" + _text(expired.stdout)
            failure = classify_exit(
                "out_of_time", program.name, None, printed.splitlines(), f"ran over {self.timeout_s:.0f} s"
            )
            failure.cause = f"program {program.name} {what}: executor_runner ran over {self.timeout_s:.0f} s"
            raise RuntimeFailure(failure.cause, failure) from None
        except OSError as error:
            failure = DeviceFailure(
                kind="runtime_unavailable", cause=f"executor_runner {self.binary} cannot be started: {error}"
            )
            raise RuntimeFailure(failure.cause, failure) from None
        wall_ms = (time.perf_counter() - start) * 1e3
        printed = run.stderr + "\n" + run.stdout
        log = parse_log(printed)
        if run.returncode != 0:
            failure = classify_exit(kind, program.name, run.returncode, printed.splitlines(), what)
            failure.cause = self._with_backend_hint(failure.cause, program.backend, log)
            raise RuntimeFailure(failure.cause, failure)
        return log, wall_ms

    def _with_backend_hint(self, cause: str, backend: str | None, log: RunnerLog | None = None) -> str:
        needed = RUNTIME_BACKEND.get(backend or "")
        missing = log is not None and needed in log.not_registered
        if needed and (missing or needed not in self.registered_backends()):
            return f"{cause} ({needed} is not linked into {self.binary})"
        return cause

    def time_chunk(self, work: ChunkWork, rules: TimingRules) -> TimedChunks:
        """With server mode, whole chunks through the live processes under ``rules``' bounds. Otherwise
        ``rules.min_chunks`` chunks (a fixed count), each call of a chunk one process that runs
        ``rules.warmup`` untimed executions and the timed one, timed from what the processes logged.
        Either way every timed chunk's outputs go through ``work.check``, outside the timed window."""

        def check(index: int, outputs: object, _ms: float) -> None:
            work.check(index, cast(Mapping[str, np.ndarray], outputs))

        if self.server_mode:
            timed = timed_loop(work.run, rules, after=check)
            return TimedChunks(**vars(timed), method=self.SERVER_METHOD)
        samples: list[float] = []
        timing = PerCallTiming(rules.warmup)
        for index in range(rules.min_chunks):
            timing.ms.clear()
            self.per_call = timing
            try:
                outputs = work.run(index)
            finally:
                self.per_call = None
            samples.append(float(sum(timing.ms)))
            check(index, outputs, samples[-1])
        return TimedChunks(
            samples_ms=samples,
            warmup=rules.warmup,
            seconds=sum(samples) / 1e3,
            stopped=MIN_REACHED
            + " (a fixed count: one process per call does not bound its executions in time)",
            method=timing.method(),
        )


@dataclass
class PerCallTiming:
    """The binary's own time of each call of the chunk being timed one process per call."""

    warmup: int  # untimed executions in each process before the timed one
    ms: list[float] = field(default_factory=list)
    calls: int = 0
    means: bool = False  # some binary logged only its total: its mean stands for the timed execution

    def took(self, name: str, log: RunnerLog, executions: int) -> None:
        ms, own = execution_ms(name, log, executions)
        self.ms.append(ms)
        self.calls = len(self.ms)
        self.means = self.means or not own

    def method(self) -> str:
        each = (
            "the binary's own time of its last execution"
            if not self.means
            else "the mean of its logged total (this executor_runner logs no per-execution times; "
            "warm-ups included)"
        )
        return (
            f"one executor_runner process per call of the plan ({self.calls} per chunk), each with "
            f"--num_executions={self.warmup + 1} ({self.warmup} untimed, then the timed one, whose outputs "
            f"it writes and which are checked); a sample is, summed over the calls, {each}; process start, "
            "program load and .bin file I/O excluded; load_ms is the wall time of one load-only process "
            "per program"
        )


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def execution_ms(name: str, log: RunnerLog, executions: int) -> tuple[float, bool]:
    """The binary's own milliseconds for the last of a process's ``executions``, and True; where it
    logged only its total, the mean of its executions, and False."""
    if len(log.iteration_ms) == executions and executions > 0:
        return log.iteration_ms[-1], True
    if log.total_execute_ms is None:
        raise RuntimeFailure(f"executor_runner logged no execution time for {name}")
    return log.total_execute_ms / max(log.executions or executions, 1), False
