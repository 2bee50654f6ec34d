"""Where a profiled chunk's time went: its ETDumps read by ``executorch.devtools.Inspector``.

Each program's ETDump is read with the bundle's ETRecord of that program (``programs/<name>.etrecord``),
which names the ATen op of each event (``op_types``) and the delegate's backend; without one the kernels'
own event names are used (``native_call_<kernel>``) and the bundle's backend names the delegate. Events
are summed over the profiled chunk's executions (those after the warm-up's, ``ProfileEtdump.warmup``):

- ``Method::execute``: a program's execution, end to end;
- ``DELEGATE_CALL``: a call into a delegate (the time per delegate);
- ``OPERATOR_CALL``: an op the runtime ran on its CPU kernels, a CPU-left op (its ``native_call_*``
  event sits inside it and is not counted again);
- events a delegate logs inside itself (``is_delegated_op``): the delegate's own ops, by its names
  (XNNPACK's ``Fully Connected (NC, F32) GEMM #1``; Vulkan's dispatches, each named by a JSON object, as
  their op and shader, ``delegated_op_name``), for the top ops only.

docs/metrics.md ("Profile figures") defines every figure. Run as
``python -m worker.profile.summarize --bundle DIR --profile IN.json --out OUT.json`` by the runner's
command in a child process of its own (the Inspector needs torch; the runner's process never loads it).
"""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import json
import sys
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coverfarm.backends import runtime_backends
from coverfarm.bundle_manifest import BundleError, Manifest, load_manifest
from coverfarm.profile import (
    CPU,
    ProfileDelegate,
    ProfileEtdump,
    ProfileOp,
    ProfileProgram,
    ProfileRun,
    ProfileSummary,
    share,
)

TOP_OPS = 10
EXECUTE, DELEGATE_CALL, OPERATOR_CALL, NATIVE_CALL = (
    "Method::execute",
    "DELEGATE_CALL",
    "OPERATOR_CALL",
    "native_call_",
)


@dataclass
class _Sums:
    execute_ms: float = 0.0
    delegate_ms: float = 0.0
    cpu_ops_ms: float = 0.0
    delegates: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0]))
    ops: dict[tuple[str, str], list[Any]] = field(default_factory=dict)

    def add_op(self, name: str, where: str, ms: float, calls: int, program: str) -> None:
        entry = self.ops.setdefault((name, where), [0.0, 0, set()])
        entry[0] += ms
        entry[1] += calls
        entry[2].add(program)


def _ms(event: Any, warmup: int) -> tuple[float, int]:
    """An event's milliseconds and occurrences in the profiled executions (after the warm-up's)."""
    raw = list(event.perf_data.raw)[warmup:] if event.perf_data is not None else []
    return float(sum(raw)), len(raw)


def delegated_op_name(event: str) -> str:
    """A delegate's own event by the op it runs: Vulkan names each dispatch by a JSON object (the op, its
    arguments, its shader, its dispatch's ids: one name per dispatch), read as ``aten.convolution.default
    (conv1d_float)`` so that a op's dispatches add up; any other name as it is."""
    if not event.startswith("{"):
        return event
    try:
        described = json.loads(event)
        op, kernel = described["operator"]["name"], described.get("kernel_name")
    except (ValueError, KeyError, TypeError):
        return event
    return f"{op} ({kernel})" if kernel else str(op)


def op_name(op_types: Sequence[str], kernel: str | None) -> str:
    """The op a CPU-left ``OPERATOR_CALL`` ran. The ETRecord gives every edge op of its debug handle, and
    the pieces of a decomposed op share one (softplus's ``exp``, ``log1p``, ``gt`` and ``where``), so the
    first of them may be another piece, even one a delegate took: the one whose name is the kernel's
    (``log1p.out`` runs ``aten.log1p.default``) is the op; without a match the first, without an
    ETRecord the kernel's own name."""
    if kernel:
        base = kernel.split(".", 1)[0]
        for op in op_types:
            parts = op.split(".")
            if len(parts) >= 2 and parts[-2] == base:
                return op
    if op_types:
        return op_types[0]
    return kernel or "unknown op"


def _read(etdump: Path, etrecord: Path | None) -> Any:
    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Output Buffer not found": no debug buffer is asked for
        return Inspector(etdump_path=str(etdump), etrecord=str(etrecord) if etrecord else None)


