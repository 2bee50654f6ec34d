"""The coverage engine: one cell (policy x backend x options) from trace to result document and bundle.

``analyze`` runs the trace stage (cached by content hash) and the lower stage, each in a child process
under its time bounds, folds what they logged into a ``ResultDocument`` and, when every program
exported, writes the bundle. It is what ``coverfarm analyze`` and the farm's CPU workers call.

A policy the catalog names but the engine cannot build (not in the installed LeRobot, or no adapter
yet) gets a result whose trace failed with that cause: its row stays, with ❌. Weights are real or fake
(``worker.trace.weights``); a fake-weight cell has every coverage column and an export that did not run.
Each stage child's peak memory goes into ``memory``.

What the engine adds to a cell's reuse key (``coverfarm.reuse``) is ``reuse_fields``, this module's
``stack_fields``: the trace key, how ``weights: auto`` resolves, the versions and a digest of the engine
code that lowers and counts (``ENGINE_SOURCES``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from coverfarm import backends, catalog, workarounds
from coverfarm.errors import UserError
from coverfarm.offline_causes import no_offline_build
from coverfarm.result import (
    ErrorInfo,
    Options,
    ResultDocument,
    StageResult,
    StageStatus,
    TraceInfo,
    WeightsInfo,
)
from coverfarm.versions import versions
from coverfarm.worker_memory import worker_memory_gb
from farmrun.hostlock import host_lock
from worker.bundle.write import write_bundle
from worker.child.bounded import StageRun, run_bounded
from worker.lower.assemble import fold_lower_events
from worker.lower.backends import get_backend
from worker.repros.attach import attach_repros
from worker.repros.verify import default_repro_cache
from worker.trace.cache import building, load_trace_manifest, trace_key
from worker.trace.stage import TRACE_MANIFEST
from worker.trace.weights import checkpoint_bytes, decide, export_not_run

MEMORY_FILE = "memory.json"  # in a trace directory: the trace child's peaks, kept with the cache
WORKER = Path(__file__).resolve().parent
# The engine's code that lowers and counts: a change to any of it may change a result.
ENGINE_SOURCES = (
    "child",
    "trace/stage.py",
    "lower/stage.py",
    "lower/observe.py",
    "lower/fast",
    "lower/metrics",
    "lower/backends",
    "lower/assemble.py",
    "bundle/write.py",
    "engine.py",
)

Progress = Callable[[str], None]


def default_trace_cache() -> Path:
    return Path(os.environ.get("COVERFARM_TRACE_CACHE", Path.home() / ".cache" / "coverfarm" / "traces"))


def not_measurable(policy: str) -> str | None:
    """Why a policy the catalog names cannot be built here, or None when it can."""
    from worker.trace.policies.registry import supported

    reason = catalog.unavailable_reason(policy)
    if reason is None and policy not in supported():
        reason = no_offline_build(policy) or f"coverfarm has no adapter for {policy} yet"
    return reason


def validate(policy: str, backend: str, options: Options) -> None:
    """Reject bad input before any work starts, with one clear line."""
    from worker.trace.policies.registry import UnsupportedPolicyError, get_adapter

    get_backend(backend)
    if policy not in catalog.POLICIES:
        try:
            get_adapter(policy)
        except UnsupportedPolicyError:
            raise UserError(catalog.check_policy(policy) or f"unknown policy {policy!r}") from None
    try:
        worker_memory_gb()
    except ValueError as error:
        raise UserError(str(error)) from None
    if options.weights == "fake" and options.checkpoint is not None:
        raise UserError("weights fake builds the policy without weights: it cannot use a checkpoint")
    if options.force_fp16 and not backends.takes_force_fp16(backend):
        raise UserError(f"force_fp16 is a Vulkan partitioner option; backend {backend} has none")
    problem = workarounds.problem(options.workarounds, backend)
    if problem:
        raise UserError(problem)
    if options.checkpoint is not None:
        path = Path(options.checkpoint)
        if not path.is_dir() or not os.access(path, os.R_OK):
            raise UserError(f"checkpoint {path} is not a readable directory")


def _stage_error(run: StageRun, stage: str) -> ErrorInfo | None:
    for event in run.events:
        if event["event"] == "error":
            return ErrorInfo(
                stage=stage, type=event["type"], message=event["message"], traceback=event.get("traceback")
            )
    if run.returncode not in (0, None) and run.timed_out_phase is None:
        return ErrorInfo(
            stage=stage,
            type="ChildProcessDied",
            message=f"the {stage} process exited with status {run.returncode}\n{run.log_tail}",
        )
    return None


def _megabytes(peaks: dict[str, int]) -> dict[str, float]:
    return {phase: round(value / 2**20, 1) for phase, value in peaks.items()}


def read_memory(path: Path) -> dict[str, float]:
    """The peaks (MB) a trace child reached, as recorded beside its work or its cached trace."""
    try:
        memory: dict[str, float] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return memory


def trace(
    policy: str, options: Options, cache: Path, work: Path, progress: Progress, weights: str = "real"
) -> tuple[StageResult, Path | None, dict[str, Any] | None]:
    """The trace stage, or its cached result: (stage result, trace dir, trace manifest). One process
    builds a trace at a time; another that needs it meanwhile waits and reads it (``building``)."""
    key = trace_key(policy, options.seed, options.checkpoint, options.frames, weights)
    cached = cache / key
    manifest = load_trace_manifest(cached)
    if manifest is not None:
        progress(f"trace: cached, {weights} weights ({cached})")
        return StageResult(status=StageStatus.OK, seconds=0.0), cached, manifest
    wait_s = 2 * options.timeout_s  # the trace's two bounded phases: trace and reference
    with building(cache, key, wait_s) as lock:
        manifest = load_trace_manifest(cached)
        if manifest is not None:
            progress(f"trace: built meanwhile by another job, {weights} weights ({cached})")
            return StageResult(status=StageStatus.OK, seconds=0.0), cached, manifest
        if lock == "waited":
            progress(
                f"trace: the job that was building the {weights}-weight trace ended without it; "
                "building it here"
            )
        elif lock == "stuck":
            progress(
                f"trace: another job has been building the {weights}-weight trace for over {wait_s:.0f} s; "
                "building it here"
            )
        return _build_trace(policy, options, cache, key, work, progress, weights)


def _build_trace(
    policy: str, options: Options, cache: Path, key: str, work: Path, progress: Progress, weights: str
) -> tuple[StageResult, Path | None, dict[str, Any] | None]:
    cached = cache / key
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
    args = [
        "--policy",
        policy,
        "--seed",
        str(options.seed),
        "--frames",
        str(options.frames),
        "--weights",
        weights,
        "--out",
        str(staging),
    ]
    if options.checkpoint:
        args += ["--checkpoint", options.checkpoint]
    progress(f"trace: building and exporting {policy} with {weights} weights")
    run = run_bounded(
        "worker.trace.stage",
        args,
        events_path=work / "trace.events.jsonl",
        bounds={"trace": options.timeout_s, "reference": options.timeout_s},
        first_phase="trace",
        log_path=work / "trace.log",
        host_lock=host_lock(),
    )
    seconds = sum(run.phase_seconds.values())
    memory = _megabytes(run.phase_peak_bytes)
    if memory:
        progress("trace: peak memory " + ", ".join(f"{k} {v:.0f} MB" for k, v in memory.items()))
    (work / f"trace-{weights}.{MEMORY_FILE}").write_text(json.dumps(memory))
    if run.timed_out_phase == "trace":
        shutil.rmtree(staging, ignore_errors=True)
        error = ErrorInfo(
            stage="trace", type="Timeout", message=f"tracing took over {options.timeout_s:.0f} s"
        )
        return StageResult(status=StageStatus.SLOW, seconds=seconds, error=error), None, None
    # Out of time while computing eager reference frames: the programs and the frames finished so far
    # stand (the manifest counts them); the coverage numbers do not depend on references.
    failure = None if run.timed_out_phase == "reference" else _stage_error(run, "trace")
    if failure is not None or not (staging / TRACE_MANIFEST).exists():
        shutil.rmtree(staging, ignore_errors=True)
        failure = failure or ErrorInfo(stage="trace", type="IncompleteTrace", message=run.log_tail)
        return StageResult(status=StageStatus.FAILED, seconds=seconds, error=failure), None, None
    (staging / MEMORY_FILE).write_text(json.dumps(memory))
    try:
        staging.rename(cached)  # atomic; another worker may have won the race with the same content
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return StageResult(status=StageStatus.OK, seconds=seconds), cached, load_trace_manifest(cached)


TraceOutcome = tuple[StageResult, Path | None, dict[str, Any] | None]


def _cached_parameter_bytes(policy: str, options: Options, cache: Path) -> int | None:
    for weights in ("real", "fake"):
        key = trace_key(policy, options.seed, options.checkpoint, options.frames, weights)
        manifest = load_trace_manifest(cache / key)
        if manifest is not None and manifest.get("parameter_bytes") is not None:
            return int(manifest["parameter_bytes"])
    return None


def traced(
    policy: str, options: Options, cache_dir: Path | None, work: Path, say: Progress
) -> tuple[WeightsInfo, TraceOutcome]:
    """Choose the weights (``worker.trace.weights``) and trace with them.

    ``auto`` sizes the policy from its checkpoint's files, a cached trace's manifest, or else a
    fake-weight trace (cached too, and used as is when real weights do not fit).
    """
    cache = cache_dir or default_trace_cache()
    worker_gb = worker_memory_gb()
    if options.weights != "auto":
        weights = decide(options.weights, None, worker_gb)
        return weights, trace(policy, options, cache, work, say, weights.mode)
    if options.checkpoint is not None:
        size: int | None = checkpoint_bytes(options.checkpoint)
    else:
        size = _cached_parameter_bytes(policy, options, cache)
    if size is None:
        say("weights: auto, sizing the policy with a fake-weight trace")
        sizing = trace(policy, options, cache, work, say, "fake")
        manifest = sizing[2]
        if manifest is None or manifest.get("parameter_bytes") is None:
            error = sizing[0].error.one_line() if sizing[0].error else sizing[0].status.value
            weights = decide("real", None, worker_gb)
            weights.requested = "auto"
            weights.reason = f"the fake-weight trace that sizes the policy did not finish ({error})"
            say(f"weights: real ({weights.reason})")
            return weights, trace(policy, options, cache, work, say, "real")
        weights = decide("auto", int(manifest["parameter_bytes"]), worker_gb)
        say(f"weights: {weights.mode} ({weights.reason})")
        if weights.mode == "fake":
            return weights, sizing
        return weights, trace(policy, options, cache, work, say, "real")
    weights = decide("auto", size, worker_gb)
    say(f"weights: {weights.mode} ({weights.reason})")
    return weights, trace(policy, options, cache, work, say, weights.mode)


def lower(
    doc: ResultDocument,
    manifest: dict[str, Any],
    trace_dir: Path,
    work: Path,
    say: Progress,
    repro_cache: Path,
) -> Path:
    """The lower stage of a traced cell, folded into ``doc``, and each blocker group's verified repro;
    returns the directory of the lowered programs."""
    backend, options = doc.backend, doc.options
    rewrites = "".join(f", workaround {name}" for name in options.workarounds)
    prop = options.constant_prop
    say(f"lower: {backend} ({options.lowering} partitioning, constant propagation {prop}{rewrites})")
    lowered = work / "lowered"

    def report(event: dict[str, Any]) -> None:
        kind, program = event["event"], event.get("program", "")
        if kind == "support":
            say(f"  {program}: {event['supported_ops']} ops supported, {event['connected_groups']} groups")
        elif kind == "partitioned":
            say(f"  {program}: {event['partitions']} partitions in {event['seconds']:.1f} s")
        elif kind == "exported":
            say(f"  {program}: exported ({event['bytes']} bytes)")
        elif kind == "not_exported":
            say(f"  {program}: not exported ({event['reason']})")
        elif kind == "error":
            say(f"  {program}: {event['type']}: {str(event['message']).splitlines()[0][:200]}")

    run = run_bounded(
        "worker.lower.stage",
        [
            "--trace-dir",
            str(trace_dir),
            "--backend",
            backend,
            "--constant-prop",
            "on" if options.constant_prop else "off",
            "--lowering",
            options.lowering,
            "--out",
            str(lowered),
            *(["--force-fp16"] if options.force_fp16 else []),
            *(["--etrecord"] if options.etrecord else []),
            *(f"--workaround={name}" for name in options.workarounds),
        ],
        events_path=work / "lower.events.jsonl",
        bounds={"partition": options.timeout_s, "export": options.timeout_s},
        first_phase="partition",
        log_path=work / "lower.log",
        on_event=report,
        host_lock=host_lock(),
    )
    fold_lower_events(doc, manifest, trace_dir, run, options.timeout_s)
    memory = _megabytes(run.phase_peak_bytes)
    doc.memory.update(memory)
    if memory:
        say("lower: peak memory " + ", ".join(f"{k} {v:.0f} MB" for k, v in memory.items()))
    if doc.weights is not None and doc.weights.mode == "fake" and doc.partition.status is StageStatus.OK:
        doc.export = export_not_run(doc.weights)
    attach_repros(doc, work, repro_cache, say)
    return lowered


@cache
def engine_code_digest() -> str:
    """sha256 over the engine's source files (ENGINE_SOURCES), computed once per process."""
    digest = hashlib.sha256()
    for name in ENGINE_SOURCES:
        path = WORKER / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(WORKER)).encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def stack_fields(policy: str, options: Options) -> dict[str, Any]:
    """The real engine's part of the reuse key: trace key, weights resolution, versions and code digest.

    ``weights: auto`` resolves from the policy's size (fixed by the trace's inputs) against this
    worker's memory, so for auto the worker's memory is part of the key.
    """
    weights: dict[str, Any] = {"requested": options.weights}
    if options.weights == "auto":
        weights["worker_memory_gb"] = round(worker_memory_gb(), 3)
    return {
        "trace": trace_key(policy, options.seed, options.checkpoint, options.frames, options.weights),
        "weights": weights,
        "versions": versions(*backends.names()),
        "engine": engine_code_digest(),
    }


