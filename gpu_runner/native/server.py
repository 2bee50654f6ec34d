"""Server mode: one live ``executor_runner --server_mode`` process per program (ExecuTorch 1.4.1 and
later), loaded once, then one execution per line written to its stdin: it re-reads its ``--inputs``
files, runs, rewrites its ``--output_file`` outputs and logs ``SERVER MODE DONE`` (``NativeServer``);
its merged output read line by line by a thread (``_Output``)."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NoReturn, Protocol

import numpy as np

from coverfarm.bundle_manifest import ProgramSpec
from coverfarm.device_result import DeviceFailure, FailureKind
from coverfarm.device_words import CRASHED_WHILE_RUNNING, REFUSED_AT_LOAD
from gpu_runner.native.command import runner_args
from gpu_runner.native.failures import TAIL_LINES, classify_exit
from gpu_runner.native.log import parse_log
from gpu_runner.native.tensor_io import decode, encode
from gpu_runner.runtime import RuntimeFailure

# What a server-mode executor_runner logs once its program is loaded, and after each execution.
SERVER_READY = "Running in server mode"
SERVER_DONE = "SERVER MODE DONE"


class ServerHost(Protocol):
    """What a server takes of its runtime (``gpu_runner.native.runtime.NativeRuntime``)."""

    binary: Path
    timeout_s: float
    load_timeout_s: float
    quiet_outputs: bool


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


class NativeServer:
    """One live ``executor_runner --server_mode`` process for one program: loaded once, then one
    execution per line written to its stdin, inputs and outputs through ``.bin`` files in ``folder``."""

    def __init__(self, runtime: ServerHost, spec: ProgramSpec, pte: Path, folder: Path) -> None:
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
