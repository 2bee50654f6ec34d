"""Stock vs fast Vulkan lowering on real policies, side by side in one run, with the equality verdict.

For each policy: the engine lowers it for Vulkan twice from the same trace, once with torch.fx's stock
CapabilityBasedPartitioner and once with the exact fast partitioner plus the pattern-graph cache. It
prints the partitioner's own seconds, the partition phase (to_edge + partitioning) and the export phase
(lowering + to_executorch) of each, the speed-ups, and whether the two give the same numbers and
byte-identical ``.pte`` files (which implies the same partitions).

    python benchmarks/lowering_policies.py --policies act,vqbet --timeout 1800

Traces come from the engine's trace cache (``COVERFARM_TRACE_CACHE``, or ``--trace-cache``), so a policy
traced before is not traced again.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from coverfarm.result import Options, ResultDocument
from worker.engine import analyze, default_trace_cache

DEFAULT_POLICIES = "act,gaussian_actor,vqbet,multi_task_dit,diffusion,tdmpc"


def partitioner_seconds(doc: ResultDocument) -> float:
    return sum(v for k, v in doc.timings.items() if k.endswith(".partition_s"))


def same(stock: ResultDocument, fast: ResultDocument) -> str:
    if stock.export.status.value != "ok" or fast.export.status.value != "ok":
        return f"not comparable (stock {stock.status.value}, fast {fast.status.value})"
    for field in ("ops", "heavy_macs", "programs", "blockers"):
        if getattr(stock, field) != getattr(fast, field):
            return f"NO: {field} differ: stock {getattr(stock, field)!r} fast {getattr(fast, field)!r}"
    notes = []
    for a, b in zip(stock.program_list, fast.program_list, strict=True):
        if a.pte is None or b.pte is None:
            return f"NO: {a.name} has no .pte"
        difference = pte_difference(Path(a.pte).read_bytes(), Path(b.pte).read_bytes())
        if difference is None:
            continue
        if difference.startswith("NO"):
            return f"{difference} ({a.name}.pte)"
        notes.append(f"{a.name}.pte {difference}")
    return "yes (same numbers, byte-identical .pte" + "".join(f"; {note}" for note in notes) + ")"


def named_constants(pte: bytes) -> dict[str, bytes]:
    """The .pte's named constants (delegate weights), by key: the SHA-256 of their bytes."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    named = deserialize_pte_binary(pte).named_data
    if named is None:
        return {}
    return {key: bytes(named.buffers[entry.buffer_index]) for key, entry in named.pte_data.items()}


def pte_difference(a: bytes, b: bytes) -> str | None:
    """None when the two files are byte-identical. Otherwise, whether they are identical once the
    contents of the named constants that differ are swapped: a constant folded from ``torch.empty``
    holds whatever memory it got (tdmpc's ``pi_actions``), and its key is the hash of those bytes."""
    if a == b:
        return None
    try:
        ours, theirs = named_constants(a), named_constants(b)
    except Exception as error:  # a file that does not parse differs from one that does
        return f"NO: differs ({type(error).__name__}: {error})"
    only_a = sorted((key for key in ours if key not in theirs), key=lambda key: a.find(ours[key]))
    only_b = sorted((key for key in theirs if key not in ours), key=lambda key: b.find(theirs[key]))
    if len(only_a) != len(only_b):
        return "NO: differs"
    pairs = list(zip(only_a, only_b, strict=True))
    if any(len(ours[x]) != len(theirs[y]) for x, y in pairs):
        return "NO: differs"
    swapped = b
    for x, y in pairs:
        swapped = swapped.replace(y.encode(), x.encode()).replace(theirs[y], ours[x])
    if swapped != a:
        return "NO: differs"
    sizes = ", ".join(f"{len(ours[key]):,}" for key in only_a)
    return f"identical apart from the contents and content hashes of {len(pairs)} constant(s): {sizes} bytes"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.1f}x" if a and b else "     -"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--trace-cache", type=Path, default=None, help="default: the engine's cache")
    args = parser.parse_args()

    header = ("policy", "impl", "partitioner s", "partition phase s", "export phase s")
    print("{:16s} {:5s} {:>13s} {:>17s} {:>14s}  programs".format(*header))
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.trace_cache or default_trace_cache()
        for policy in args.policies.split(","):
            docs = {}
            for lowering in ("fast", "stock"):
                options = Options(lowering=lowering, frames=1, timeout_s=args.timeout)
                doc = analyze(policy, "vulkan", options, Path(tmp) / lowering, trace_cache=cache)
                docs[lowering] = doc
                part, phase, export = (
                    partitioner_seconds(doc),
                    doc.partition.seconds or 0.0,
                    doc.export.seconds or 0.0,
                )
                line = f"{policy:16s} {lowering:5s} {part:13.1f} {phase:17.1f} {export:14.1f}"
                print(f"{line}  {doc.programs.count}", flush=True)
            stock, fast = docs["stock"], docs["fast"]
            speedups = (
                ratio(partitioner_seconds(stock), partitioner_seconds(fast)),
                ratio(stock.partition.seconds, fast.partition.seconds),
                ratio(stock.export.seconds, fast.export.seconds),
            )
            print(
                "{:16s} speed-up: partitioner {}, partition phase {}, export phase {}; equal: {}".format(
                    policy, *speedups, same(stock, fast)
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
