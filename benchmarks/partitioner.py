"""Stock vs fast capability partitioner, and the Vulkan pattern-graph cache, on the tracker's repro 4.

Repro 4 ("Blocks": a linear per block with an elu side branch that stays on the CPU) is the tracker's
example of partitioning time growing much faster than the graph. For each size this prints the seconds
of ``VulkanPartitioner().partition(ep)`` with torch.fx's partitioner ("stock") and with
``ExactCapabilityPartitioner`` ("fast") side by side, the speed-up, and whether every node got the same
``delegation_tag``. Both run with the pattern-graph cache on and warm, so the columns differ only in the
partitioner. Then it lowers repro 4 to a .pte three ways -- upstream as is, with the pattern-graph cache,
and with everything ``lowering: fast`` adds to it (the cache, one recompile per program instead of one
per partition, one verification after copying shared constants) -- and compares the bytes. CPU
seconds are printed beside wall seconds, since this machine is shared.

    python benchmarks/partitioner.py                   # 50, 100, 200, 400 blocks (400 stock: minutes)
    python benchmarks/partitioner.py --blocks 50 100 --runs 5 --cache-blocks 0
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge, to_edge_transform_and_lower
from torch.export import ExportedProgram

from worker.lower.fast.partitioner_impl import PartitionerImpl, capability_partitioner
from worker.lower.fast.pattern_cache import cached_pattern_graphs
from worker.lower.fast.switch import fast_lowering


class Blocks(torch.nn.Module):
    """Repro 4 of the tracker issue, verbatim."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            a = layer(x)
            x = a * torch.sigmoid(a) + torch.nn.functional.elu(a)  # elu stays on the CPU
        return x


def export_blocks(n: int, model: Blocks | None = None) -> ExportedProgram:
    return torch.export.export((model or Blocks(n)).eval(), (torch.ones(1, 32),))


def partition_once(ep: ExportedProgram, impl: PartitionerImpl) -> tuple[float, dict[str, str | None]]:
    """Seconds of one VulkanPartitioner.partition, and the resulting delegation_tag per node name."""
    for node in ep.graph.nodes:
        node.meta.pop("delegation_tag", None)
    with capability_partitioner(impl):
        start = time.perf_counter()
        VulkanPartitioner().partition(ep)
        seconds = time.perf_counter() - start
    return seconds, {node.name: node.meta.get("delegation_tag") for node in ep.graph.nodes}


def compare_partitioners(sizes: list[int], runs: int, stock_runs_limit: int) -> None:
    print(f"{'blocks':>6} {'nodes':>6} {'parts':>5} {'stock s':>9} {'fast s':>8} {'speed-up':>9}  tags equal")
    for n in sizes:
        ep = to_edge(export_blocks(n)).exported_program()
        stock_runs = runs if n <= stock_runs_limit else 1
        # Interleaved, so that both see the same machine load.
        stock_times: list[float] = []
        fast_times: list[float] = []
        stock_tags: dict[str, str | None] = {}
        fast_tags: dict[str, str | None] = {}
        for run in range(max(runs, stock_runs)):
            if run < stock_runs:
                seconds, stock_tags = partition_once(ep, "stock")
                stock_times.append(seconds)
            if run < runs:
                seconds, fast_tags = partition_once(ep, "fast")
                fast_times.append(seconds)
        stock_s, fast_s = statistics.median(stock_times), statistics.median(fast_times)
        partitions = len({tag for name, tag in fast_tags.items() if tag is not None})
        verdict = "yes" if stock_tags == fast_tags else "NO"
        print(
            f"{n:6d} {len(fast_tags):6d} {partitions:5d} {stock_s:9.2f} {fast_s:8.3f} "
            f"{stock_s / fast_s:8.0f}x  {verdict}   (runs: stock {stock_runs}, fast {runs})",
            flush=True,
        )


def compare_pattern_cache(n: int) -> None:
    """Seconds of a full lowering to .pte of repro 4 at n blocks: upstream, + pattern cache, fast."""
    contexts: dict[str, Callable[[], AbstractContextManager[None]]] = {
        "upstream": nullcontext,
        "pattern cache": cached_pattern_graphs,
        "fast (all of lowering: fast)": fast_lowering,
    }
    torch.manual_seed(0)
    model = Blocks(n)  # one model, so every lowering sees the same weights
    first: bytes | None = None
    print(f"repro 4 at {n} blocks, to_edge_transform_and_lower + to_executorch (stock partitioner):")
    for label, context in contexts.items():
        ep = export_blocks(n, model)
        wall, cpu = time.perf_counter(), time.process_time()
        with context():
            buffer = to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner()]).to_executorch().buffer
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        first = buffer if first is None else first
        print(
            f"  {label:30s} {wall:7.1f} s wall {cpu:7.1f} s CPU  .pte {len(buffer)} bytes, "
            f"byte-identical to upstream: {'yes' if buffer == first else 'NO'}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--blocks", type=int, nargs="*", default=[50, 100, 200, 400])
    parser.add_argument("--runs", type=int, default=3, help="runs per implementation (median)")
    parser.add_argument(
        "--stock-runs-limit", type=int, default=100, help="above this many blocks, stock runs once"
    )
    parser.add_argument("--cache-blocks", type=int, default=20, help="pattern-cache lowering size; 0 skips")
    args = parser.parse_args()
    # vulkan_partitioner sets the root logger to INFO at import and logs every skipped node.
    logging.getLogger().setLevel(logging.WARNING)

    if args.blocks:
        with cached_pattern_graphs():
            # Warm the cache so that neither column pays for building the pattern graphs.
            VulkanPartitioner().partition(to_edge(export_blocks(1)).exported_program())
            compare_partitioners(args.blocks, args.runs, args.stock_runs_limit)
    if args.cache_blocks > 0:
        compare_pattern_cache(args.cache_blocks)


if __name__ == "__main__":
    main()
