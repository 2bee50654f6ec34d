"""The lower stage's child process: to_edge, partition and export each traced program of a policy.

Run as ``python -m worker.lower.stage``; ``worker.engine`` starts it under per-phase time bounds. Each
program goes through ``to_edge_transform_and_lower(...).to_executorch()`` with the backend's partitioner
and its default options, exactly as lerobot-export lowers, with ExecuTorch's constant propagation as the
transform pass when the cell's options ask for it (the default), followed by the graph rewrites of the
cell's workarounds (``worker/lower/workarounds.py``), if it names any. The phase clock is "partition" from the
start of each program's ``to_edge`` until its partitioner returns, then "export" until its ``.pte`` is
written. Everything it measures goes to the event log as soon as it is known.

With ``--etrecord`` (the cell's ``etrecord`` option) it writes ``<name>.etrecord`` beside each
``<name>.pte``: ExecuTorch's ETRecord of that lowering (the exported, edge and ExecuTorch programs and
their debug handles, from ``to_edge_transform_and_lower``'s own ``generate_etrecord``), which
``executorch.devtools.Inspector`` joins with a device's ETDump to name the ops of a profile's events
(``worker/profile/``).

A program traced with fake weights (its saved weights are meta tensors, ``worker.fake_programs``) is
partitioned the same way and stops there: lowering into a delegate serializes constant values, which
do not exist. It logs ``not_exported`` instead of ``exported``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.backend.partitioner import PartitionResult
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from executorch.exir.pass_manager import ExportedProgramPassManager
from executorch.exir.passes.constant_prop_pass import constant_prop_pass
from torch.export import ExportedProgram

from worker.child.events import EventLog, error_fields
from worker.fake_programs import forget_fake_constants, from_meta, has_meta_weights
from worker.lower.backends import Backend, get_backend
from worker.lower.metrics.graph import delegate_calls
from worker.lower.observe import Observer, ObservingPartitioner
from worker.lower.workarounds import REWRITES, rewrites


class ConstantPropagation(ExportedProgramPassBase):
    """ExecuTorch's ``constant_prop_pass`` as a transform pass of ``to_edge_transform_and_lower``."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        return ExportedProgramPassResult(forget_fake_constants(constant_prop_pass(exported_program)), True)


class PartitionedWithFakeWeights(Exception):
    """Raised right after partitioning a fake-weight program: everything measurable is measured."""


class PartitionOnly(ObservingPartitioner):
    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        super().partition(exported_program)
        raise PartitionedWithFakeWeights


@contextlib.contextmanager
def lowering_context(backend: Backend, lowering: str, observer: Observer) -> Iterator[None]:
    """Route the backend partitioner's CapabilityBasedPartitioner (Vulkan's, OpenVINO's) through the
    chosen implementation (stock or exact-fast) and let the observer see the support check it builds."""
    if backend.capability_module is None:
        yield
        return
    from worker.lower.fast.levers import partitioner_impl
    from worker.lower.fast.partitioner_impl import capability_partitioner

    impl = partitioner_impl(lowering)
    with capability_partitioner(impl, on_support=observer.on_support, module=backend.capability_module):  # type: ignore[arg-type]
        yield


def pattern_graph_cache(backend: Backend, lowering: str) -> contextlib.AbstractContextManager[None]:
    """With fast lowering, Vulkan's pattern graphs are built once per process instead of once per
    partition, and each partitioned program is recompiled once instead of once per partition
    (``worker.lower.fast.switch``), each lever only while it is active; the lowered program is
    byte-identical."""
    if lowering != "fast" or not backend.fast_levers:
        return contextlib.nullcontext()
    from worker.lower.fast.switch import fast_lowering

    return fast_lowering()


