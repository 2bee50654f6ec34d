"""``coverfarm baseline``: time a policy's action chunk in eager PyTorch on this host's CPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from coverfarm import catalog
from coverfarm.errors import UserError, one_line
from coverfarm.result import Options, error_line
from coverfarm_cli.runner_farm import add_signing_options
from gpu_runner.timing_options import add_timing_options, timing_rules

MAX_FRAMES = 16


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "baseline",
        help="time a policy's action chunk in eager PyTorch on this CPU (the speed-up's baseline)",
        description="Build a policy with the engine's adapter and time its eager action chunk here.",
    )
    parser.add_argument("--policy", required=True, help="LeRobot policy type, e.g. act")
    add_timing_options(parser)
    parser.add_argument(
        "--frames",
        type=int,
        default=16,
        help="the bundle's frames, 1-16 (16): timed chunks cycle over them unless --inputs frame0; a "
        "policy that stacks a history of observations has frame 0 alone, as its bundle",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (0)")
    parser.add_argument(
        "--checkpoint", type=Path, help="a local checkpoint directory instead of random weights"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each phase, seconds (900)")
    parser.add_argument("--json", action="store_true", help="print the baseline document as JSON")
    parser.add_argument(
        "--out",
        type=Path,
        help="also write the baseline document (JSON) to this file, signed when a runner is enrolled "
        "here (for `coverfarm results import`)",
    )
    add_signing_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problem = catalog.check_policy(args.policy)
    if problem:
        raise UserError(problem)
    from coverfarm.settings import get_settings

    settings = get_settings()
    rules = timing_rules(args, settings)
    if not 1 <= args.frames <= MAX_FRAMES:
        raise UserError(f"--frames must be 1 to {MAX_FRAMES}, got {args.frames}")
    if args.timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.checkpoint is not None and not args.checkpoint.is_dir():
        raise UserError(f"checkpoint {args.checkpoint} is not a readable directory")
    try:
        options = Options(
            timeout_s=args.timeout,
            seed=args.seed,
            checkpoint=str(args.checkpoint.resolve()) if args.checkpoint else None,
            frames=args.frames,
        )
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(f"--{first['loc'][0]}: {first['msg']}") from None

    from coverfarm_cli.runner_farm import enrolled_runner_id
    from farmrun.hostlock import HostLock
    from worker.bundle.baseline import measure_baseline  # the measuring itself runs in child processes

    result = measure_baseline(
        args.policy,
        options,
        rules,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
        lock=HostLock(settings.timing_lock_path),
        lock_wait_s=settings.timing_lock_wait_s,
        runner_id=args.runner_id if args.runner_id is not None else enrolled_runner_id(args),
    )
    if args.out is not None:
        from coverfarm_cli.runner_farm import result_json

        args.out.write_text(result_json(result.model_dump(mode="json"), args) + "\n")
    if args.json:
        print(result.model_dump_json(indent=2))
    elif result.latency is not None:
        from coverfarm.latency_interval import interval_of

        lat = result.latency
        judged = interval_of(lat)
        span = f" [{judged.low_ms:.1f}–{judged.high_ms:.1f}]" if judged.low_ms and judged.high_ms else ""
        verdict = f"known within ±{judged.width:.0%}" if judged.narrow else f"not known: {judged.reason}"
        medians = ", ".join(f"{r.median_ms:.1f}" for r in lat.replicas)
        cpus = result.cpus.describe() if result.cpus else f"{result.free_cores} of {result.cores} cores free"
        print(
            f"{result.policy}: eager PyTorch {result.torch_version} on {result.threads} CPU threads "
            f"({cpus}): {judged.figure_ms:.1f}{span} ms per chunk "
            f"(replica medians {medians} ms; {verdict}; jitter: p90 {lat.p90_ms:.1f} ms, min "
            f"{lat.min_ms:.1f} ms, CV {lat.cv:.3f}; {lat.iterations} timed)"
        )
    if result.status != "ok":
        cause = error_line(result.error) or "no cause given"
        print(f"coverfarm: error: baseline {result.status}: {one_line(cause)}", file=sys.stderr)
        return 1
    return 0
