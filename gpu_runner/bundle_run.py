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
from collections.abc import Sequence
from pathlib import Path

from coverfarm import backends
from coverfarm.bundle_manifest import BundleError, Manifest, load_manifest, read_npz
from coverfarm.device_result import (
    DeviceFailure,
    DeviceResult,
    LatencyStats,
    LoadReport,
    ProbeReport,
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
from gpu_runner.bundle_checks import OutputChecker, check_frames, replay_testcase
from gpu_runner.bundle_plan import Programs, _frame_env, run_plan
from gpu_runner.bundle_verdict import _verdict, _wrong_output
from gpu_runner.native.runtime import NativeProgram, NativeRuntime
from gpu_runner.native.shader_cache import shader_cache_state
from gpu_runner.probe import probe
from gpu_runner.runtime_choice import CHOICES, RuntimeChoice, choose_runtime

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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


def _device_class(classes: list[str], backend: str | None) -> str | None:
    suffix = f"-{backend}"
    return next((c for c in classes if backend and c.endswith(suffix)), None)


def _finish(result: DeviceResult) -> DeviceResult:
    result.libtorch_libraries = runtime.libtorch_libraries()
    result.libtorch_mapped = bool(result.libtorch_libraries)
    result.torch_module_loaded = "torch" in sys.modules
    return result


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
    frames, constants = read_npz(bundle, "frames.npz"), read_npz(bundle, "constants.npz")
    count = manifest.frames if rules.inputs == "cycle" else 1
    envs = [_frame_env(manifest, frames, constants, i) for i in range(count)]
    checker = OutputChecker(manifest, read_npz(bundle, "references.npz"), count)
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
