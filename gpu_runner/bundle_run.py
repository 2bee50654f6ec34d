"""Run one bundle on this host: verify its address, replay its test case, check 16 frames, time a chunk.

numpy and an ExecuTorch runtime only, behind ``gpu_runner.runtime.ProgramRuntime``: the Python
``executorch.runtime`` or a native ``executor_runner`` (``gpu_runner.runtime_choice`` picks; the result
records which, and how its latency was measured). Whatever goes wrong in the runtime (a backend that
is not registered, a program it refuses) becomes a failed result with its cause, not a crash; a bundle
whose content does not match its address is refused before anything is loaded.

The timed chunks cycle over the bundle's frames (``TimingRules.inputs``; frame 0 alone as an option), as
the eager baseline does, under the rules' time bounds, holding the host's timing lock when given one
(``farmrun.hostlock``) and recording the host's load meanwhile. Every timed chunk's outputs are
compared with the reference of its frame: a run whose outputs differ on some executions fails
``output not stable: k of N executions differ``. This is one replica in one process;
``gpu_runner.replicas`` runs several in fresh processes (``python -m gpu_runner.bundle_run``) and
judges them together.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from coverfarm import backends
from coverfarm.bundle_manifest import BundleError, Manifest, Plan, load_manifest
from coverfarm.device_result import (
    DeviceFailure,
    DeviceResult,
    FramesCheck,
    LatencyStats,
    LoadReport,
    OutputCheck,
    OutputStability,
    ProbeReport,
    ProgramCheck,
    RuntimeIdentity,
    TimingRules,
    Tolerance,
)
from coverfarm.digest import bundle_digest
from farmrun.hostload import LoadMeter, host_id
from farmrun.hostlock import HostLock, held
from farmrun.stats import latency_stats, mark_isolation, replica
from gpu_runner import runtime
from gpu_runner import runtime as runtime_module  # ``run_bundle``'s ``runtime`` argument hides the name
from gpu_runner.native_runtime import NativeProgram, NativeRuntime, shader_cache_state
from gpu_runner.probe import probe
from gpu_runner.runtime_choice import CHOICES, RuntimeChoice, choose_runtime

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

Programs = Mapping[str, runtime.Program]


def verify(bundle: Path, expected: str | None = None) -> str:
    """The bundle's sha256, checked against ``expected`` (by default the directory's name, as stored)."""
    if not (bundle / "manifest.json").is_file():
        raise BundleError(f"{bundle} is not a bundle (no manifest.json)")
    expected = (expected or bundle.resolve().name).lower()
    if not _SHA256.match(expected):
        raise BundleError(f"cannot verify {bundle}: its name is not a sha256; give the expected sha256")
    actual = bundle_digest(bundle)
    if actual != expected:
        raise BundleError(f"bundle {bundle} is refused: its content hashes to {actual}, not {expected}")
    return actual


def run_bundle(
    bundle: Path,
    *,
    expected_sha256: str | None = None,
    rules: TimingRules | None = None,
    runtime: RuntimeChoice | runtime_module.ProgramRuntime = "auto",
    executor_runner: Path | None = None,
    lock: HostLock | None = None,
    lock_wait_s: float = 0.0,
    runner_id: int | None = None,
    server_mode: bool = True,
) -> DeviceResult:
    """``runtime``: ``auto``, ``python``, ``native`` or a runtime object; ``executor_runner``: the native
    binary (default ``COVERFARM_EXECUTOR_RUNNER``); ``lock``: the host's timing lock, held exclusive for
    the whole run (waiting at most ``lock_wait_s`` for the stages that hold it); ``gpu_runner.replicas``
    holds it around all its replicas instead and gives them none; ``server_mode=False``: one native
    process per call."""
    rules = rules or TimingRules()
    try:
        sha = verify(bundle, expected_sha256)
        manifest = load_manifest(bundle)
    except BundleError as error:
        return _finish(
            DeviceResult(
                bundle_sha256=expected_sha256 or bundle.name,
                status="failed",
                error=str(error),
                failure=DeviceFailure(kind="bundle", cause=str(error)),
            )
        )
    try:
        engine = (
            choose_runtime(runtime, manifest.backend, executor_runner, server_mode)
            if isinstance(runtime, str)
            else runtime
        )
    except runtime_module.RuntimeFailure as error:
        return _finish(
            DeviceResult(
                bundle_sha256=sha,
                policy=manifest.policy,
                backend=manifest.backend,
                status="failed",
                error=str(error),
                failure=error.failure or DeviceFailure(kind="runtime_unavailable", cause=str(error)),
            )
        )
    report = probe(python_runtime=engine.kind == "python", executor_runner=executor_runner)
    result = DeviceResult(
        bundle_sha256=sha,
        policy=manifest.policy,
        backend=manifest.backend,
        device_class=_device_class(report.device_classes, manifest.backend),
        runtime=engine.kind,
        runtime_identity=runtime_identity(engine, report, manifest),
        probe=report,
        tolerance=Tolerance(rtol=manifest.tolerance.rtol, atol=manifest.tolerance.atol),
        status="ok",
        runner_id=runner_id,
        host_id=host_id(),
    )
    try:
        with held(lock, lock_wait_s) as isolation:
            if isinstance(engine, runtime_module.PythonRuntime):
                engine.prepare()  # import it first, so this times loading the programs and nothing else
            cache = shader_cache_state() if manifest.backend == "vulkan" else None
            start = time.perf_counter()
            programs = {
                p.name: engine.load_program(p, bundle / p.pte, manifest.backend) for p in manifest.programs
            }
            load_ms = (time.perf_counter() - start) * 1e3
            result.load = load_report(programs, cache)
            result.testcase = replay_testcase(bundle, manifest, programs)
            result.frames = check_frames(bundle, manifest, programs)
            result.latency = time_chunk(bundle, manifest, programs, rules, load_ms, engine=engine)
        mark_isolation(result.latency, isolation)
        result.precision = runtime_precision(manifest.backend)
    except (runtime_module.RuntimeFailure, BundleError) as error:
        result.status, result.error = "failed", str(error)
        failure = error.failure if isinstance(error, runtime_module.RuntimeFailure) else None
        result.failure = failure or DeviceFailure(
            kind="bundle" if isinstance(error, BundleError) else "crashed", cause=str(error)
        )
        return _finish(result)
    finally:
        engine.close()
    wrong = _verdict(result, manifest.tolerance.atol, manifest.tolerance.rtol)
    if wrong:
        result.status, result.error = "failed", wrong
        result.failure = _wrong_output(result, wrong)
    return _finish(result)


def runtime_identity(
    engine: runtime_module.ProgramRuntime, report: ProbeReport, manifest: Manifest
) -> RuntimeIdentity:
    """Which ExecuTorch runs the bundle against which exported it: the wheel's version for the Python
    runtime, the declared source for a native binary (with the upstream pull requests applied on top of
    it); ``matches_export`` is False when they differ."""
    exported = manifest.versions.get("executorch")
    patches: list[str] = []
    if isinstance(engine, NativeRuntime):
        version, commit = engine.declared.version, engine.declared.commit
        patches = list(engine.declared.patches)
        source = f"{'source' if commit is None else commit[:10]} ({version or 'version not declared'})"
        described = f"native executor_runner built from {source}"
        if patches:
            described += f" with {', '.join(patches)} applied (a candidate fix)"
    else:
        version, commit = report.executorch.version, None
        described = f"executorch {version or '(version unknown)'} wheel"
    matches = None if version is None or exported is None else version == exported
    note = f"runtime {described}; export executorch {exported or '(unknown)'}"
    if matches is False:
        note += ": runtime and export differ"
    return RuntimeIdentity(
        kind=engine.kind,
        version=version,
        commit=commit,
        patches=patches,
        export_version=exported,
        matches_export=matches,
        note=note,
    )


def load_report(programs: Programs, shader_cache: str | None) -> LoadReport | None:
    """The binary's own load figures per program (the native runtime), else none."""
    loads = [p.load for p in programs.values() if isinstance(p, NativeProgram)]
    if not loads:
        return None

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else float(sum(v for v in values if v is not None))

    return LoadReport(
        programs=loads,
        first_ms=total([load.first_ms for load in loads]),
        warm_ms=total([load.warm_ms for load in loads]),
        shader_cache=shader_cache,
        measured_by=(
            "executor_runner's own 'Model loaded in N ms': first, a load-only process per program "
            "(the run's first load); warm, the load that starts the program's live process"
        ),
    )


