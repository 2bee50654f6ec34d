"""The profile run: a bundle's action chunk once more, with a runtime whose event tracer writes ETDumps.

A host declares its profiling runtime as it declares its timing one: ``COVERFARM_PROFILING_EXECUTOR_RUNNER``
names a second ``executor_runner`` built with the event tracer on (``EXECUTORCH_ENABLE_EVENT_TRACER=ON``,
and for Vulkan a ``VULKAN_QUERY_POOL_SIZE`` large enough for the program: the tracer writes 2 GPU
timestamps per dispatch). The timed runs stay on the binary built without it. Each program runs in its
own process, ``--num_executions`` twice its calls per chunk on the test case's inputs
(``inputs/<program>/*.bin``), ``--etdump_path`` its ETDump; the first half is a warm-up the figures leave
out. The hand-over between programs is not measured that way (each program's calls run back to back in
one process).

``COVERFARM_PROFILING_EXECUTOR_RUNNER=wheel-etdump`` is the stand-in (``WheelEtdumpProfiler``): the
executorch wheel's own pybindings with ``enable_etdump``, which write a real ETDump of the portable and
XNNPACK kernels. It runs the plan's chunk on frame 0 in this process twice, a warm-up and the profiled
chunk, whose wall clock, and with it the hand-over, is measured. It loads torch (the wheel's pybindings
do): it runs in a child process of its own (``python -m gpu_runner.profiling``), never in the runner's,
bounded like a device run.

The profile is never a latency: its milliseconds are taken with the tracer on. Reading the ETDumps
(``executorch.devtools.Inspector``) needs torch, so it happens elsewhere (``worker/profile/``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from coverfarm.bundle_manifest import BundleError, Manifest, ProgramSpec, load_manifest
from coverfarm.device_result import DeviceResult
from coverfarm.profile import ProfileEtdump, ProfileRun, ProfileSummary
from gpu_runner.native.binary import help_flags
from gpu_runner.native.command import runner_args
from gpu_runner.runtime import RuntimeFailure

ENV_VAR = "COVERFARM_PROFILING_EXECUTOR_RUNNER"
STAND_IN = "wheel-etdump"  # the value that declares the wheel's pybindings as the (stand-in) profiler
ETDUMP_FLAG = "etdump_path"


class Profiler(Protocol):
    description: str
    stand_in: bool

    def profile(self, bundle: Path, manifest: Manifest, folder: Path, timeout_s: float) -> ProfileRun: ...


def configured(explicit: str | None = None) -> str | None:
    """The declared profiling runtime (``--profiling-executor-runner`` or the environment), or None."""
    value = explicit if explicit is not None else os.environ.get(ENV_VAR, "")
    return value.strip() or None


def profiler_for(value: str) -> Profiler:
    """The profiler a declared value names; a binary that cannot profile raises with the cause."""
    if value == STAND_IN:
        return WheelEtdumpProfiler()
    return NativeProfiler(Path(value))


def _etdump(program: str, executions: int, warmup: int, path: Path) -> ProfileEtdump:
    data = path.read_bytes()
    return ProfileEtdump(
        program=program,
        executions=executions,
        warmup=warmup,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        etdump_b64=base64.b64encode(data).decode("ascii"),
    )


class NativeProfiler:
    """A profiling ``executor_runner`` (event tracer on): one process per program, one ETDump each."""

    stand_in = False

    def __init__(self, binary: Path) -> None:
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise RuntimeFailure(f"{ENV_VAR}: {binary} is not an executable file")
        if ETDUMP_FLAG not in help_flags(binary):
            raise RuntimeFailure(
                f"{ENV_VAR}: {binary} has no --etdump_path: it was built without the event tracer "
                "(rebuild it with EXECUTORCH_ENABLE_EVENT_TRACER=ON)"
            )
        self.binary = binary
        self.description = f"profiling executor_runner {binary} (event tracer on)"

    def profile(self, bundle: Path, manifest: Manifest, folder: Path, timeout_s: float) -> ProfileRun:
        etdumps = []
        for spec in manifest.programs:
            executions = max(1, sum(1 for c in manifest.plan.calls if c.program == spec.name))
            if len(spec.raw_inputs) != len(spec.inputs):
                raise BundleError(f"the manifest gives {spec.name} no raw test-case inputs to profile with")
            out = folder / f"{spec.name}.etdp"
            args = runner_args(
                self.binary,
                bundle / spec.pte,
                [bundle / p for p in spec.raw_inputs],
                executions=2 * executions,
            )
            args.append(f"--{ETDUMP_FLAG}={out}")
            run = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
            if run.returncode != 0 or not out.is_file():
                tail = " ".join((run.stderr + run.stdout).strip().splitlines()[-3:])
                raise RuntimeFailure(
                    f"program {spec.name}: the profiling executor_runner exited with status "
                    f"{run.returncode} and {'no ETDump' if not out.is_file() else 'an ETDump'}: {tail}"
                )
            etdumps.append(_etdump(spec.name, executions, executions, out))
        return ProfileRun(
            status="ok",
            runtime=self.description,
            etdumps=etdumps,
            handover_note="not measured: each program's calls run back to back in a process of its own",
        )


class WheelProgram:
    """One program loaded by the wheel's pybindings with its ETDump on (and a debug buffer of
    ``debug_buffer_size`` bytes for intermediate outputs, where given), called with numpy arrays."""

    def __init__(self, spec: ProgramSpec, pte: Path, debug_buffer_size: int = 0) -> None:
        from executorch.extension.pybindings.portable_lib import _load_for_executorch

        # The pybindings import torch and take its tensors (gpu_runner/runtime.py says why); this
        # borrows the tensor type they loaded, in the profile's own child process.
        self.name, self.spec, self._torch = spec.name, spec, sys.modules["torch"]
        self.module = _load_for_executorch(str(pte), enable_etdump=True, debug_buffer_size=debug_buffer_size)
        self.executions = 0

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.executions += 1
        values = [self._torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
        return [np.asarray(o.numpy()) for o in self.module.run_method("forward", tuple(values))]


class WheelEtdumpProfiler:
    """The stand-in: the executorch wheel's pybindings with ``enable_etdump`` (a real ETDump of the
    wheel's portable and XNNPACK kernels), the plan's chunk on frame 0 in this process."""

    stand_in = True
    description = (
        "stand-in: the executorch wheel's pybindings with enable_etdump (portable and XNNPACK kernels)"
    )

    def profile(self, bundle: Path, manifest: Manifest, folder: Path, timeout_s: float) -> ProfileRun:
        from coverfarm.bundle_manifest import read_npz
        from gpu_runner.bundle_plan import _frame_env, run_plan

        try:
            programs = {p.name: WheelProgram(p, bundle / p.pte) for p in manifest.programs}
        except ImportError as error:
            raise RuntimeFailure(f"the executorch wheel's pybindings are not importable: {error}") from None
        except RuntimeError as error:
            raise RuntimeFailure(f"the wheel's runtime refused a program: {error}") from None
        env = _frame_env(manifest, read_npz(bundle, "frames.npz"), read_npz(bundle, "constants.npz"), 0)
        run_plan(manifest.plan, programs, env)  # the warm-up chunk
        warmup = {name: program.executions for name, program in programs.items()}
        start = time.perf_counter()
        run_plan(manifest.plan, programs, env)
        chunk_ms = (time.perf_counter() - start) * 1e3
        etdumps = []
        for name, program in programs.items():
            out = folder / f"{name}.etdp"
            program.module.write_etdump_result_to_file(str(out))
            etdumps.append(_etdump(name, program.executions - warmup[name], warmup[name], out))
        return ProfileRun(
            status="ok", runtime=self.description, stand_in=True, chunk_ms=chunk_ms, etdumps=etdumps
        )


def profile_bundle(bundle: Path, declared: str, timeout_s: float) -> ProfileRun:
    """One profile run of ``bundle`` (verified by its caller) in this process; a failure is a result."""
    try:
        profiler = profiler_for(declared)
    except RuntimeFailure as error:
        return ProfileRun(status="failed", error=str(error), runtime=declared)
    try:
        manifest = load_manifest(bundle)
        with tempfile.TemporaryDirectory(prefix="coverfarm-profile.") as work:
            return profiler.profile(bundle, manifest, Path(work), timeout_s)
    except (RuntimeFailure, BundleError, RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return ProfileRun(
            status="failed", error=str(error), runtime=profiler.description, stand_in=profiler.stand_in
        )


def run_profile_process(bundle: Path, declared: str, timeout_s: float) -> ProfileRun:
    """``profile_bundle`` in a fresh process (``python -m gpu_runner.profiling``), bounded by
    ``timeout_s`` as a device run is; one that runs out or writes nothing is a failed profile run."""
    with tempfile.TemporaryDirectory(prefix="coverfarm-profile.") as folder:
        out = Path(folder) / "profile.json"
        command = [sys.executable, "-m", "gpu_runner.profiling", str(bundle), "--out", str(out)]
        command += ["--profiler", declared, "--timeout", f"{timeout_s:g}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return ProfileRun(
                status="failed", error=f"did not finish within {timeout_s:g} s", runtime=declared
            )
        if not out.is_file():
            tail = " ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
            return ProfileRun(
                status="failed",
                error=f"the profile process exited with status {done.returncode}: {tail}",
                runtime=declared,
            )
        return ProfileRun.model_validate_json(out.read_text())


# A timed run that got this far loaded and ran every program: its profile can be taken.
PROFILED_FAILURES = frozenset({"wrong_output", "output_not_stable"})


def summarize_process(run: ProfileRun, bundle: Path, timeout_s: float) -> ProfileRun:
    """``run`` with where its time went, read in a child process of its own
    (``python -m worker.profile.summarize``: the Inspector needs torch, which the runner never loads);
    where that cannot be done here, ``summary_note`` says why."""
    with tempfile.TemporaryDirectory(prefix="coverfarm-profile.") as folder:
        given, out = Path(folder) / "profile.json", Path(folder) / "summary.json"
        given.write_text(run.model_dump_json())
        command = [sys.executable, "-m", "worker.profile.summarize", "--bundle", str(bundle)]
        command += ["--profile", str(given), "--out", str(out)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return run.model_copy(update={"summary_note": f"not read within {timeout_s:g} s"})
        if not out.is_file():
            tail = " ".join(done.stderr.strip().splitlines()[-2:]) or f"status {done.returncode}"
            note = f"not read on this host (executorch.devtools' Inspector, with torch): {tail}"
            return run.model_copy(update={"summary_note": note})
        return run.model_copy(update={"summary": ProfileSummary.model_validate_json(out.read_text())})


def profile_result(
    result: DeviceResult, bundle: Path, declared: str | None, timeout_s: float
) -> DeviceResult:
    """``result`` with its bundle's profile run (``declared``'s profiling runtime, after the timed runs,
    each step bounded by ``timeout_s`` as a device run is), when a profiling runtime is declared and the
    timed run loaded and ran every program; else ``result`` unchanged."""
    if declared is None or (result.failure is not None and result.failure.kind not in PROFILED_FAILURES):
        return result
    run = run_profile_process(bundle, declared, timeout_s)
    if run.status == "ok":
        run = summarize_process(run, bundle, timeout_s)
    return result.model_copy(update={"profile": run})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.profiling")
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profiler", required=True, help=f"a profiling executor_runner, or {STAND_IN}")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each profiling process")
    args = parser.parse_args(argv)
    run = profile_bundle(args.bundle, args.profiler, args.timeout)
    args.out.write_text(run.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
