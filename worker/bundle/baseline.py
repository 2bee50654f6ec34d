"""Eager PyTorch on this host's CPU for one policy's action chunk: the baseline of a device's speed-up.

The policy is built by the engine's own adapter (``worker.trace.policies.registry``), as the trace step builds
it (same seed, checkpoint and frames), and one action chunk is the adapter's chunk plan run with its
eager modules under ``torch.no_grad`` — exactly what computes a bundle's reference outputs. The chunks
cycle over the bundle's frames (``TimingRules.inputs``; frame 0 alone as an option), as the device run
does: frame 0 alone for a policy that stacks a history of observations, whose bundle holds no other.
They run under the rules' time bounds (``farmrun.stats.timed_loop``), with as many torch threads as the
process has CPUs to itself (``farmrun.cpu_share``: its affinity mask less the busy CPUs, capped by its
cgroup's quota; all three recorded). Each replica runs in a fresh child process
(``python -m worker.bundle.baseline``) bounded per phase by the options' ``timeout_s``, so the caller never
imports torch and a policy that hangs is killed; all replicas run inside one hold of the host's timing
lock (``farmrun.hostlock``), and ``farmrun.stats.combine`` judges them together.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import CpuShare, HostLoad, LatencyStats, TimingRules
from coverfarm.result import Options
from farmrun.board import board
from farmrun.cpu_share import cpu_share, threads_for
from farmrun.hostload import LoadMeter, host_id
from farmrun.hostlock import held
from farmrun.stats import combine, latency_stats, mark_isolation, replica, timed_loop
from worker.child.bounded import StageRun, run_bounded
from worker.child.events import EventLog, error_fields

if TYPE_CHECKING:
    from farmrun.hostlock import HostLock

MAX_FRAMES = 16  # the bundle holds up to 16 frames (docs/design.md)
LATENCY_METHOD = (
    "wall clock of each whole action chunk (the adapter's chunk plan on its eager modules, "
    "torch.no_grad, batch 1) in a fresh child process per replica; load_ms is building the policy with "
    "the engine's adapter, which also exports its programs"
)

Progress = Callable[[str], None]


def measure_baseline(
    policy: str,
    options: Options,
    rules: TimingRules | None = None,
    progress: Progress | None = None,
    lock: HostLock | None = None,
    lock_wait_s: float = 0.0,
    runner_id: int | None = None,
) -> BaselineResult:
    """Time ``policy``'s eager action chunk under ``rules`` in ``rules.replicas`` fresh processes,
    cycling over the bundle's ``options.frames`` frames (or frame 0, ``rules.inputs``), with ``lock``
    held (waiting at most ``lock_wait_s`` for the stages that hold it)."""
    rules = rules or TimingRules()
    frames = options.frames if rules.inputs == "cycle" else 1
    if not 1 <= frames <= MAX_FRAMES:
        raise ValueError(f"frames must be 1 to {MAX_FRAMES}, got {frames}")
    say: Progress = progress or (lambda _message: None)
    result = BaselineResult(
        policy=policy, options=options, frames=frames, host=board(), status="ok", runner_id=runner_id,
        host_id=host_id(),
    )  # fmt: skip
    parts: list[LatencyStats] = []
    with held(lock, lock_wait_s) as isolation:
        for number in range(1, rules.replicas + 1):
            part = _replica(policy, options, frames, rules, result, number, say)
            if part is not None:
                parts.append(part)
            if result.status != "ok":
                break
    if parts:
        result.latency = combine(parts, rules)
        result.latency.method = LATENCY_METHOD
        result.latency.frames = result.frames
        mark_isolation(result.latency, isolation)
    return result


def _replica(
    policy: str,
    options: Options,
    frames: int,
    rules: TimingRules,
    result: BaselineResult,
    number: int,
    say: Progress,
) -> LatencyStats | None:
    """One replica in a fresh child, folded into ``result`` (host, threads, build, a failure's cause);
    its latency, or None when it timed nothing."""
    work = Path(tempfile.mkdtemp(prefix=f"coverfarm-baseline-{policy}."))
    try:
        args = ["--policy", policy, "--seed", str(options.seed), "--frames", str(frames)]
        args += ["--rules", rules.model_dump_json()]
        if options.checkpoint:
            args += ["--checkpoint", options.checkpoint]
        say(f"baseline: replica {number} of {rules.replicas}: building {policy} in a child process")
        run = run_bounded(
            "worker.bundle.baseline",
            args,
            events_path=work / "events.jsonl",
            bounds={"build": options.timeout_s, "time": options.timeout_s},
            first_phase="build",
            log_path=work / "child.log",
            on_event=lambda event: _report(event, say),
        )
        return _fold(run, rules, result, options.timeout_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fold(run: StageRun, rules: TimingRules, result: BaselineResult, timeout_s: float) -> LatencyStats | None:
    events = {event["event"]: event for event in run.events}
    if "host" in events:
        host = events["host"]
        result.torch_version = host["torch"]
        result.threads, result.interop_threads = host["threads"], host["interop_threads"]
    if "built" in events:
        built = events["built"]
        result.build_s = built["seconds"]
        cpus = result.cpus = CpuShare.model_validate(built["cpus"])
        result.threads, result.cores = built["threads"], cpus.cores
        result.free_cores = threads_for(cpus.affinity, None, cpus.busy)
        result.frames = built.get("frames", result.frames)  # fewer for a policy with a frame history
    latency = None
    # Each sample is logged as it is taken, so a timing phase cut at its bound keeps its samples.
    samples = [event["ms"] for event in run.events if event["event"] == "sample"]
    if samples:
        measured = events.get("measured", {})
        part = replica(
            samples, measured.get("warmup", 0), measured.get("seconds", sum(samples) / 1e3),
            measured.get("stopped", f"cut at the time phase's bound ({timeout_s:g} s)"),
            measured.get("chunks_per_sample", 1),
        )  # fmt: skip
        if "load" in events:
            part.host_load = HostLoad.model_validate(events["load"]["load"])
        part.threads, part.cpus = result.threads, result.cpus
        latency = latency_stats(samples, part.warmup, (result.build_s or 0.0) * 1e3, rules, [part])
        latency.frames = result.frames
    if run.timed_out_phase is not None:
        result.status = "slow"
        result.error = f"the {run.timed_out_phase} phase took over {timeout_s:g} s"
    elif "error" in events:
        error = events["error"]
        result.status, result.error = "failed", f"{error['type']}: {error['message']}"
    elif "measured" not in events:
        result.status = "failed"
        result.error = f"the baseline process exited with status {run.returncode}\n{run.log_tail}"
    return latency


def _report(event: dict[str, Any], say: Progress) -> None:
    if event["event"] == "built":
        cpus = CpuShare.model_validate(event["cpus"])
        say(
            f"baseline: built in {event['seconds']:.1f} s; timing on {event['threads']} torch threads "
            f"({cpus.describe()})"
        )


def _child(args: argparse.Namespace, log: EventLog) -> None:
    import time

    import torch

    from worker.trace.policies.registry import get_adapter
    from worker.trace.stage import history_steps

    rules = TimingRules.model_validate_json(args.rules)
    log.emit(
        "host",
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        interop_threads=torch.get_num_interop_threads(),
    )
    start = time.perf_counter()
    traced = get_adapter(args.policy)(seed=args.seed, checkpoint=args.checkpoint)
    # A policy that stacks a history of observations has a bundle of frame 0 alone (the trace's rule,
    # worker.trace.stage.write_trace): its device run cycles over that one, and so does its baseline.
    count = 1 if history_steps(traced) > 1 else args.frames
    frames = [traced.make_frame(i) for i in range(count)]
    seconds = time.perf_counter() - start
    # As many intra-op threads as this process has CPUs nobody else uses: PyTorch's pool collapses when
    # one of its threads shares a core, while a device runtime's pool barely moves.
    cpus = cpu_share()
    torch.set_num_threads(cpus.threads)
    log.emit(
        "built", seconds=seconds, threads=torch.get_num_threads(), cpus=cpus.model_dump(mode="json"),
        frames=len(frames),
    )  # fmt: skip
    log.emit("phase", phase="time")

    def chunk(index: int) -> None:
        traced.plan.run(traced.eager, frames[index % len(frames)])

    with torch.no_grad():
        meter = LoadMeter().start()
        timed = timed_loop(chunk, rules, on_sample=lambda ms: log.emit("sample", ms=ms))
        log.emit("load", load=meter.stop().model_dump(mode="json"))
    log.emit(
        "measured", warmup=timed.warmup, seconds=timed.seconds, stopped=timed.stopped,
        chunks_per_sample=timed.chunks_per_sample,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.bundle.baseline")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--frames", type=int, default=1)
    parser.add_argument("--rules", required=True, help="TimingRules as JSON")
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
