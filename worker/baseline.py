"""Eager PyTorch on this host's CPU for one policy's action chunk: the baseline of a device's speed-up.

The policy is built by the engine's own adapter (``worker.policies.registry``), as the trace step builds
it (same seed, checkpoint and frames), and one action chunk is the adapter's chunk plan run with its
eager modules under ``torch.no_grad`` — exactly what computes a bundle's reference outputs. Warm-up
chunks, then timed chunks, each timed on its own; every raw sample is kept and summarised by
``gpu_runner.stats``. The measuring runs in a fresh child process (``python -m worker.baseline``)
bounded per phase by the options' ``timeout_s``, so the caller never imports torch and a policy that
hangs is killed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coverfarm.baseline import BaselineResult
from coverfarm.result import Options
from gpu_runner.probe import board
from gpu_runner.stats import latency_stats
from worker.stages.bounded import run_bounded
from worker.stages.events import EventLog, error_fields

MAX_FRAMES = 16  # the bundle holds up to 16 frames (docs/design.md)
LATENCY_METHOD = (
    "wall clock of each whole action chunk (the adapter's chunk plan on its eager modules, "
    "torch.no_grad, batch 1) in a fresh child process; load_ms is building the policy with the engine's "
    "adapter, which also exports its programs"
)

Progress = Callable[[str], None]


def measure_baseline(
    policy: str,
    options: Options,
    frames: int = 1,
    warmup: int = 3,
    iterations: int = 20,
    progress: Progress | None = None,
) -> BaselineResult:
    """Time ``policy``'s eager action chunk: ``warmup`` untimed chunks, then ``iterations`` timed ones,
    cycling over frames ``0..frames-1`` (frame 0 alone by default, the frame the device runner times)."""
    if not 1 <= frames <= MAX_FRAMES:
        raise ValueError(f"frames must be 1 to {MAX_FRAMES}, got {frames}")
    if warmup < 0 or iterations < 1:
        raise ValueError(f"need warmup >= 0 and iterations >= 1, got {warmup} and {iterations}")
    say: Progress = progress or (lambda _message: None)
    result = BaselineResult(policy=policy, options=options, frames=frames, host=board(), status="ok")
    work = Path(tempfile.mkdtemp(prefix=f"coverfarm-baseline-{policy}."))
    try:
        args = ["--policy", policy, "--seed", str(options.seed), "--frames", str(frames)]
        args += ["--warmup", str(warmup), "--iterations", str(iterations)]
        if options.checkpoint:
            args += ["--checkpoint", options.checkpoint]
        say(f"baseline: building {policy} in a child process")
        run = run_bounded(
            "worker.baseline",
            args,
            events_path=work / "events.jsonl",
            bounds={"build": options.timeout_s, "time": options.timeout_s},
            first_phase="build",
            log_path=work / "child.log",
            on_event=lambda event: _report(event, say),
        )
        events = {event["event"]: event for event in run.events}
        if "host" in events:
            host = events["host"]
            result.torch_version = host["torch"]
            result.threads, result.interop_threads = host["threads"], host["interop_threads"]
        if "built" in events:
            result.build_s = events["built"]["seconds"]
        # Each sample is logged as it is taken, so a timing phase cut at its bound keeps its samples.
        samples = [event["ms"] for event in run.events if event["event"] == "sample"]
        if samples:
            result.latency = latency_stats(samples, warmup, (result.build_s or 0.0) * 1e3)
            result.latency.method = LATENCY_METHOD
        if run.timed_out_phase is not None:
            result.status = "slow"
            result.error = f"the {run.timed_out_phase} phase took over {options.timeout_s:g} s"
        elif "error" in events:
            error = events["error"]
            result.status, result.error = "failed", f"{error['type']}: {error['message']}"
        elif "measured" not in events:
            result.status = "failed"
            result.error = f"the baseline process exited with status {run.returncode}\n{run.log_tail}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _report(event: dict[str, Any], say: Progress) -> None:
    if event["event"] == "built":
        say(f"baseline: built in {event['seconds']:.1f} s; timing on {event['threads']} torch threads")


def _child(args: argparse.Namespace, log: EventLog) -> None:
    import torch

    from worker.policies.registry import get_adapter

    log.emit(
        "host",
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        interop_threads=torch.get_num_interop_threads(),
    )
    start = time.perf_counter()
    traced = get_adapter(args.policy)(seed=args.seed, checkpoint=args.checkpoint)
    frames = [traced.make_frame(i) for i in range(args.frames)]
    log.emit("built", seconds=time.perf_counter() - start, threads=torch.get_num_threads())
    log.emit("phase", phase="time")
    with torch.no_grad():
        for i in range(args.warmup):
            traced.plan.run(traced.eager, frames[i % len(frames)])
        for i in range(args.iterations):
            frame = frames[i % len(frames)]
            begin = time.perf_counter_ns()
            traced.plan.run(traced.eager, frame)
            log.emit("sample", ms=(time.perf_counter_ns() - begin) / 1e6)
    log.emit("measured", iterations=args.iterations)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.baseline")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--frames", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--events", type=Path, required=True)
    args = parser.parse_args(argv)

    log = EventLog(args.events)
    try:
        log.emit("phase", phase="build")
        _child(args, log)
        return 0
    except Exception as error:
        log.emit("error", **error_fields(error))
        return 1
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
