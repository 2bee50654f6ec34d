"""Time act's XNNPACK action chunk with the device runner, as a device host would (torch-free runner).

Builds the bundle with ``coverfarm analyze`` unless ``--bundle`` names one, then runs
``coverfarm runner run-bundle`` in a child process and prints the latency summary and the checks.

    python benchmarks/runner_latency.py --warmup 5 --iterations 50
    python benchmarks/runner_latency.py --bundle ~/bundles/<sha256>
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_runner.result import DeviceResult

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
    args = parser.parse_args()

    bundle = args.bundle or build_bundle(args.policy, args.backend, args.out)
    result_path = args.out / "result.json"
    result_path.parent.mkdir(parents=True, exist_ok=True)
    timing = ["--warmup", str(args.warmup), "--iterations", str(args.iterations)]
    run = [*COVERFARM, "runner", "run-bundle", str(bundle), "--out", str(result_path), *timing]
    subprocess.run(run, capture_output=True, check=False)
    result = DeviceResult.model_validate_json(result_path.read_text())
    print(f"bundle    {result.bundle_sha256} ({result.policy}/{result.backend}) on {result.device_class}")
    if result.latency is None:
        print(f"status    {result.status}: {result.error}")
        return 1
    lat = result.latency
    print(
        f"latency   median {lat.median_ms:.1f} ms, p90 {lat.p90_ms:.1f} ms, min {lat.min_ms:.1f} ms per chunk"
    )
    print(f"spread    CV {lat.cv:.3f} ({'stable' if lat.stable else 'UNSTABLE'}), {lat.iterations} timed")
    print(f"load      {lat.load_ms:.0f} ms (apart from the steady state)")
    print(f"checks    status {result.status}" + (f": {result.error}" if result.error else ""))
    print(f"process   libtorch mapped: {result.libtorch_mapped}, torch loaded: {result.torch_module_loaded}")
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