def summarize_program(
    inspector: Any, dump: ProfileEtdump, default_backend: str, sums: _Sums
) -> ProfileProgram:
    """Fold one program's events into ``sums``; its own figures."""
    mine = _Sums()
    for block in inspector.event_blocks:
        kernels = {
            e._instruction_id: e.name[len(NATIVE_CALL) :]
            for e in block.events
            if e.name.startswith(NATIVE_CALL)
        }
        for event in block.events:
            ms, calls = _ms(event, dump.warmup)
            if event.name == EXECUTE:
                mine.execute_ms += ms
            elif event.name == DELEGATE_CALL:
                backend = event.delegate_backend_name or default_backend
                mine.delegate_ms += ms
                sums.delegates[backend][0] += ms
                sums.delegates[backend][1] += calls
            elif event.name == OPERATOR_CALL and not event.is_delegated_op:
                mine.cpu_ops_ms += ms
                name = op_name(event.op_types or [], kernels.get(event._instruction_id))
                sums.add_op(name, CPU, ms, calls, dump.program)
            elif event.is_delegated_op:
                sums.add_op(
                    delegated_op_name(event.name),
                    event.delegate_backend_name or default_backend,
                    ms,
                    calls,
                    dump.program,
                )
    sums.execute_ms += mine.execute_ms
    sums.delegate_ms += mine.delegate_ms
    sums.cpu_ops_ms += mine.cpu_ops_ms
    return ProfileProgram(
        name=dump.program,
        executions=dump.executions,
        execute_ms=mine.execute_ms,
        delegate_ms=mine.delegate_ms,
        cpu_ops_ms=mine.cpu_ops_ms,
    )


def summarize(run: ProfileRun, bundle: Path, manifest: Manifest | None = None) -> ProfileSummary:
    """Where the time of ``run``'s chunk went, from its ETDumps and ``bundle``'s ETRecords."""
    manifest = manifest or load_manifest(bundle)
    specs = {p.name: p for p in manifest.programs}
    default_backend = runtime_backends().get(manifest.backend or "", manifest.backend or "delegate")
    sums = _Sums()
    programs = []
    all_records = True
    with tempfile.TemporaryDirectory(prefix="coverfarm-etdump.") as folder:
        for dump in run.etdumps:
            spec = specs.get(dump.program)
            if spec is None:
                raise BundleError(f"the profile has an ETDump of {dump.program}, which the bundle lacks")
            path = Path(folder) / f"{dump.program}.etdp"
            path.write_bytes(base64.b64decode(dump.etdump_b64))
            etrecord = bundle / spec.etrecord if spec.etrecord else None
            if etrecord is not None and not etrecord.is_file():
                raise BundleError(f"the bundle lacks {spec.etrecord}, which its manifest names")
            all_records = all_records and etrecord is not None
            inspector = _read(path, etrecord)
            programs.append(summarize_program(inspector, dump, default_backend, sums))
    chunk_ms = run.chunk_ms
    top = sorted(
        (
            ProfileOp(name=name, where=where, ms=ms, calls=calls, programs=sorted(names))
            for (name, where), (ms, calls, names) in sums.ops.items()
        ),
        key=lambda op: (-op.ms, op.name, op.where),
    )[:TOP_OPS]
    return ProfileSummary(
        chunk_ms=chunk_ms,
        execute_ms=sums.execute_ms,
        delegate_ms=sums.delegate_ms,
        delegates=[
            ProfileDelegate(backend=backend, ms=ms, calls=int(calls))
            for backend, (ms, calls) in sorted(sums.delegates.items())
        ],
        cpu_ops_ms=sums.cpu_ops_ms,
        runtime_ms=sums.execute_ms - sums.delegate_ms - sums.cpu_ops_ms,
        handover_ms=None if chunk_ms is None else chunk_ms - sums.execute_ms,
        cpu_share=share(sums.cpu_ops_ms, chunk_ms if chunk_ms is not None else sums.execute_ms),
        share_of="chunk" if chunk_ms is not None else "execute",
        top_ops=top,
        programs=programs,
        op_names_from="etrecord" if all_records else "etdump",
        inspector_version=_version(),
    )


def _version() -> str | None:
    try:
        return importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.profile.summarize")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--profile", type=Path, required=True, help="a profile run (JSON)")
    parser.add_argument("--out", type=Path, required=True, help="where the summary (JSON) goes")
    args = parser.parse_args(argv)
    run = ProfileRun.model_validate_json(args.profile.read_text())
    try:
        summary = summarize(run, args.bundle)
    except (BundleError, ValueError, RuntimeError) as error:
        print(f"the profile cannot be read: {error}", file=sys.stderr)
        return 2
    args.out.write_text(summary.model_dump_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
