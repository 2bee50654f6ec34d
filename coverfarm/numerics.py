"""A device cell's numerics run: which op makes its output depart from eager, and how the error grows.

A **numerics run** (``NumericsRun``) is apart from the timed runs, as a profile run is: a runner whose
host declares a profiling runtime (``COVERFARM_PROFILING_EXECUTOR_RUNNER``, ``gpu_runner/numerics.py``)
runs each program of the bundle once more on its test case's inputs with the event tracer's
intermediate-output capture on (an ETDump with a debug buffer), when the timed run's output was wrong
(outside the bundle's tolerance) or when it is asked for (``run-bundle --numerics always``). It travels
with the device result (``DeviceResult.numerics``), marked ``kind: numerics``; it is never a latency.

**Which op goes wrong** (``NumericsSummary``) is read from those ETDumps and the bundle's ETRecords by
``executorch.devtools.Inspector`` (``worker/profile/numerics.py``: the eager intermediates of the
ETRecord's graph on the same inputs, matched to the runtime's by debug handle): every compared output in
graph order with its error (the growth), and the first whose error is beyond the tolerance. What the
runtime logs decides the grain: an op the runtime ran on its CPU kernels logs its own output; a delegate
call logs its outputs only, so the ops inside it are compared together (``span``), as the output of the
last of them. docs/metrics.md ("Numerics figures") defines each figure.

No torch here: the orchestrator, the report and the grid read these documents.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

CPU = "cpu"  # ``NumericsOp.where`` of an op the runtime ran on its CPU kernels (not delegated)

# Why a numerics run was made: the timed run's output was outside its tolerance, or it was asked for.
Trigger = Literal["wrong_output", "requested"]

# What the wheel's runtime captures, in words (checked by tests/gpu_runner/test_numerics.py).
WHEEL_GRAIN = (
    "per op for ops on the runtime's CPU (portable) kernels; one output per delegate call, "
    "none from inside a delegate"
)


class NumericsDump(BaseModel):
    """One program's ETDump and debug buffer (the intermediate outputs the ETDump points into).

    The debug buffer is kept without its unused tail (``debug_bytes`` is its full length, restored
    with zeros when read); either is left out (``kept`` false) past the runner's cap on what a result
    carries, and only its size and sha256 stay."""

    program: str
    bytes: int
    sha256: str
    debug_bytes: int
    debug_sha256: str
    kept: bool = True
    etdump_b64: str | None = None
    debug_b64: str | None = None


class NumericsOp(BaseModel):
    """One output the runtime logged, compared with eager's on the same inputs."""

    program: str
    op: str  # the ATen op whose output is compared (of a span, its last node's)
    node: str  # that node's name in the ETRecord's graph
    span: int = 1  # graph nodes compared together (a delegate call's ops); 1 for a CPU-kernel op
    first_node: str | None = None  # the span's first node, where span > 1
    where: str  # ``cpu`` or the delegate's backend
    max_abs_error: float
    bound: float  # atol + rtol × max |eager|: the error this output may have
    departs: bool  # some element is outside the tolerance (np.allclose(runtime, eager) fails)
    # A delegate call's departure judged where it shows (paired by debug handle, when the Inspector's
    # pairing fails): the CPU op reading ``node``, whose error ``max_abs_error`` is; None: its own output.
    seen_at: str | None = None
    # The span's nodes as plain JSON (worker/lower/metrics/example.py), on the first departing op only:
    # what its one-op repro (``python -m worker.repros.numerics``) is built from.
    examples: list[dict[str, Any]] = Field(default_factory=list)


class NumericsSummary(BaseModel):
    """Which op's output first departs from eager, and the error of every compared output."""

    atol: float
    rtol: float
    ops: list[NumericsOp]  # programs in the plan's order, each in graph order (debug handles)
    first: NumericsOp | None  # the first that departs; None: none does
    largest: NumericsOp | None  # the largest error
    # outputs the runtime logged that the Inspector paired with an eager output of another shape: not
    # judged (a delegate call's logged tensors that are none of its graph's outputs, say)
    uncompared: int = 0
    grain: str  # what the runtime logged, in words
    reference_graph: str  # the ETRecord's graph eager ran: ATen ``exported_program`` or the edge one
    inspector_version: str | None = None
    # How logged outputs were paired with eager's: None, the Inspector's own pairing; else in words, with
    # why (worker/profile/numerics_handles.py)
    pairing: str | None = None


class NumericsRun(BaseModel):
    kind: Literal["numerics"] = "numerics"
    status: Literal["ok", "failed"]
    trigger: Trigger
    error: str | None = None
    runtime: str  # which runtime captured the intermediates, in words
    stand_in: bool = False  # the wheel's pybindings standing in for a device's runtime
    dumps: list[NumericsDump] = Field(default_factory=list)
    summary: NumericsSummary | None = None
    summary_note: str | None = None  # why there is no summary


def growth(summary: NumericsSummary, limit: int = 12) -> list[NumericsOp]:
    """A compact view of how the error grows: each output whose error is larger than every one before
    it in graph order (programs apart), at most ``limit`` of them, the first departing op among them."""
    steps: list[NumericsOp] = []
    peak: dict[str, float] = {}
    for op in summary.ops:
        if op.max_abs_error > peak.get(op.program, 0.0):
            peak[op.program] = op.max_abs_error
            steps.append(op)
    if len(steps) <= limit:
        return steps
    keep = {id(summary.first)} if summary.first is not None else set()
    head = [s for s in steps if id(s) in keep]
    rest = [s for s in steps if id(s) not in keep]
    chosen = {id(s) for s in head + rest[-(limit - len(head)) :]}
    return [s for s in steps if id(s) in chosen]


def op_words(op: NumericsOp) -> str:
    """``aten.mul.Tensor`` (node ``mul``), or a delegate call's span by its first and last nodes."""
    seen = f", seen at {op.seen_at}, which reads it" if op.seen_at else ""
    if op.span > 1:
        return f"{op.op} ({op.span} ops {op.first_node} … {op.node} in one {op.where} call{seen})"
    return f"{op.op} ({op.node}{seen})"
