"""``coverfarm analyze``: measure one policy on one backend here and print the tracker's row."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from coverfarm import backends, catalog, tracker, workarounds
from coverfarm.errors import UserError
from coverfarm.result import Options

DEFAULTS = Options()  # the CLI's defaults are the options' own: a repro command leaves them out


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "analyze",
        help="trace, partition and export one policy for one backend; print the tracker's row",
        description="Trace a LeRobot policy, lower it with an ExecuTorch partitioner, and print its row.",
    )
    parser.add_argument(
        "--policy",
        required=True,
        help=f"LeRobot policy type, one of the tracker's: {', '.join(catalog.POLICIES)} "
        f"({', '.join(catalog.NOT_IN_LEROBOT)} are not in lerobot {catalog.LEROBOT_VERSION}: their row "
        "says so)",
    )
    parser.add_argument("--backend", required=True, help=" or ".join(catalog.BACKENDS))
    parser.add_argument("--json", action="store_true", help="print the whole result document as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULTS.timeout_s,
        help=f"bound of each stage, seconds ({DEFAULTS.timeout_s:g})",
    )
    parser.add_argument("--out", type=Path, default=Path("out"), help="where programs and bundles go (./out)")
    parser.add_argument(
        "--seed", type=int, default=DEFAULTS.seed, help=f"seed of the random weights ({DEFAULTS.seed})"
    )
    parser.add_argument(
        "--frames",
        type=int,
        default=DEFAULTS.frames,
        help=f"eager reference frames for the device check, 1-16 ({DEFAULTS.frames})",
    )
    parser.add_argument(
        "--checkpoint", type=Path, help="a local checkpoint directory instead of random weights"
    )
    parser.add_argument(
        "--no-constant-prop",
        dest="constant_prop",
        action="store_false",
        help="skip ExecuTorch's constant propagation before partitioning (it runs by default)",
    )
    parser.add_argument(
        "--lowering",
        choices=["stock", "fast"],
        default=DEFAULTS.lowering,
        help="capability partitioner: torch.fx stock, or the exact fast one with identical partitions "
        f"({DEFAULTS.lowering})",
    )
    parser.add_argument(
        "--weights",
        choices=["auto", "real", "fake"],
        default=DEFAULTS.weights,
        help="real: seeded or checkpoint weights; fake: fake tensors, coverage columns only (no export); "
        "auto: fake when the real-weight peak is estimated over this worker's memory "
        f"(COVERFARM_WORKER_MEMORY_GB, default MemTotal) ({DEFAULTS.weights})",
    )
    parser.add_argument(
        "--force-fp16",
        action="store_true",
        help="Vulkan only: VulkanPartitioner({'force_fp16': True}); the bundle then states fp16's tolerance",
    )
    parser.add_argument(
        "--etrecord",
        action="store_true",
        help="put each program's ETRecord into the bundle (reading a device profile needs it; "
        "several times the .pte's size)",
    )
    parser.add_argument(
        "--workaround",
        dest="workarounds",
        action="append",
        default=[],
        metavar="NAME",
        help="lower with a graph rewrite that works around a backend's finding, recorded on the cell as "
        f"changing what is measured (repeatable; known: {', '.join(sorted(workarounds.WORKAROUNDS))})",
    )
    parser.set_defaults(func=run)


def options_of(args: argparse.Namespace) -> Options:
    """The options the command line asks for; a bad one is a UserError naming it."""
    if args.timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.checkpoint is not None and not args.checkpoint.is_dir():
        raise UserError(f"checkpoint {args.checkpoint} is not a readable directory")
    if args.weights == "fake" and args.checkpoint is not None:
        raise UserError("--weights fake builds the policy without weights: it cannot use --checkpoint")
    if args.force_fp16 and not backends.takes_force_fp16(args.backend):
        raise UserError(f"--force-fp16 is a Vulkan partitioner option; backend {args.backend} has none")
    problem = workarounds.problem(args.workarounds, args.backend)
    if problem:
        raise UserError(f"--workaround: {problem}")
    try:
        return Options(
            timeout_s=args.timeout,
            seed=args.seed,
            frames=args.frames,
            checkpoint=str(args.checkpoint.resolve()) if args.checkpoint else None,
            constant_prop=args.constant_prop,
            lowering=args.lowering,
            weights=args.weights,
            force_fp16=args.force_fp16,
            etrecord=args.etrecord,
            workarounds=tuple(sorted(args.workarounds)),
        )
    except ValidationError as error:
        first = error.errors()[0]
        option = "--" + "-".join(str(part) for part in first["loc"]).replace("_", "-")
        raise UserError(f"{option}: {first['msg']}") from None


def run(args: argparse.Namespace) -> int:
    for problem in (catalog.check_policy(args.policy), catalog.check_backend(args.backend)):
        if problem:
            raise UserError(problem)
    options = options_of(args)

    from worker.engine import analyze  # imports torch: only once the arguments are known to be good

    doc = analyze(
        args.policy,
        args.backend,
        options,
        args.out.resolve(),
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    if args.json:
        print(doc.model_dump_json(indent=2))
    else:
        print(tracker.analyze_output(doc))
    return 0
