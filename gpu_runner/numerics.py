"""The numerics run: each program of a bundle once more on its test case, its intermediate outputs captured.

It uses the host's declared profiling runtime (``COVERFARM_PROFILING_EXECUTOR_RUNNER``,
``gpu_runner/profiling.py``), whose event tracer writes the ETDump; the intermediate outputs go into a
debug buffer beside it (``EventTracerDebugLogLevel::kIntermediateOutputs``):

- ``wheel-etdump``, the stand-in: the executorch wheel's pybindings, ``_load_for_executorch(...,
  enable_etdump=True, debug_buffer_size=N)``, then ``write_etdump_result_to_file(etdump, debug)``. It
  logs the output of every op it runs on its portable kernels and the outputs of each delegate call,
  nothing from inside a delegate (``coverfarm.numerics.WHEEL_GRAIN``).
- a profiling ``executor_runner`` that can capture them: ``--dump_intermediate_outputs``,
  ``--debug_buffer_size`` and ``--debug_output_path`` beside ``--etdump_path`` (the flags of
  ExecuTorch's devtools ``example_runner``, which reads bundled programs only; the portable
  ``executor_runner`` has ``--etdump_path`` alone). A binary without them is refused with that cause.

Each program runs once on its test case's inputs (``testcase.npz``), so that eager can be run on the same
inputs from the program's ETRecord (``worker/profile/numerics.py``); a program's departure is its own,
never one handed over from the program before it. Runs in a child process of its own (``python -m
gpu_runner.numerics``: the wheel's pybindings load torch), bounded like a device run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from base64 import b64encode
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from coverfarm.bundle_manifest import BundleError, Manifest, load_manifest
from coverfarm.device_result import DeviceResult
from coverfarm.numerics import NumericsDump, NumericsRun, NumericsSummary, Trigger
from gpu_runner.native.binary import help_flags
from gpu_runner.native.command import runner_args
from gpu_runner.profiling import ENV_VAR, PROFILED_FAILURES, STAND_IN, WheelProgram
from gpu_runner.runtime import RuntimeFailure

# The debug buffer each program's intermediate outputs are written into; the runtime stops the process
# when it runs out (buffer_data_sink.cpp: "Ran out of space to store intermediate outputs").
DEBUG_BUFFER_ENV = "COVERFARM_NUMERICS_DEBUG_BUFFER_MB"
DEFAULT_DEBUG_BUFFER_MB = 256
# What a result carries of the ETDumps and debug buffers, together; past it only sizes and hashes stay.
KEEP_BYTES = 16 * 1024 * 1024
NATIVE_FLAGS = ("etdump_path", "dump_intermediate_outputs", "debug_buffer_size", "debug_output_path")
OUT_OF_SPACE = "Ran out of space to store intermediate outputs"

Mode = str  # "auto": after a wrong output; "always"; "never"
MODES = ("auto", "always", "never")


def debug_buffer_bytes() -> int:
    value = os.environ.get(DEBUG_BUFFER_ENV, "").strip()
    try:
        mb = float(value) if value else DEFAULT_DEBUG_BUFFER_MB
    except ValueError:
        raise RuntimeFailure(f"{DEBUG_BUFFER_ENV}={value!r} is not a number of MB") from None
    if mb <= 0:
        raise RuntimeFailure(f"{DEBUG_BUFFER_ENV}={value!r} is not a positive number of MB")
    return int(mb * 1024 * 1024)


class Capturer(Protocol):
    description: str
    stand_in: bool

    def capture(self, bundle: Path, manifest: Manifest, folder: Path, timeout_s: float) -> list[Path]:
        """Write ``<program>.etdp`` and ``<program>.debug`` per program into ``folder``."""
        ...


def _testcase_inputs(bundle: Path, manifest: Manifest) -> dict[str, list[object]]:
    from coverfarm.bundle_manifest import read_npz, take_array

    testcase = read_npz(bundle, "testcase.npz")
    return {
        spec.name: [
            take_array(testcase, f"{spec.name}/in/{i}", "testcase.npz") for i in range(len(spec.inputs))
        ]
        for spec in manifest.programs
    }


class WheelCapturer:
    """The stand-in: the executorch wheel's pybindings with a debug buffer, in this process."""

    stand_in = True
    description = (
        "stand-in: the executorch wheel's pybindings with enable_etdump and a debug buffer "
        "(portable and XNNPACK kernels)"
    )

    def capture(self, bundle: Path, manifest: Manifest, folder: Path, timeout_s: float) -> list[Path]:
        size = debug_buffer_bytes()
        inputs = _testcase_inputs(bundle, manifest)
        written = []
        for spec in manifest.programs:
            try:
                program = WheelProgram(spec, bundle / spec.pte, debug_buffer_size=size)
            except ImportError as error:
                raise RuntimeFailure(
                    f"the executorch wheel's pybindings are not importable: {error}"
                ) from None
            except RuntimeError as error:
                raise RuntimeFailure(f"the wheel's runtime refused {spec.name}: {error}") from None
            program(inputs[spec.name])  # type: ignore[arg-type]
            out = folder / f"{spec.name}.etdp"
            program.module.write_etdump_result_to_file(str(out), str(folder / f"{spec.name}.debug"))
            written.append(out)
        return written