def _wrong_output(result: DeviceResult, cause: str) -> DeviceFailure:
    worst_case = max(
        (c for c in result.testcase if not c.passed and c.max_abs_error is not None),
        key=lambda c: c.max_abs_error or 0.0,
        default=None,
    )
    frames = [o for o in (result.frames.outputs if result.frames else []) if not o.passed]
    worst_frame = max(frames, key=lambda o: o.max_abs_error, default=None)
    return DeviceFailure(
        kind="wrong_output",
        cause=cause,
        program=worst_case.program if worst_case else None,
        max_abs_error=(
            worst_case.max_abs_error if worst_case else (worst_frame.max_abs_error if worst_frame else None)
        ),
        min_sqnr_db=worst_frame.min_sqnr_db if worst_frame else None,
    )


def runtime_precision(backend: str | None) -> str | None:
    """The precision the backend's runtime chose on this host (``BackendInfo.runtime_precision``), or
    None where it chooses none; the question's own failure is the answer's text."""
    known = backends.info(backend or "")
    if known is None or known.runtime_precision is None:
        return None
    try:
        return known.runtime_precision()
    except Exception as error:  # the runtime ran the bundle; not knowing its precision is no failure
        return f"unknown ({type(error).__name__}: {error})"


def _verdict(result: DeviceResult, atol: float, rtol: float) -> str | None:
    """Why the outputs are wrong (the cell's ❌ cause), or None when they are right. Where the runtime
    chose its own precision (``result.precision``), a tolerance failure says which it computed in."""
    chosen = f"; {result.backend} computed in {result.precision}" if result.precision else ""
    wrong = [
        f"{c.program} ({c.error or f'max abs error {c.max_abs_error:.3g}'})"
        for c in result.testcase
        if not c.passed
    ]
    if wrong:
        return f"test case outside tolerance (atol {atol:g}, rtol {rtol:g}): {', '.join(wrong)}{chosen}"
    if result.frames and not result.frames.passed:
        worst = max((o for o in result.frames.outputs if not o.passed), key=lambda o: o.max_abs_error)
        return (
            f"frames differ from the reference: {worst.name} max abs error {worst.max_abs_error:.3g}{chosen}"
        )
    return unstable_outputs(result.latency)