def lower_program(
    log: EventLog,
    name: str,
    pt2: Path,
    backend: Backend,
    constant_prop: bool,
    lowering: str,
    out_dir: Path,
    force_fp16: bool = False,
    etrecord: bool = False,
    workarounds: tuple[str, ...] = (),
) -> None:
    log.emit("phase", phase="partition", program=name)
    ep = torch.export.load(pt2)
    fake = has_meta_weights(ep)
    if fake:
        from_meta(ep)
    partitioner = backend.make_partitioner(force_fp16=True) if force_fp16 else backend.make_partitioner()
    observer = Observer(log, name, backend, partitioner)
    chosen = [*([ConstantPropagation()] if constant_prop else []), *rewrites(workarounds)]
    passes = ExportedProgramPassManager(chosen) if chosen else None
    wrapper = (PartitionOnly if fake else ObservingPartitioner)(partitioner, observer)
    try:
        with lowering_context(backend, lowering, observer):
            edge = to_edge_transform_and_lower(
                ep, transform_passes=passes, partitioner=[wrapper], generate_etrecord=etrecord
            )
    except PartitionedWithFakeWeights:
        log.emit("not_exported", program=name, reason="fake weights")
        return
    log.emit("lowered", program=name, delegates=delegate_calls(edge.exported_program().graph))
    pte, record = write_program(edge, out_dir, name, etrecord)
    log.emit(
        "exported", program=name, pte=str(pte), bytes=pte.stat().st_size, etrecord=record and str(record)
    )


def write_program(
    edge: EdgeProgramManager, out_dir: Path, name: str, etrecord: bool = False
) -> tuple[Path, Path | None]:
    """``edge`` serialized as ``<name>.pte``; with ``etrecord`` (``edge`` lowered with
    ``generate_etrecord=True``) its ETRecord beside it as ``<name>.etrecord``."""
    program = edge.to_executorch()
    pte = out_dir / f"{name}.pte"
    pte.write_bytes(program.buffer)
    if not etrecord:
        return pte, None
    record = out_dir / f"{name}.etrecord"
    program.get_etrecord().save(str(record))
    return pte, record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.lower.stage")
    parser.add_argument("--trace-dir", type=Path, required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--constant-prop", choices=["on", "off"], default="on")
    parser.add_argument("--lowering", choices=["stock", "fast"], default="stock")
    parser.add_argument("--force-fp16", action="store_true", help="VulkanPartitioner's force_fp16")
    parser.add_argument("--etrecord", action="store_true", help="write each program's ETRecord beside it")
    parser.add_argument(
        "--workaround", dest="workarounds", action="append", default=[], choices=sorted(REWRITES),
        help="a graph rewrite before partitioning (coverfarm.workarounds); repeatable",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--events", type=Path, required=True)
    args = parser.parse_args(argv)

    log = EventLog(args.events)
    backend = get_backend(args.backend)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((args.trace_dir / "trace.json").read_text())
    if args.lowering == "fast" and backend.fast_levers:
        from worker.lower.fast.levers import lever_states

        log.emit("levers", states=lever_states())
    failed = False
    with pattern_graph_cache(backend, args.lowering):
        failed = lower_all(
            log, manifest, args.trace_dir, backend, args.constant_prop == "on", args.lowering, args.out,
            force_fp16=args.force_fp16, etrecord=args.etrecord, workarounds=tuple(args.workarounds),
        )  # fmt: skip
    log.emit("done", failed=failed)
    log.close()
    return 1 if failed else 0


def lower_all(
    log: EventLog,
    manifest: dict[str, Any],
    trace_dir: Path,
    backend: Backend,
    constant_prop: bool,
    lowering: str,
    out: Path,
    force_fp16: bool = False,
    etrecord: bool = False,
    workarounds: tuple[str, ...] = (),
) -> bool:
    """Lower every program; an error is recorded and the next program still runs. True if any failed."""
    failed = False
    for program in manifest["programs"]:
        name = program["name"]
        try:
            lower_program(
                log, name, trace_dir / program["pt2"], backend, constant_prop, lowering, out, force_fp16,
                etrecord, workarounds,
            )  # fmt: skip
        except Exception as error:  # ExecuTorch's own failures are findings: record them with their cause
            failed = True
            log.emit("error", program=name, **error_fields(error))
    return failed


if __name__ == "__main__":
    sys.exit(main())