class NativeCapturer:
    """A profiling ``executor_runner`` that captures intermediate outputs: one process per program."""

    stand_in = False

    def __init__(self, binary: Path) -> None:
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise RuntimeFailure(f"{ENV_VAR}: {binary} is not an executable file")
        missing = [flag for flag in NATIVE_FLAGS if flag not in help_flags(binary)]
        if missing:
            raise RuntimeFailure(
                f"{ENV_VAR}: {binary} cannot capture intermediate outputs: it has no "
                + ", ".join(f"--{flag}" for flag in missing)
                + " (ExecuTorch's portable executor_runner has --etdump_path only; the devtools "
                "example_runner has the others, for bundled programs)"
            )
        self.binary = binary
        self.description = f"profiling executor_runner {binary} (event tracer on, intermediate outputs)"

    def capture(self, bundle: Path, manifest: Manifest, folder: Path, timeout_s: float) -> list[Path]:
        size = debug_buffer_bytes()
        written = []
        for spec in manifest.programs:
            if len(spec.raw_inputs) != len(spec.inputs):
                raise BundleError(f"the manifest gives {spec.name} no raw test-case inputs to run")
            out, debug = folder / f"{spec.name}.etdp", folder / f"{spec.name}.debug"
            args = runner_args(self.binary, bundle / spec.pte, [bundle / p for p in spec.raw_inputs])
            args += [
                f"--etdump_path={out}",
                "--dump_intermediate_outputs",
                f"--debug_buffer_size={size}",
                f"--debug_output_path={debug}",
            ]
            run = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
            if run.returncode != 0 or not out.is_file() or not debug.is_file():
                raise RuntimeFailure(_exit_words(spec.name, run.returncode, run.stderr + run.stdout))
            written.append(out)
        return written


def _exit_words(program: str, status: int, said: str) -> str:
    if OUT_OF_SPACE in said:
        return (
            f"program {program}: its intermediate outputs do not fit the debug buffer "
            f"({debug_buffer_bytes() / 2**20:g} MB, {DEBUG_BUFFER_ENV})"
        )
    tail = " ".join(said.strip().splitlines()[-3:])
    return f"program {program}: the runtime exited with status {status} and no ETDump: {tail}"


def capturer_for(value: str) -> Capturer:
    if value == STAND_IN:
        return WheelCapturer()
    return NativeCapturer(Path(value))


def _dump(program: str, etdump: Path, debug: Path) -> tuple[NumericsDump, bytes, bytes]:
    data, buffer = etdump.read_bytes(), debug.read_bytes()
    used = buffer.rstrip(b"\0")
    dump = NumericsDump(
        program=program,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        debug_bytes=len(buffer),
        debug_sha256=hashlib.sha256(buffer).hexdigest(),
    )
    return dump, data, used


