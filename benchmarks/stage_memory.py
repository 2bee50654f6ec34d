"""Peak memory of each stage per policy, real against fake weights, and the ratio behind the estimate.

For each policy: parameter bytes, the peak resident MB of the trace, reference, partition and export
phases with real weights and with fake weights (fresh trace cache, so the trace is measured), and
``(real peak - BASE) / parameter bytes``, the factor ``worker.trace.weights`` uses to estimate whether real
weights fit a worker (``PEAK_FACTOR``).

    python benchmarks/stage_memory.py --policies act,vqbet,diffusion --backend xnnpack
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from coverfarm.result import Options
from worker.engine import analyze
from worker.trace.weights import BASE_BYTES, PEAK_FACTOR

PHASES = ("trace", "reference", "partition", "export")
MB = 1024**2


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="act,vqbet")
    parser.add_argument("--backend", default="xnnpack")
    parser.add_argument("--frames", type=int, default=1)
    args = parser.parse_args()
    print(f"estimate: {BASE_BYTES / MB:.0f} MB + {PEAK_FACTOR} x parameter bytes")
    print(
        f"{'policy':16} {'weights':7} {'params MB':>9} " + " ".join(f"{p:>9}" for p in PHASES) + "   factor"
    )
    for policy in args.policies.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            for weights in ("real", "fake"):
                doc = analyze(
                    policy,
                    args.backend,
                    Options(weights=weights, frames=args.frames),
                    Path(tmp) / weights,
                    trace_cache=Path(tmp) / "cache",
                )
                size = doc.weights.parameter_bytes if doc.weights else None
                peaks = [doc.memory.get(phase) for phase in PHASES]
                cells = " ".join(f"{p:9.0f}" if p is not None else f"{'-':>9}" for p in peaks)
                factor = "-"
                if size and weights == "real":
                    peak = max(p for p in peaks if p is not None) * MB
                    factor = f"{(peak - BASE_BYTES) / size:.2f}"
                params = f"{size / MB:9.0f}" if size else f"{'-':>9}"
                print(f"{policy:16} {weights:7} {params} {cells}   {factor}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
