"""Time each stage of the coverage engine per policy and backend, and print the tracker rows.

Prints, per (policy, backend): trace seconds (uncached: each repeat traces into a fresh cache), partition
phase seconds (to_edge + partitioning), the support check + connected-groups seconds, export phase
seconds (lowering + to_executorch), each a median over ``--repeat`` runs, then the rows themselves.

    python benchmarks/engine_stages.py --policies act,vqbet --backends vulkan,xnnpack --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from coverfarm import tracker
from coverfarm.result import Options, ResultDocument
from worker.engine import analyze

DEFAULT_POLICIES = "act,diffusion,gaussian_actor,multi_task_dit,tdmpc,vqbet"


def median(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f}" if values else "       -"


def groups_seconds(doc: ResultDocument) -> float:
    return sum(v for k, v in doc.timings.items() if k.endswith(".support_and_groups_s"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--backends", default="vulkan,xnnpack")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--lowering", choices=["stock", "fast"], default="fast")
    parser.add_argument(
        "--frames",
        type=int,
        default=1,
        help="eager reference frames in the trace (1: the test case only; a diffusion frame costs minutes)",
    )
    args = parser.parse_args()

    rows: dict[str, list[list[str]]] = {}
    print(f"lowering {args.lowering}, {args.frames} reference frame(s), median of {args.repeat} run(s)")
    print(
        f"{'policy':16s} {'backend':8s} {'trace s':>8s} {'part. s':>8s} {'groups s':>8s} {'export s':>8s}"
        f" {'wall s':>8s}  status"
    )
    for policy in args.policies.split(","):
        for backend in args.backends.split(","):
            trace_s: list[float] = []
            part_s: list[float] = []
            group_s: list[float] = []
            export_s: list[float] = []
            wall_s: list[float] = []
            doc = None
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    start = time.monotonic()
                    doc = analyze(
                        policy,
                        backend,
                        Options(timeout_s=args.timeout, lowering=args.lowering, frames=args.frames),
                        Path(tmp) / "out",
                        trace_cache=Path(tmp) / "traces",
                    )
                    wall_s.append(time.monotonic() - start)
                trace_s.append(doc.trace.seconds or 0.0)
                if doc.partition.seconds is not None:
                    part_s.append(doc.partition.seconds)
                    group_s.append(groups_seconds(doc))
                if doc.export.seconds is not None:
                    export_s.append(doc.export.seconds)
            assert doc is not None
            times = " ".join(median(v) for v in (trace_s, part_s, group_s, export_s, wall_s))
            cause = tracker.cause_line(doc) or ""
            print(f"{policy:16s} {backend:8s} {times}  {doc.status.value} {cause}"[:300], flush=True)
            rows.setdefault(backend, []).append(tracker.row(doc))
    for backend, backend_rows in rows.items():
        print()
        print(tracker.markdown_table(tracker.columns(backend), backend_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
