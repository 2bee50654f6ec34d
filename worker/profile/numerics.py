"""Which op goes wrong: a numerics run's intermediate outputs compared with eager's, op by op.

Each program's ETDump and debug buffer are read by ``executorch.devtools.Inspector`` with the program's
ETRecord (``programs/<name>.etrecord``), given the test case's inputs of that program as its
representative inputs (the runtime ran the same ones): ``Inspector.calculate_numeric_gap`` runs eager on
the ETRecord's graph (the ATen ``exported_program`` where the debug handles map back to it, else the edge
one), captures every node's output and pairs each output the runtime logged with eager's by debug
handle (``map_runtime_aot_intermediate_outputs``). A delegate call logs its outputs only, so its ops are
one span, compared as its last op's output.

Each pair is judged as the device run's outputs are: ``np.allclose(runtime, eager, rtol, atol)`` with
the bundle's tolerance; its error is the max abs difference. The first pair in graph order that fails is
the op that goes wrong (programs in the plan's order); the list of every pair's error is how it grows.
The first departing op's nodes are described as plain JSON (``worker/lower/metrics/example.py``), what
its one-op repro is built from (``worker/repros/numerics.py``).

Run as ``python -m worker.profile.numerics --bundle DIR --numerics IN.json --out OUT.json`` by the
runner's command, in a child process of its own (the Inspector and eager need torch).
"""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import logging
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from coverfarm import backends
from coverfarm.bundle_manifest import BundleError, Manifest, load_manifest
from coverfarm.numerics import CPU, WHEEL_GRAIN, NumericsDump, NumericsOp, NumericsRun, NumericsSummary
from worker.profile.numerics_handles import PAIRING, pair_by_handle
from worker.profile.numerics_judge import judge, pair_outputs

DELEGATE_CALL = "DELEGATE_CALL"
MAX_EXAMPLES = 16  # nodes of a span described for its repro
REFERENCE_GRAPHS = ("exported_program", "edge_dialect_exported_program")


def _program_order(manifest: Manifest) -> list[str]:
    order = list(dict.fromkeys(call.program for call in manifest.plan.calls))
    return order + [p.name for p in manifest.programs if p.name not in order]


def _files(dump: NumericsDump, folder: Path, captures: Path | None) -> tuple[Path, Path]:
    """The program's ETDump and debug buffer: the capture's own files, or written from the run's copy."""
    if captures is not None:
        etdump, debug = captures / f"{dump.program}.etdp", captures / f"{dump.program}.debug"
        if etdump.is_file() and debug.is_file():
            return etdump, debug
    if dump.etdump_b64 is None or dump.debug_b64 is None:
        raise BundleError(f"the numerics run of {dump.program} did not keep its ETDump and debug buffer")
    etdump, debug = folder / f"{dump.program}.etdp", folder / f"{dump.program}.debug"
    etdump.write_bytes(base64.b64decode(dump.etdump_b64))
    debug.write_bytes(base64.b64decode(dump.debug_b64).ljust(dump.debug_bytes, b"\0"))
    return etdump, debug


class PairingFailed(Exception):
    """The Inspector raised while pairing the runtime's logged outputs with eager's."""


