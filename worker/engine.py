"""The coverage engine: one cell (policy x backend x options) from trace to result document and bundle.

``analyze`` runs the trace stage (cached by content hash) and the lower stage, each in a child process
under its time bounds, folds what they logged into a ``ResultDocument`` and, when every program
exported, writes the bundle. It is what ``coverfarm analyze`` and the farm's CPU workers call.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coverfarm.errors import UserError
from coverfarm.result import ErrorInfo, Options, ResultDocument, StageResult, StageStatus, TraceInfo
from worker.assemble import fold_lower_events
from worker.backends import get_backend
from worker.bundle import write_bundle
from worker.stages.bounded import StageRun, run_bounded
from worker.stages.trace import TRACE_MANIFEST
from worker.trace_cache import load_trace_manifest, trace_key
from worker.versions import versions

Progress = Callable[[str], None]


def default_trace_cache() -> Path:
    return Path(os.environ.get("COVERFARM_TRACE_CACHE", Path.home() / ".cache" / "coverfarm" / "traces"))


def validate(policy: str, backend: str, options: Options) -> None:
    """Reject bad input before any work starts, with one clear line."""
    from worker.policies.registry import UnsupportedPolicyError, get_adapter

    get_backend(backend)
    try:
        get_adapter(policy)
    except UnsupportedPolicyError as error:
        raise UserError(str(error)) from None
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


def trace(
    policy: str, options: Options, cache: Path, work: Path, progress: Progress
) -> tuple[StageResult, Path | None, dict[str, Any] | None]:
    """The trace stage, or its cached result: (stage result, trace dir, trace manifest)."""
    key = trace_key(policy, options.seed, options.checkpoint, options.frames)
    cached = cache / key
    manifest = load_trace_manifest(cached)
    if manifest is not None:
        progress(f"trace: cached ({cached})")
        return StageResult(status=StageStatus.OK, seconds=0.0), cached, manifest
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
    args = [
        "--policy",
        policy,
        "--seed",
        str(options.seed),
        "--frames",
        str(options.frames),
        "--out",
        str(staging),
    ]
    if options.checkpoint:
        args += ["--checkpoint", options.checkpoint]
    progress(f"trace: building and exporting {policy}")
    run = run_bounded(
        "worker.stages.trace",
        args,
        events_path=work / "trace.events.jsonl",
        bounds={"trace": options.timeout_s, "reference": options.timeout_s},
        first_phase="trace",
        log_path=work / "trace.log",
    )
    seconds = sum(run.phase_seconds.values())
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
    try:
        staging.rename(cached)  # atomic; another worker may have won the race with the same content
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return StageResult(status=StageStatus.OK, seconds=seconds), cached, load_trace_manifest(cached)


def analyze(
    policy: str,
    backend: str,
    options: Options,
    out_dir: Path,
    progress: Progress | None = None,
    trace_cache: Path | None = None,
) -> ResultDocument:
    """Measure one cell. Bad input raises ``UserError``; everything ExecuTorch does is a result."""
    say: Progress = progress or (lambda _message: None)
    validate(policy, backend, options)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / f"{policy}-{backend}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)

    trace_stage, trace_dir, manifest = trace(policy, options, trace_cache or default_trace_cache(), work, say)
    doc = ResultDocument(
        policy=policy, backend=backend, options=options, trace=trace_stage, versions=versions()
    )
    doc.timings["trace_s"] = round(trace_stage.seconds or 0.0, 3)
    if trace_dir is None or manifest is None:
        return doc
    doc.trace_info = TraceInfo(
        seed=options.seed,
        checkpoint=options.checkpoint,
        weights="checkpoint" if options.checkpoint else "random",
        cache_key=trace_dir.name,
        substitutions=manifest.get("substitutions", []),
        frames=manifest.get("frames", 0),
        frames_wanted=manifest.get("frames_wanted", options.frames),
    )

    say(f"lower: {backend} ({options.lowering} partitioning, constant propagation {options.constant_prop})")
    lowered = work / "lowered"

    def report(event: dict[str, Any]) -> None:
        kind, program = event["event"], event.get("program", "")
        if kind == "support":
            say(f"  {program}: {event['supported_ops']} ops supported, {event['connected_groups']} groups")
        elif kind == "partitioned":
            say(f"  {program}: {event['partitions']} partitions in {event['seconds']:.1f} s")
        elif kind == "exported":
            say(f"  {program}: exported ({event['bytes']} bytes)")
        elif kind == "error":
            say(f"  {program}: {event['type']}: {str(event['message']).splitlines()[0][:200]}")

    run = run_bounded(
        "worker.stages.lower",
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
        ],
        events_path=work / "lower.events.jsonl",
        bounds={"partition": options.timeout_s, "export": options.timeout_s},
        first_phase="partition",
        log_path=work / "lower.log",
        on_event=report,
    )
    fold_lower_events(doc, manifest, trace_dir, run, options.timeout_s)
    if doc.export.status is StageStatus.OK:
        doc.bundle = write_bundle(doc, manifest, trace_dir, lowered, out_dir / "bundles")
        say(f"bundle: {doc.bundle.path}")
    return doc