def capture_bundle(
    bundle: Path, declared: str, trigger: Trigger, timeout_s: float, folder: Path | None = None
) -> NumericsRun:
    """One numerics run of ``bundle`` (verified by its caller) in this process; a failure is a result.
    The ETDumps and debug buffers are left in ``folder`` (``<program>.etdp``, ``<program>.debug``) when
    given, for the comparison, whether or not the result keeps them."""
    try:
        capturer = capturer_for(declared)
    except RuntimeFailure as error:
        return NumericsRun(status="failed", trigger=trigger, error=str(error), runtime=declared)
    try:
        manifest = load_manifest(bundle)
        with tempfile.TemporaryDirectory(prefix="coverfarm-numerics.") as work:
            where = folder or Path(work)
            capturer.capture(bundle, manifest, where, timeout_s)
            parts = [
                _dump(s.name, where / f"{s.name}.etdp", where / f"{s.name}.debug") for s in manifest.programs
            ]
    except (RuntimeFailure, BundleError, RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return NumericsRun(
            status="failed",
            trigger=trigger,
            error=str(error),
            runtime=capturer.description,
            stand_in=capturer.stand_in,
        )
    keep = sum(len(data) + len(used) for _, data, used in parts) <= KEEP_BYTES
    dumps = [
        dump.model_copy(
            update={"etdump_b64": b64encode(data).decode(), "debug_b64": b64encode(used).decode()}
            if keep
            else {"kept": False}
        )
        for dump, data, used in parts
    ]
    return NumericsRun(
        status="ok", trigger=trigger, runtime=capturer.description, stand_in=capturer.stand_in, dumps=dumps
    )


def run_capture_process(
    bundle: Path, declared: str, trigger: Trigger, timeout_s: float, captures: Path | None = None
) -> NumericsRun:
    """``capture_bundle`` in a fresh process (``python -m gpu_runner.numerics``), bounded by
    ``timeout_s`` as a device run is, its files left in ``captures`` when given; one that runs out, or
    dies (a debug buffer run out), is a failed numerics run with the cause."""
    with tempfile.TemporaryDirectory(prefix="coverfarm-numerics.") as folder:
        out = Path(folder) / "numerics.json"
        command = [sys.executable, "-m", "gpu_runner.numerics", str(bundle), "--out", str(out)]
        command += ["--runtime", declared, "--trigger", trigger, "--timeout", f"{timeout_s:g}"]
        command += ["--captures", str(captures)] if captures is not None else []
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return NumericsRun(
                status="failed",
                trigger=trigger,
                error=f"did not finish within {timeout_s:g} s",
                runtime=declared,
            )
        if not out.is_file():
            said = done.stderr + done.stdout
            error = (
                f"the intermediate outputs do not fit the debug buffer ({debug_buffer_bytes() / 2**20:g} MB, "
                f"{DEBUG_BUFFER_ENV})"
                if OUT_OF_SPACE in said
                else f"the numerics process exited with status {done.returncode}: "
                + (" ".join(said.strip().splitlines()[-3:]) or "no output")
            )
            return NumericsRun(status="failed", trigger=trigger, error=error, runtime=declared)
        return NumericsRun.model_validate_json(out.read_text())


def compare_process(
    run: NumericsRun, bundle: Path, timeout_s: float, captures: Path | None = None
) -> NumericsRun:
    """``run`` with which op goes wrong, read in a child process of its own (``python -m
    worker.profile.numerics``: the Inspector and eager need torch, which the runner never loads), from
    the files in ``captures`` where given, else from those the run keeps; where that cannot be done
    here, ``summary_note`` says why."""
    if captures is None and not all(d.kept for d in run.dumps):
        total = sum(d.bytes + d.debug_bytes for d in run.dumps)
        note = (
            f"not read: the capture ({total / 2**20:.1f} MB) is over the cap a result carries "
            f"({KEEP_BYTES / 2**20:g} MB)"
        )
        return run.model_copy(update={"summary_note": note})
    with tempfile.TemporaryDirectory(prefix="coverfarm-numerics.") as folder:
        given, out = Path(folder) / "numerics.json", Path(folder) / "summary.json"
        given.write_text(run.model_dump_json())
        command = [sys.executable, "-m", "worker.profile.numerics", "--bundle", str(bundle)]
        command += ["--numerics", str(given), "--out", str(out)]
        command += ["--captures", str(captures)] if captures is not None else []
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return run.model_copy(update={"summary_note": f"not compared within {timeout_s:g} s"})
        if not out.is_file():
            tail = " ".join(done.stderr.strip().splitlines()[-2:]) or f"status {done.returncode}"
            note = f"not compared on this host (executorch.devtools' Inspector, with torch): {tail}"
            return run.model_copy(update={"summary_note": note})
        return run.model_copy(update={"summary": NumericsSummary.model_validate_json(out.read_text())})


def trigger_of(result: DeviceResult, mode: Mode) -> Trigger | None:
    """Why ``result`` gets a numerics run under ``mode``, or None: ``auto`` after a wrong output,
    ``always`` after any run that loaded and ran every program, ``never`` not at all."""
    failure = result.failure
    if mode == "never" or (failure is not None and failure.kind not in PROFILED_FAILURES):
        return None
    if failure is not None and failure.kind == "wrong_output":
        return "wrong_output"
    return "requested" if mode == "always" else None


def numerics_result(
    result: DeviceResult, bundle: Path, declared: str | None, timeout_s: float, mode: Mode = "auto"
) -> DeviceResult:
    """``result`` with its bundle's numerics run (``declared``'s runtime, after the timed runs, each step
    bounded by ``timeout_s`` as a device run is) when ``mode`` asks for one; else ``result`` unchanged."""
    trigger = trigger_of(result, mode)
    if declared is None or trigger is None:
        return result
    with tempfile.TemporaryDirectory(prefix="coverfarm-numerics.") as captures:
        run = run_capture_process(bundle, declared, trigger, timeout_s, Path(captures))
        if run.status == "ok":
            run = compare_process(run, bundle, timeout_s, Path(captures))
    return result.model_copy(update={"numerics": run})


_TRIGGERS = ("wrong_output", "requested")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.numerics")
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runtime", required=True, help=f"a profiling executor_runner, or {STAND_IN}")
    parser.add_argument("--trigger", choices=_TRIGGERS, required=True)
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each runtime process")
    parser.add_argument("--captures", type=Path, help="leave the ETDumps and debug buffers here")
    args = parser.parse_args(argv)
    run = capture_bundle(args.bundle, args.runtime, args.trigger, args.timeout, args.captures)
    args.out.write_text(run.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
