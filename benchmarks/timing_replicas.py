"""Time one cell 5 times, each in fresh processes, and print the spread of the medians: the old way (one
process, 3 warm-up + 20 timed chunks of frame 0) and under the farm's timing rules (time-bounded
replicas in fresh processes, cycling over the frames, under the host's timing lock).

    python benchmarks/timing_replicas.py BUNDLE_DIR [--runs 5] [--baseline act]
    python benchmarks/timing_replicas.py BUNDLE_DIR --grouping [--runs 5]

``--grouping`` compares, run for run and alternating, one chunk per sample (``--min-sample-ms 0``) with
the settings' rules, which time chunks shorter than the sample target several to a sample: for a program
of well under a millisecond, the first reaches the count cap before its minimum time and reads unstable.

Each run is a fresh ``coverfarm runner run-bundle`` process (and, with ``--baseline P``, a fresh
``coverfarm baseline`` process for the same policy), one after the other. The spread is the largest
median over the smallest, minus one; a farm that can be trusted keeps it within the replica tolerance
(5%). The host's load over each timing (other processes' CPU, in cores) is printed beside it: on a
shared machine the spread says as much about the neighbours as about the runtime.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from coverfarm.device_result import LatencyStats
from coverfarm.digest import bundle_digest

COVERFARM = [sys.executable, "-m", "coverfarm_cli"]
# The fixed count the farm used before its timing rules, one replica, frame 0.
BEFORE = ["--warmup", "3", "--min-chunks", "20", "--min-seconds", "0", "--replicas", "1"]
BEFORE += ["--inputs", "frame0"]
AFTER: list[str] = []  # the settings' rules
ONE_PER_SAMPLE = ["--min-sample-ms", "0"]  # the settings' rules, each chunk timed alone


def device_latency(bundle: Path, rules: list[str], out: Path) -> LatencyStats | None:
    args = [*COVERFARM, "runner", "run-bundle", str(bundle), "--out", str(out), "--unsigned", *rules]
    args += ["--sha256", bundle_digest(bundle)]  # a bundle kept under another name than its address
    subprocess.run(args, capture_output=True, check=False)
    latency = json.loads(out.read_text()).get("latency")
    return LatencyStats.model_validate(latency) if latency else None


def eager_latency(policy: str, rules: list[str], out: Path) -> LatencyStats | None:
    before = ["--frames", "1"] if rules is BEFORE else []
    args = [*COVERFARM, "baseline", "--policy", policy, *rules, *before, "--out", str(out)]
    subprocess.run(args, capture_output=True, check=False)
    latency = json.loads(out.read_text()).get("latency") if out.exists() else None
    return LatencyStats.model_validate(latency) if latency else None


def describe(name: str, latencies: list[LatencyStats | None]) -> None:
    medians = [lat.median_ms for lat in latencies if lat is not None]
    for number, lat in enumerate(latencies, 1):
        if lat is None:
            print(f"  {name} run {number}: no latency")
            continue
        loads = [r.host_load.other_cores for r in lat.replicas if r.host_load]
        known = [value for value in loads if value is not None]
        load = f"{max(known):.2f}" if known else "? (window too short to tell)"
        verdict = "stable" if lat.stable else "unstable (" + "; ".join(lat.unstable_reasons) + ")"
        group, stopped = (
            (lat.replicas[0].chunks_per_sample, lat.replicas[0].stopped) if lat.replicas else (1, "?")
        )
        print(
            f"  {name} run {number}: median {lat.median_ms:.3f} ms, CV {lat.cv:.3f}, "
            f"{lat.iterations} samples of {group} chunk(s) in {len(lat.replicas) or 1} replica(s), "
            f"stopped: {stopped}, other processes {load} cores, {verdict}"
        )
    if medians:
        spread = max(medians) / min(medians) - 1
        print(f"  {name}: medians {min(medians):.3f}–{max(medians):.3f} ms, spread {spread:.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", metavar="POLICY", help="also time this policy's eager baseline")
    parser.add_argument(
        "--grouping", action="store_true", help="one chunk per sample against grouped samples"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="coverfarm-timing-replicas."))
    if args.grouping:
        runs: dict[str, list[LatencyStats | None]] = {"one chunk per sample": [], "grouped": []}
        for i in range(args.runs):  # alternating, so both see the same neighbours
            runs["one chunk per sample"].append(
                device_latency(args.bundle, ONE_PER_SAMPLE, work / f"one-{i}.json")
            )
            runs["grouped"].append(device_latency(args.bundle, AFTER, work / f"grouped-{i}.json"))
        for label, latencies in runs.items():
            print(label)
            describe("device", latencies)
        return 0
    for label, rules in (("before", BEFORE), ("after", AFTER)):
        print(f"{label}: {' '.join(rules) or 'the settings rules (COVERFARM_TIMING__*)'}")
        device = [device_latency(args.bundle, rules, work / f"{label}-{i}.json") for i in range(args.runs)]
        describe("device", device)
        if args.baseline:
            outs = [work / f"{label}-eager-{i}.json" for i in range(args.runs)]
            eager = [eager_latency(args.baseline, rules, out) for out in outs]
            describe("eager", eager)
    return 0


if __name__ == "__main__":
    sys.exit(main())
