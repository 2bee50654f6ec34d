"""Time a policy's XNNPACK action chunk with the device runner, as a device host would (torch-free
runner), next to eager PyTorch on the same CPU (``coverfarm baseline``), for two seeds, and print the
speed-ups and whether they agree.

For each seed (two traces, two bundles: MLPerf's TEST05 idea, a second set of weights must give the same
answer) it builds the bundle with ``coverfarm analyze --seed N`` unless ``--bundle`` names one, then
runs ``coverfarm runner run-bundle`` and ``coverfarm baseline --seed N`` one after the other in child
processes (never at the same time: they would share the cores; each also holds the host's timing lock),
under the same timing rules, and prints both summaries, the checks and the speed-up
(``coverfarm.baseline.speedup``: none unless both sides are stable, same runner, same host, same inputs).
The two seeds' speed-ups must agree within ``--agree`` (5%); the exit status says whether they did.

    python benchmarks/runner_latency.py
    python benchmarks/runner_latency.py --seeds 0,1 --min-seconds 5 --max-seconds 30
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

from coverfarm.baseline import BaselineResult, Speedup, speedup
from coverfarm.device_result import DeviceResult, LatencyStats

COVERFARM = [sys.executable, "-m", "coverfarm_cli"]
# Recorded as the runner of both sides when this host has no enrolled runner: one benchmark process
# tree times both, one after the other.
BENCHMARK_RUNNER_ID = 0


def build_bundle(policy: str, backend: str, seed: int, out: Path) -> Path:
    print(f"building the {policy}/{backend} bundle (seed {seed}) with coverfarm analyze ...", file=sys.stderr)
    run = subprocess.run(
        [*COVERFARM, "analyze", "--policy", policy, "--backend", backend, "--seed", str(seed),
         "--out", str(out / f"seed-{seed}"), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(json.loads(run.stdout)["bundle"]["path"])


def timing_arguments(args: argparse.Namespace) -> list[str]:
    out = ["--runner-id", str(args.runner_id)]
    for option in ("warmup", "min_chunks", "min_seconds", "max_seconds", "replicas"):
        value = getattr(args, option)
        if value is not None:
            out += [f"--{option.replace('_', '-')}", str(value)]
    return out


def run_device(bundle: Path, args: argparse.Namespace, out: Path) -> DeviceResult:
    result_path = out / "result.json"
    out.mkdir(parents=True, exist_ok=True)
    run = [*COVERFARM, "runner", "run-bundle", str(bundle), "--out", str(result_path), "--unsigned"]
    run += [*timing_arguments(args), "--runtime", args.runtime]
    if args.executor_runner:
        run += ["--executor-runner", str(args.executor_runner)]
    subprocess.run(run, capture_output=True, check=False)
    return DeviceResult.model_validate_json(result_path.read_text())


def measure_eager(policy: str, seed: int, args: argparse.Namespace) -> BaselineResult:
    print(f"timing eager {policy} (seed {seed}) with coverfarm baseline ...", file=sys.stderr)
    run = subprocess.run(
        [*COVERFARM, "baseline", "--policy", policy, "--seed", str(seed), *timing_arguments(args), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return BaselineResult.model_validate_json(run.stdout)


def _latency(lat: LatencyStats) -> str:
    medians = ", ".join(f"{r.median_ms:.2f}" for r in lat.replicas)
    verdict = "stable" if lat.stable else "UNSTABLE: " + "; ".join(lat.unstable_reasons)
    loads = [r.host_load.other_cores for r in lat.replicas if r.host_load and r.host_load.other_cores]
    load = f", other processes {max(loads):.2f} cores" if loads else ""
    return (
        f"median {lat.median_ms:.2f} ms, p90 {lat.p90_ms:.2f} ms, min {lat.min_ms:.2f} ms per chunk, "
        f"CV {lat.cv:.3f}, replica medians {medians} ms, {lat.iterations} timed{load}; {verdict}"
    )


def one_seed(seed: int, args: argparse.Namespace) -> Speedup | None:
    bundle = args.bundle or build_bundle(args.policy, args.backend, seed, args.out)
    result = run_device(bundle, args, args.out / f"seed-{seed}")
    cell = f"{result.policy}/{result.backend}"
    print(f"seed {seed}  bundle {result.bundle_sha256} ({cell}) on {result.device_class}")
    if result.latency is None:
        print(f"  status    {result.status}: {result.error}")
        return None
    lat = result.latency
    print(f"  runner    {_latency(lat)} ({result.runtime} runtime)")
    print(f"  load      {lat.load_ms:.0f} ms (apart from the steady state)")
    print(f"  checks    status {result.status}" + (f": {result.error}" if result.error else ""))
    print(f"  process   libtorch mapped {result.libtorch_mapped}, torch loaded {result.torch_module_loaded}")
    if not args.baseline or not result.policy:
        return None
    eager = measure_eager(result.policy, seed, args)
    if eager.latency is None:
        print(f"  eager     {eager.status}: {eager.error}")
        return None
    print(f"  eager     {_latency(eager.latency)} (torch {eager.torch_version}, {eager.threads} threads of "
          f"{eager.free_cores} free cores of {eager.cores})")  # fmt: skip
    verdict = speedup(eager, result)
    if verdict.value is not None:
        span = (
            f" [{verdict.low:.2f}–{verdict.high:.2f}]" if verdict.low and verdict.high else " (no interval)"
        )
        known = "known" if verdict.narrow else "not known: " + "; ".join(verdict.reasons)
        print(f"  speed-up  {verdict.value:.2f}x{span} (eager figure / runner figure; {known})")
    else:
        print(f"  speed-up  none: {'; '.join(verdict.reasons)}")
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bundle", type=Path, help="an existing bundle (one seed, no agreement check)")
    parser.add_argument("--policy", default="act")
    parser.add_argument("--backend", default="xnnpack")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds, a trace and bundle each")
    parser.add_argument("--agree", type=float, default=0.05, help="how close the seeds' speed-ups must be")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "coverfarm-runner-bench")
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--min-chunks", type=int)
    parser.add_argument("--min-seconds", type=float)
    parser.add_argument("--max-seconds", type=float)
    parser.add_argument("--replicas", type=int)
    parser.add_argument("--runner-id", type=int, default=BENCHMARK_RUNNER_ID)
    parser.add_argument("--runtime", choices=("auto", "python", "native"), default="auto")
    parser.add_argument("--executor-runner", type=Path, help="a native executor_runner binary")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip eager PyTorch")
    args = parser.parse_args()

    seeds = [0] if args.bundle else [int(s) for s in args.seeds.split(",") if s.strip()]
    verdicts = [one_seed(seed, args) for seed in seeds]
    if not args.baseline or len(seeds) < 2:
        return 0 if all(v is None or v.allowed for v in verdicts) else 1
    values = [v.value for v in verdicts if v is not None and v.value is not None]
    if len(values) < len(seeds):
        print("agreement  not judged: a seed gave no speed-up")
        return 1
    spread = max(values) / min(values) - 1
    agreed = spread <= args.agree
    shown = ", ".join(f"{v:.2f}x" for v in values)
    print(f"agreement  speed-ups {shown} differ by {spread:.1%}: {'agree' if agreed else 'DISAGREE'} "
          f"(within {args.agree:.0%})")  # fmt: skip
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
