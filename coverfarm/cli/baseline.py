"""``coverfarm baseline``: time a policy's action chunk in eager PyTorch on this host's CPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from coverfarm import catalog
from coverfarm.errors import UserError
from coverfarm.result import Options

MAX_FRAMES = 16


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "baseline",
        help="time a policy's action chunk in eager PyTorch on this CPU (the speed-up's baseline)",
        description="Build a policy with the engine's adapter and time its eager action chunk here.",
    )
    parser.add_argument("--policy", required=True, help="LeRobot policy type, e.g. act")
    parser.add_argument("--warmup", type=int, default=3, help="untimed chunks before timing (3)")
    parser.add_argument("--iterations", type=int, default=20, help="timed chunks (20)")
    parser.add_argument(
        "--frames", type=int, default=1, help="timed chunks cycle over frames 0..N-1, 1-16 (1: frame 0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (0)")
    parser.add_argument(
        "--checkpoint", type=Path, help="a local checkpoint directory instead of random weights"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each phase, seconds (900)")
    parser.add_argument("--json", action="store_true", help="print the baseline document as JSON")
    parser.add_argument("--out", type=Path, help="also write the baseline document (JSON) to this file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problem = catalog.check_policy(args.policy)
    if problem:
        raise UserError(problem)
    if args.warmup < 0:
        raise UserError(f"--warmup must be 0 or more, got {args.warmup}")
    if args.iterations < 1:
        raise UserError(f"--iterations must be at least 1, got {args.iterations}")
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
        )
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(f"--{first['loc'][0]}: {first['msg']}") from None

    from worker.baseline import measure_baseline  # the measuring itself runs in a child process

    result = measure_baseline(
        args.policy,
        options,
        frames=args.frames,
        warmup=args.warmup,
        iterations=args.iterations,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    if args.out is not None:
        args.out.write_text(result.model_dump_json(indent=2) + "\n")
    if args.json:
        print(result.model_dump_json(indent=2))
    elif result.latency is not None:
        lat = result.latency
        print(
            f"{result.policy}: eager PyTorch {result.torch_version} on {result.threads} CPU threads: "
            f"median {lat.median_ms:.1f} ms, p90 {lat.p90_ms:.1f} ms, min {lat.min_ms:.1f} ms per chunk "
            f"(CV {lat.cv:.3f}, {'stable' if lat.stable else 'unstable'}; {lat.iterations} timed after "
            f"{lat.warmup} warm-up)"
        )
    if result.status != "ok":
        print(f"baseline {result.status}: {result.error}", file=sys.stderr)
        return 1
    return 0
