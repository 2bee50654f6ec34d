"""Wall time of one action chunk through a native ``executor_runner``: one process per call against one
live ``--server_mode`` process per program, on the same bundle, side by side in one run; and, for the
processes of one per call, the sum of the binary's own logged execution times over a chunk's calls.

    python benchmarks/native_server_mode.py BUNDLE [--chunks N] [--per-call-chunks M]

Needs a native binary (``COVERFARM_EXECUTOR_RUNNER``) with the bundle's backend; no torch. Prints,
per mode, the load figures and the median and spread of whole-chunk wall times (frame 0, the outputs
checked against the bundle's references on every chunk), the median chunk of the binary's own execution
times (one process per call: what the farm times in that mode, process start, load and file I/O left
out), and the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from coverfarm.bundle_manifest import load_manifest, read_npz
from gpu_runner.bundle_plan import _frame_env, run_plan
from gpu_runner.bundle_run import verify
from gpu_runner.native.binary import configured_path
from gpu_runner.native.runtime import NativeRuntime
from gpu_runner.native.timing import PerCallTiming


def chunk_walls(bundle: Path, server_mode: bool, chunks: int) -> tuple[list[float], float, int, list[float]]:
    """(each chunk's wall ms, ms to load every program, chunks whose outputs differ from frame 0's
    reference beyond the bundle's tolerance, and one process per call each chunk's sum of the binary's
    own logged execution times, else nothing)."""
    binary = configured_path()
    if binary is None:
        raise SystemExit("set COVERFARM_EXECUTOR_RUNNER to an executor_runner build")
    manifest = load_manifest(bundle)
    runtime = NativeRuntime(binary, server_mode=server_mode)
    try:
        start = time.perf_counter()
        programs = {
            p.name: runtime.load_program(p, bundle / p.pte, manifest.backend) for p in manifest.programs
        }
        load_ms = (time.perf_counter() - start) * 1e3
        env = _frame_env(manifest, read_npz(bundle, "frames.npz"), read_npz(bundle, "constants.npz"), 0)
        references = read_npz(bundle, "references.npz")
        walls, own, wrong = [], [], 0
        for _ in range(chunks):
            timing = None if server_mode else PerCallTiming(warmup=0)
            runtime.per_call = timing
            begin = time.perf_counter()
            outputs = run_plan(manifest.plan, programs, env)
            walls.append((time.perf_counter() - begin) * 1e3)
            runtime.per_call = None
            if timing is not None:
                own.append(sum(timing.ms))
            tolerance = manifest.tolerance
            wrong += any(
                not np.allclose(value, references[f"0/{name}"], rtol=tolerance.rtol, atol=tolerance.atol)
                for name, value in outputs.items()
            )
    finally:
        runtime.close()
    return walls, load_ms, wrong, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--chunks", type=int, default=20, help="server-mode chunks (20)")
    parser.add_argument("--per-call-chunks", type=int, default=2, help="one-process-per-call chunks (2)")
    args = parser.parse_args()
    verify(args.bundle)
    manifest = load_manifest(args.bundle)
    calls = len(manifest.plan.calls)
    print(f"bundle {args.bundle.name[:12]} ({manifest.policy}, {manifest.backend}): {calls} calls per chunk")
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    results = {}
    for name, server_mode, chunks in (
        ("one process per call", False, args.per_call_chunks),
        ("server mode", True, args.chunks),
    ):
        walls, load_ms, wrong, own = chunk_walls(args.bundle, server_mode, chunks)
        median = statistics.median(walls)
        spread = (max(walls) - min(walls)) / median if median else 0.0
        results[name] = median
        print(
            f"{name:22} load {load_ms:9.1f} ms  chunk median {median:10.2f} ms  "
            f"min {min(walls):10.2f}  max {max(walls):10.2f}  (n={len(walls)}, spread {spread:.1%}, "
            f"{wrong} chunks outside tolerance)"
        )
        if own:
            results["own"] = statistics.median(own)
            print(
                f"{'':22} the binary's own execution times, summed over a chunk's {calls} calls: median "
                f"{results['own']:.2f} ms (min {min(own):.2f}, max {max(own):.2f})"
            )
    ratio = results["one process per call"] / results["server mode"]
    print(f"server mode is {ratio:.1f}x faster per chunk")
    if "own" in results:
        overhead = results["server mode"] / results["own"]
        print(f"server mode's chunk is {overhead:.2f}x the binary's own execution time summed over it")


if __name__ == "__main__":
    main()
