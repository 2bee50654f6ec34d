"""Time act's XNNPACK action chunk with the device runner, as a device host would (torch-free runner),
next to eager PyTorch on the same CPU (``coverfarm baseline``), and print the speed-up.

Builds the bundle with ``coverfarm analyze`` unless ``--bundle`` names one, then runs
``coverfarm runner run-bundle`` and ``coverfarm baseline`` one after the other in child processes of this
one run (never at the same time: they would share the cores), with the same warm-up and iteration counts,
and prints both latency summaries, the checks and eager median / runner median.

    python benchmarks/runner_latency.py --warmup 5 --iterations 50
    python benchmarks/runner_latency.py --bundle ~/bundles/<sha256> --no-baseline
    python benchmarks/runner_latency.py --runtime native --executor-runner ~/et/executor_runner
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from coverfarm.baseline import BaselineResult, speedup
from gpu_runner.result import DeviceResult, LatencyStats

COVERFARM = [sys.executable, "-m", "coverfarm"]


def build_bundle(policy: str, backend: str, out: Path) -> Path:
    print(f"building the {policy}/{backend} bundle with coverfarm analyze ...", file=sys.stderr)
    run = subprocess.run(
        [*COVERFARM, "analyze", "--policy", policy, "--backend", backend, "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(run.stdout)["bundle"]["path"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bundle", type=Path, help="an existing bundle directory (default: build act/xnnpack)"
    )
    parser.add_argument("--policy", default="act")
    parser.add_argument("--backend", default="xnnpack")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "coverfarm-runner-bench")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--runtime", choices=("auto", "python", "native"), default="auto")
    parser.add_argument("--executor-runner", type=Path, help="a native executor_runner binary")
    parser.add_argument(
        "--no-baseline", dest="baseline", action="store_false", help="skip the eager PyTorch baseline"
    )
    args = parser.parse_args()

    bundle = args.bundle or build_bundle(args.policy, args.backend, args.out)
    result_path = args.out / "result.json"
    result_path.parent.mkdir(parents=True, exist_ok=True)
    timing = ["--warmup", str(args.warmup), "--iterations", str(args.iterations)]
    run = [*COVERFARM, "runner", "run-bundle", str(bundle), "--out", str(result_path), *timing]
    run += ["--runtime", args.runtime]
    if args.executor_runner:
        run += ["--executor-runner", str(args.executor_runner)]
    subprocess.run(run, capture_output=True, check=False)
    result = DeviceResult.model_validate_json(result_path.read_text())
    print(f"bundle    {result.bundle_sha256} ({result.policy}/{result.backend}) on {result.device_class}")
    if result.latency is None:
        print(f"status    {result.status}: {result.error}")
        return 1
    lat = result.latency
    print(f"runner    {_latency(lat)} ({result.runtime} runtime)")
    print(f"spread    CV {lat.cv:.3f} ({'stable' if lat.stable else 'UNSTABLE'}), {lat.iterations} timed")
    print(f"load      {lat.load_ms:.0f} ms (apart from the steady state)")
    print(f"measured  {lat.method}")
    print(f"checks    status {result.status}" + (f": {result.error}" if result.error else ""))
    print(f"process   libtorch mapped: {result.libtorch_mapped}, torch loaded: {result.torch_module_loaded}")
    if args.baseline and result.policy:
        eager = measure_eager(result.policy, args.warmup, args.iterations)
        if eager.latency is None:
            print(f"eager     {eager.status}: {eager.error}")
            return 1
        print(
            f"eager     {_latency(eager.latency)} (torch {eager.torch_version}, {eager.threads} threads), "
            f"CV {eager.latency.cv:.3f} ({'stable' if eager.latency.stable else 'UNSTABLE'})"
        )
        ratio = speedup(eager, lat)
        print(f"speed-up  {ratio:.2f}x (eager median / runner median)" if ratio else "speed-up  unknown")
    return 0 if result.status == "ok" else 1


def measure_eager(policy: str, warmup: int, iterations: int) -> BaselineResult:
    print(f"timing eager {policy} with coverfarm baseline ...", file=sys.stderr)
    timing = ["--warmup", str(warmup), "--iterations", str(iterations)]
    run = subprocess.run(
        [*COVERFARM, "baseline", "--policy", policy, *timing, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    return BaselineResult.model_validate_json(run.stdout)


def _latency(lat: LatencyStats) -> str:
    return f"median {lat.median_ms:.1f} ms, p90 {lat.p90_ms:.1f} ms, min {lat.min_ms:.1f} ms per chunk"


if __name__ == "__main__":
    sys.exit(main())
