"""``executor_runner`` behind the runtime interface (``NativeRuntime``, ``gpu_runner.runtime.ProgramRuntime``)
and its programs (``NativeProgram``): a load-only process per program, then each program through its live
server (``gpu_runner.native.server``) where the binary has server mode, else one process per call
(``NativeProgram.invoke``, ``NativeRuntime.execute``), timed by the binary's own log
(``gpu_runner.native.timing``); a chunk timed either way with every timed chunk's outputs checked."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from coverfarm.bundle_manifest import ProgramSpec
from coverfarm.device_result import DeviceFailure, FailureKind, ProgramLoad, TimingRules
from coverfarm.device_words import CRASHED_WHILE_RUNNING, REFUSED_AT_LOAD
from farmrun.stats import MIN_REACHED, timed_loop
from gpu_runner.declared_source import DeclaredSource
from gpu_runner.native.binary import check_binary, help_flags, scan_backends
from gpu_runner.native.command import runner_args
from gpu_runner.native.failures import classify_exit
from gpu_runner.native.log import RunnerLog, parse_log
from gpu_runner.native.server import NativeServer
from gpu_runner.native.tensor_io import decode, encode, memory_folder
from gpu_runner.native.timing import PerCallTiming
from gpu_runner.runtime import (
    RUNTIME_BACKEND,
    ChunkWork,
    Program,
    RuntimeFailure,
    RuntimeKind,
    TimedChunks,
)

CALL_TIMEOUT_S = 900.0


@dataclass
class Invocation:
    outputs: list[np.ndarray]
    log: RunnerLog
    wall_ms: float


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


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