# What this engine adds to a cell's reuse key (coverfarm.reuse): the worker looks for it beside analyze.
reuse_fields = stack_fields


def analyze(
    policy: str,
    backend: str,
    options: Options,
    out_dir: Path,
    progress: Progress | None = None,
    trace_cache: Path | None = None,
    repro_cache: Path | None = None,
) -> ResultDocument:
    """Measure one cell. Bad input raises ``UserError``; everything ExecuTorch does is a result."""
    say: Progress = progress or (lambda _message: None)
    validate(policy, backend, options)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / f"{policy}-{backend}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)

    reason = not_measurable(policy)
    if reason is not None:
        say(f"{policy}: {reason}")
        error = ErrorInfo(stage="trace", type="PolicyNotAvailable", message=reason)
        failed = StageResult(status=StageStatus.FAILED, error=error)
        return ResultDocument(
            policy=policy, backend=backend, options=options, trace=failed, versions=versions(backend)
        )

    weights, (trace_stage, trace_dir, manifest) = traced(policy, options, trace_cache, work, say)
    doc = ResultDocument(
        policy=policy,
        backend=backend,
        options=options,
        trace=trace_stage,
        versions=versions(backend),
        weights=weights,
    )
    doc.timings["trace_s"] = round(trace_stage.seconds or 0.0, 3)
    fresh = work / f"trace-{weights.mode}.{MEMORY_FILE}"
    if fresh.exists() or trace_dir is not None:
        doc.memory.update(
            read_memory(fresh if fresh.exists() or trace_dir is None else trace_dir / MEMORY_FILE)
        )
    if trace_dir is None or manifest is None:
        return doc
    if weights.parameter_bytes is None and manifest.get("parameter_bytes") is not None:
        # Chosen without sizing (asked for, or the sizing trace failed): the trace's size, same choice.
        sized = decide(weights.mode, int(manifest["parameter_bytes"]), weights.worker_memory_gb or 0.0)
        keep = ("parameter_bytes", "estimated_peak_gb", "needs_worker_gb")
        doc.weights = weights.model_copy(update={key: getattr(sized, key) for key in keep})
    doc.trace_info = TraceInfo(
        seed=options.seed,
        checkpoint=options.checkpoint,
        weights="checkpoint" if options.checkpoint else "random",
        cache_key=trace_dir.name,
        substitutions=manifest.get("substitutions", []),
        frames=manifest.get("frames", 0),
        frames_wanted=manifest.get("frames_wanted", options.frames),
        frame_history=bool(manifest.get("frame_history", False)),
    )

    lowered = lower(doc, manifest, trace_dir, work, say, repro_cache or default_repro_cache())
    if doc.export.status is StageStatus.OK:
        doc.bundle = write_bundle(doc, manifest, trace_dir, lowered, out_dir / "bundles")
        say(f"bundle: {doc.bundle.path}")
    return doc