def _inspector(
    dump: NumericsDump, etrecord_path: Path, inputs: list[Any], folder: Path, captures: Path | None
) -> tuple[Any, Any]:
    """(the Inspector over one program's capture, its parsed ETRecord)."""
    from executorch.devtools import Inspector
    from executorch.devtools.etrecord import parse_etrecord

    etdump, debug = _files(dump, folder, captures)
    record = parse_etrecord(str(etrecord_path))
    record.update_representative_inputs([tuple(inputs)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inspector = Inspector(etdump_path=str(etdump), etrecord=record, debug_buffer_path=str(debug))
    return inspector, record


def _read(inspector: Any, record: Any, program: str) -> tuple[Any, Any, str]:
    """(the gap's rows, the reference ExportedProgram, its name) of one program; PairingFailed, with
    the Inspector's words, where its pairing raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in REFERENCE_GRAPHS:
            try:
                rows = inspector.calculate_numeric_gap(_comparator(), reference_graph=name)
            except ValueError:
                continue  # debug handles do not map back to the ATen graph: the edge graph is eager
            except (IndexError, TypeError, KeyError) as error:
                raise PairingFailed(f"{type(error).__name__}: {error}") from None
            ep = record.exported_program if name == REFERENCE_GRAPHS[0] else record.edge_dialect_program
            return rows, ep, name
    raise BundleError(f"the ETRecord of {program} gives eager no graph to run")


def _comparator() -> Any:
    """The Inspector's gap as the max abs difference, NaN where the two outputs' shapes differ (its
    own comparators raise there, which would stop the whole comparison at one odd pair): the figures
    this module keeps are its own (``judge``), from the pairs ``pair_outputs`` makes."""
    from executorch.devtools.inspector.numerical_comparator import NumericalComparatorBase

    class MaxAbs(NumericalComparatorBase):
        def element_compare(self, a: Any, b: Any) -> float:
            try:
                return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
            except (RuntimeError, AttributeError, TypeError):
                return float("nan")

    return MaxAbs()


def _nodes(ep: Any) -> dict[str, Any]:
    return {node.name: node for node in ep.graph.nodes}


Pairing = Literal["inspector", "handles"]


def compare_program(
    dump: NumericsDump,
    etrecord: Path,
    inputs: list[Any],
    manifest: Manifest,
    folder: Path,
    captures: Path | None = None,
    pairing: Pairing = "inspector",
) -> tuple[list[tuple[NumericsOp, list[str]]], Any, str, int, str | None]:
    """Every output the runtime logged for one program, in graph order, judged, with the names of the
    nodes it stands for; the reference graph and its name; how many logged outputs matched no eager
    output's shape; why the pairing by debug handle was used (None: the Inspector's was). ``pairing``
    "handles" uses it whatever the Inspector would do."""
    inspector, record = _inspector(dump, etrecord, inputs, folder, captures)
    backend = backends.runtime_backends().get(manifest.backend or "", manifest.backend or "delegate")
    atol, rtol = manifest.tolerance.atol, manifest.tolerance.rtol
    why = "asked for" if pairing == "handles" else None
    if why is None:
        try:
            rows, ep, graph_name = _read(inspector, record, dump.program)
        except PairingFailed as error:
            why = str(error)
        else:
            found, skipped = _judged_rows(rows, ep, dump.program, backend, atol, rtol)
            return found, ep, graph_name, skipped, None
    edge = record.edge_dialect_program
    found = pair_by_handle(inspector, edge, inputs, dump.program, backend, atol, rtol)
    return found, edge, REFERENCE_GRAPHS[1], 0, why


def _judged_rows(
    rows: Any, ep: Any, program: str, backend: str, atol: float, rtol: float
) -> tuple[list[tuple[NumericsOp, list[str]]], int]:
    """The Inspector's rows as judged ops, spans in graph order; how many it paired with no shape."""
    from worker.lower.metrics.graph import op_name

    nodes = _nodes(ep)
    found = []
    skipped: list[str] = []
    spans: dict[tuple[int, ...], list[Any]] = {}
    for _, found_row in rows.iterrows():
        spans.setdefault(tuple(found_row["aot_debug_handle"]), []).append(found_row)
    for handles in sorted(spans, key=min):
        row = spans[handles][0]
        names = [str(n) for n in row["aot_ops"]]
        runtime = [r["runtime_intermediate_output"] for r in spans[handles]]
        pairs = pair_outputs(row["aot_intermediate_output"], runtime)
        if not names or not pairs:
            skipped.append(names[-1] if names else "?")
            continue
        error, bound, departs = judge(pairs, atol, rtol)
        last = nodes.get(names[-1])
        delegated = DELEGATE_CALL in [str(op) for op in row["runtime_ops"]]
        found.append((
            NumericsOp(
                program=program,
                op=op_name(last) if last is not None else names[-1],
                node=names[-1],
                span=len(names),
                first_node=names[0] if len(names) > 1 else None,
                where=backend if delegated else CPU,
                max_abs_error=error,
                bound=bound,
                departs=departs,
            ),
            names,
        ))  # fmt: skip
    return found, len(skipped)


def describe_span(ep: Any, names: list[str]) -> list[dict[str, Any]]:
    """The span's nodes as plain JSON, for the one-op repro."""
    from worker.lower.metrics.example import describe

    nodes = _nodes(ep)
    return [describe(nodes[name], ep) for name in names[:MAX_EXAMPLES] if name in nodes]


def compare(
    run: NumericsRun,
    bundle: Path,
    manifest: Manifest | None = None,
    captures: Path | None = None,
    pairing: Pairing = "inspector",
) -> NumericsSummary:
    """Which op of ``run``'s programs goes wrong first, and every compared output's error; the capture's
    files are read from ``captures`` where given, else from the run's copies. A program whose logged
    outputs the Inspector cannot pair is paired by debug handle (``numerics_handles``), as every program
    is with ``pairing`` "handles"."""
    from coverfarm.bundle_manifest import read_npz, take_array

    manifest = manifest or load_manifest(bundle)
    specs = {p.name: p for p in manifest.programs}
    dumps = {d.program: d for d in run.dumps}
    testcase = read_npz(bundle, "testcase.npz")
    import torch

    compared: list[tuple[NumericsOp, list[str]]] = []
    uncompared = 0
    graphs: dict[str, Any] = {}
    names_used = set()
    fell_back: list[str] = []
    with tempfile.TemporaryDirectory(prefix="coverfarm-numerics.") as work:
        for program in _program_order(manifest):
            spec, dump = specs[program], dumps.get(program)
            if dump is None:
                raise BundleError(f"the numerics run has no capture of {program}")
            if spec.etrecord is None:
                raise BundleError(
                    f"the bundle has no ETRecord of {program} (the cell's etrecord option): eager's "
                    "intermediate outputs are computed from it"
                )
            etrecord = bundle / spec.etrecord
            if not etrecord.is_file():
                raise BundleError(f"the bundle lacks {spec.etrecord}, which its manifest names")
            inputs = [
                torch.from_numpy(np.array(take_array(testcase, f"{program}/in/{i}", "testcase.npz")))
                for i in range(len(spec.inputs))
            ]
            found, ep, graph_name, odd, why = compare_program(
                dump, etrecord, inputs, manifest, Path(work), captures, pairing
            )
            if why is not None:
                fell_back.append(f"{program} ({why})")
            uncompared += odd
            compared += found
            graphs[program] = ep
            names_used.add(graph_name)
    ops = [op for op, _ in compared]
    at = next((i for i, op in enumerate(ops) if op.departs), None)
    first = None
    if at is not None:
        op, names = compared[at]
        first = op.model_copy(update={"examples": describe_span(graphs[op.program], names)})
        ops[at] = first
    largest = max(ops, key=lambda op: op.max_abs_error, default=None)
    return NumericsSummary(
        atol=manifest.tolerance.atol,
        rtol=manifest.tolerance.rtol,
        ops=ops,
        first=first,
        largest=largest,
        uncompared=uncompared,
        grain=WHEEL_GRAIN if run.stand_in else "as the runtime's event tracer logs them",
        reference_graph=" and ".join(sorted(names_used)) or REFERENCE_GRAPHS[0],
        inspector_version=_version(),
        pairing=f"{PAIRING}, for {', '.join(fell_back)}" if fell_back else None,
    )


def _version() -> str | None:
    try:
        return importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.profile.numerics")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--numerics", type=Path, required=True, help="a numerics run (JSON)")
    parser.add_argument("--out", type=Path, required=True, help="where the summary (JSON) goes")
    parser.add_argument("--captures", type=Path, help="the capture's ETDumps and debug buffers")
    args = parser.parse_args(argv)
    logging.getLogger("executorch").setLevel(logging.ERROR)
    run = NumericsRun.model_validate_json(args.numerics.read_text())
    try:
        summary = compare(run, args.bundle, captures=args.captures)
    except (BundleError, ValueError, RuntimeError, KeyError) as error:
        print(f"the numerics run cannot be compared: {error}", file=sys.stderr)
        return 2
    args.out.write_text(summary.model_dump_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