def unstable_outputs(latency: LatencyStats | None) -> str | None:
    """``output not stable: k of N executions differ`` over every replica's timed executions; None when
    every compared execution matched its reference."""
    checked = [r.outputs for r in (latency.replicas if latency else []) if r.outputs is not None]
    differing = sum(o.differing for o in checked)
    if not differing:
        return None
    executions = sum(o.executions for o in checked)
    first = next(o.first for o in checked if o.differing)
    return f"output not stable: {differing} of {executions} executions differ ({first})"


def _device_class(classes: list[str], backend: str | None) -> str | None:
    suffix = f"-{backend}"
    return next((c for c in classes if backend and c.endswith(suffix)), None)


def _finish(result: DeviceResult) -> DeviceResult:
    result.libtorch_libraries = runtime.libtorch_libraries()
    result.libtorch_mapped = bool(result.libtorch_libraries)
    result.torch_module_loaded = "torch" in sys.modules
    return result


def _npz(bundle: Path, name: str) -> dict[str, np.ndarray]:
    try:
        with np.load(bundle / name, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as error:
        raise BundleError(f"{name} of the bundle is unreadable: {error}") from None


def _take(arrays: Mapping[str, np.ndarray], key: str, name: str) -> np.ndarray:
    if key not in arrays:
        raise BundleError(f"{name} of the bundle lacks {key}")
    return arrays[key]


def _same_shape(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    if actual.shape != expected.shape:
        raise runtime.RuntimeFailure(
            f"{what} has shape {list(actual.shape)}, the reference {list(expected.shape)}"
        )


def _max_abs(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.size == 0:
        return 0.0
    return float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> bool:
    return bool(np.allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol))


def sqnr_db(actual: np.ndarray, expected: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio of ``actual`` against ``expected``; None when identical."""
    signal = float(np.sum(np.square(expected.astype(np.float64))))
    noise = float(np.sum(np.square(actual.astype(np.float64) - expected.astype(np.float64))))
    if noise == 0.0:
        return None
    return float(10 * np.log10(max(signal, float(np.finfo(np.float64).tiny)) / noise))


def replay_testcase(bundle: Path, manifest: Manifest, programs: Programs) -> list[ProgramCheck]:
    testcase = _npz(bundle, "testcase.npz")
    rtol, atol = manifest.tolerance.rtol, manifest.tolerance.atol
    checks = []
    for spec in manifest.programs:
        inputs = [_take(testcase, f"{spec.name}/in/{i}", "testcase.npz") for i in range(len(spec.inputs))]
        expected = [_take(testcase, f"{spec.name}/out/{i}", "testcase.npz") for i in range(len(spec.outputs))]
        outputs = programs[spec.name](inputs)
        if len(outputs) != len(expected):
            checks.append(
                ProgramCheck(
                    program=spec.name,
                    passed=False,
                    error=f"returned {len(outputs)} outputs, the manifest names {len(expected)}",
                )
            )
            continue
        for i, (a, e) in enumerate(zip(outputs, expected, strict=True)):
            _same_shape(f"output {i} of {spec.name}", a, e)
        checks.append(
            ProgramCheck(
                program=spec.name,
                max_abs_error=max(
                    (_max_abs(a, e) for a, e in zip(outputs, expected, strict=True)), default=0.0
                ),
                passed=all(_close(a, e, rtol, atol) for a, e in zip(outputs, expected, strict=True)),
            )
        )
    return checks


def run_plan(plan: Plan, programs: Programs, env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One action chunk: the plan's calls in order, each fed its inputs by name from what came before."""
    values = dict(env)
    for call in plan.calls:
        missing = [name for name in call.inputs if name not in values]
        if missing:
            raise BundleError(f"the plan feeds {call.program} with {missing}, which nothing produced")
        inputs = [values[name] for name in call.inputs]
        outputs = programs[call.program](inputs)
        if len(outputs) != len(call.outputs):
            raise runtime.RuntimeFailure(
                f"program {call.program} returned {len(outputs)} outputs, the plan names {len(call.outputs)}"
            )
        values.update(zip(call.outputs, outputs, strict=True))
    return {name: values[name] for name in plan.outputs}


def _frame_env(
    manifest: Manifest, frames: Mapping[str, np.ndarray], constants: Mapping[str, np.ndarray], i: int
) -> dict[str, np.ndarray]:
    env = {name: _take(constants, name, "constants.npz") for name in manifest.plan.constants}
    env.update({name: _take(frames, f"{i}/{name}", "frames.npz") for name in manifest.plan.frame_inputs})
    return env


def check_frames(bundle: Path, manifest: Manifest, programs: Programs) -> FramesCheck:
    frames, references = _npz(bundle, "frames.npz"), _npz(bundle, "references.npz")
    constants = _npz(bundle, "constants.npz")
    rtol, atol = manifest.tolerance.rtol, manifest.tolerance.atol
    worst: dict[str, float] = dict.fromkeys(manifest.plan.outputs, 0.0)
    sqnr: dict[str, float | None] = dict.fromkeys(manifest.plan.outputs)
    passed = dict.fromkeys(manifest.plan.outputs, True)
    for i in range(manifest.frames):
        outputs = run_plan(manifest.plan, programs, _frame_env(manifest, frames, constants, i))
        for name, actual in outputs.items():
            expected = _take(references, f"{i}/{name}", "references.npz")
            _same_shape(f"output {name} of frame {i}", actual, expected)
            worst[name] = max(worst[name], _max_abs(actual, expected))
            db = sqnr_db(actual, expected)
            if db is not None:
                previous = sqnr[name]
                sqnr[name] = db if previous is None else min(previous, db)
            passed[name] = passed[name] and _close(actual, expected, rtol, atol)
    outputs_checked = [
        OutputCheck(name=n, max_abs_error=worst[n], min_sqnr_db=sqnr[n], passed=passed[n])
        for n in manifest.plan.outputs
    ]
    return FramesCheck(frames=manifest.frames, outputs=outputs_checked, passed=all(passed.values()))


class OutputChecker:
    """``ChunkWork.check``: each timed chunk's plan outputs against the reference of its frame."""

    def __init__(self, manifest: Manifest, references: Mapping[str, np.ndarray], frames: int) -> None:
        self.manifest, self.references, self.frames = manifest, references, frames
        self.executions = self.differing = 0
        self.first: str | None = None

    def __call__(self, index: int, outputs: Mapping[str, np.ndarray]) -> None:
        frame = index % self.frames
        rtol, atol = self.manifest.tolerance.rtol, self.manifest.tolerance.atol
        self.executions += 1
        for name in self.manifest.plan.outputs:
            expected = _take(self.references, f"{frame}/{name}", "references.npz")
            actual = outputs.get(name)
            if actual is None or actual.shape != expected.shape or not _close(actual, expected, rtol, atol):
                self.differing += 1
                if self.first is None:
                    error = (
                        "missing or misshapen"
                        if actual is None or actual.shape != expected.shape
                        else (f"max abs error {_max_abs(actual, expected):.3g}")
                    )
                    self.first = f"timed chunk {self.executions} on frame {frame}: {name} {error}"
                return

    def stability(self) -> OutputStability:
        return OutputStability(executions=self.executions, differing=self.differing, first=self.first)


def time_chunk(
    bundle: Path,
    manifest: Manifest,
    programs: Programs,
    rules: TimingRules,
    load_ms: float,
    engine: runtime.ProgramRuntime | None = None,
) -> LatencyStats:
    """The action chunk, cycling over the bundle's frames (or frame 0 alone, ``rules.inputs``), timed the
    way ``engine`` can time it honestly (its ``time_chunk``) under ``rules``, the host's load recorded."""
    engine = engine or runtime_module.PythonRuntime()
    frames, constants = _npz(bundle, "frames.npz"), _npz(bundle, "constants.npz")
    count = manifest.frames if rules.inputs == "cycle" else 1
    envs = [_frame_env(manifest, frames, constants, i) for i in range(count)]
    checker = OutputChecker(manifest, _npz(bundle, "references.npz"), count)
    work = runtime_module.ChunkWork(
        frames=count,
        run=lambda index: run_plan(manifest.plan, programs, envs[index % count]),
        check=checker,
    )
    meter = LoadMeter().start()
    timed = engine.time_chunk(work, rules)
    load = meter.stop()
    part = replica(timed.samples_ms, timed.warmup, timed.seconds, timed.stopped, timed.chunks_per_sample)
    part.host_load = load
    part.outputs = checker.stability()
    stats = latency_stats(timed.samples_ms, timed.warmup, load_ms, rules, [part])
    stats.method, stats.frames = timed.method, count
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    """One replica in a fresh process: ``python -m gpu_runner.bundle_run DIR --out F --rules JSON``."""
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.bundle_run")
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sha256")
    parser.add_argument("--rules", required=True, help="TimingRules as JSON")
    parser.add_argument("--runtime", choices=CHOICES, default="auto")
    parser.add_argument("--executor-runner", type=Path)
    parser.add_argument("--lock", type=Path, help="the host's timing lock file")
    parser.add_argument("--lock-wait", type=float, default=0.0)
    parser.add_argument("--runner-id", type=int)
    parser.add_argument("--no-server-mode", dest="server_mode", action="store_false")
    args = parser.parse_args(argv)
    result = run_bundle(
        args.bundle,
        expected_sha256=args.sha256,
        rules=TimingRules.model_validate_json(args.rules),
        runtime=args.runtime,
        executor_runner=args.executor_runner,
        lock=HostLock(args.lock) if args.lock else None,
        lock_wait_s=args.lock_wait,
        runner_id=args.runner_id,
        server_mode=args.server_mode,
    )
    args.out.write_text(result.model_dump_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
