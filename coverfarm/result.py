"""The result document of one cell (policy x backend x options): what every part of coverfarm consumes.

The CPU worker produces it (``coverfarm analyze --json`` prints it), the orchestrator stores it, the grid
and the tracker report render it. It imports no torch, so the orchestrator and device runners can read it.
Counts that were not measured (a stage that ran out of time or failed before reaching them) are ``None``,
never zero.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
# The line of an error message that holds a failed subprocess's own words (``worker.child.events``).
SUBPROCESS_WORDS = "its output: "
_COMMAND = re.compile(r"^Command '\['([^']+)'.*returned non-zero exit status (-?\d+)")


class StageStatus(StrEnum):
    """How a bounded stage ended."""

    OK = "ok"
    SLOW = "slow"  # ran out of its time bound; what it measured before is kept
    FAILED = "failed"  # raised (ExecuTorch, torch.export or the policy itself); the cause is stored
    NOT_RUN = "not_run"  # an earlier stage did not finish, so this one never started


def error_line(text: str | None) -> str | None:
    """The one line of an error text that says what went wrong (None for no text).

    Python writes a traceback with the exception it reports last, so a traceback gives its last line.
    Every other error text coverfarm stores or shows (an exception's message, a runner's or a baseline's
    error, a command's error line, a reason) starts with its summary and puts detail under it, so it
    gives its first line.
    """
    lines = (text or "").strip().splitlines()
    if not lines:
        return None
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


class ErrorInfo(BaseModel):
    """The cause of a failed or slow stage, as the row and the cell details show it."""

    stage: str
    type: str
    message: str
    traceback: str | None = None

    def one_line(self) -> str:
        """``type: the line that says what went wrong``. A failed subprocess (ExecuTorch's ``flatc``) says
        it in its own words, not in the command line Python reports: ``subprocess.CalledProcessError:
        flatc exited 1: error: ... cannot parse value starting with: -``."""
        lines = self.message.strip().splitlines()
        said = next(
            (line.removeprefix(SUBPROCESS_WORDS) for line in lines if line.startswith(SUBPROCESS_WORDS)), ""
        )
        command = _COMMAND.match(lines[0]) if lines and said else None
        if command:
            return f"{self.type}: {PurePosixPath(command[1]).name} exited {command[2]}: {said}"
        line = error_line(self.message)
        return f"{self.type}: {line}" if line else self.type


class Options(BaseModel):
    """Everything about how the cell was measured that could change its numbers."""

    model_config = ConfigDict(frozen=True)

    constant_prop: bool = True  # ExecuTorch's constant_prop_pass before partitioning (docs/design.md)
    lowering: Literal["stock", "fast"] = "fast"  # fast: exact same partitions, verified against stock
    timeout_s: float = Field(900.0, gt=0)
    seed: int = 0
    checkpoint: str | None = None
    frames: int = Field(16, ge=1, le=16)  # eager reference frames for the device's comparison
    # real: seeded (or checkpoint) weights; fake: FakeTensors, coverage only (no export, no references);
    # auto: fake when the estimated real-weight peak exceeds the worker's memory (``weights`` says why)
    weights: Literal["auto", "real", "fake"] = "auto"
    # Vulkan only: VulkanPartitioner({"force_fp16": True}) computes in fp16 on the device; the bundle's
    # device tolerance is then FP16_TOLERANCE (coverfarm.result) instead of the trace's fp32 one.
    force_fp16: bool = False
    # Write each program's ETRecord into the bundle (programs/<name>.etrecord), which reading a device
    # profile needs to name its ops. Off by default: it holds the aten, edge and ExecuTorch programs with
    # their weights, several times the .pte's bytes (docs/design.md, "Bundle").
    etrecord: bool = False
    # Graph rewrites the cell was lowered with (coverfarm.workarounds), in name order: each works around a
    # backend's finding and so changes what is measured. Empty: the stock lowering.
    workarounds: tuple[str, ...] = ()


# The device correctness tolerance of a force_fp16 bundle: np.allclose(device, eager fp32, rtol, atol).
# fp16's unit roundoff is 2^-11 (4.9e-4), and it compounds through a policy's layers: act lowered with
# force_fp16 and run on a Vulkan GPU (H200) gave max abs error 3.1e-3 against eager fp32 (SQNR
# 54.9 dB), which fp32's 1e-3 fails. 1e-2 passes that with three times its error to spare and still
# fails a wrong op by orders of magnitude (act's wrong Vulkan output was 1.69 off).
FP16_TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}


class StageResult(BaseModel):
    status: StageStatus
    seconds: float | None = None
    error: ErrorInfo | None = None


class Ops(BaseModel):
    total: int | None = None  # call_function nodes after to_edge (+ constant propagation), sans getitem
    on_backend: int | None = None  # of those, the ones the partitioner tagged
    supported: int | None = None  # of those, the ones the backend's per-node support check accepts


class HeavyMacs(BaseModel):
    """Multiply-adds of matmul, linear, convolution and attention nodes, weighted by runs per chunk."""

    total: int | None = None
    on_backend: int | None = None
    supported: int | None = None


class Programs(BaseModel):
    count: int | None = None  # delegate partitions over all programs; None when partitioning did not finish
    connected_groups: int | None = None  # weakly connected groups of supported nodes (not a bound)
    delegates: int | None = None  # executorch_call_delegate nodes after lowering (None if lowering not done)


class Repro(BaseModel):
    """A minimal standalone script for one blocker group, and what running it against the installed
    wheel showed. ``reproduced`` ("repro ready") only when it shows the group's own reason."""

    text: str
    output: str = ""
    reproduced: bool = False
    reason_seen: str | None = None  # the support check's reason in the repro; None when it accepted
    delegated: bool | None = None  # whether the repro's op ended up in a backend program
    error: str | None = None  # why it could not be run or judged (timeout, crash, no verdict)
    # Kept so that documents stored with it still validate; never set now. Whether a verdict came from the
    # repro cache says which process ran the script first, not what the wheel does, and a result must not
    # depend on that (a cold and a warm cache give the same document).
    cached: bool = False


class Blocker(BaseModel):
    """Nodes of one op left on the CPU for one reason, over all programs of the policy.

    The optional fields came later; documents stored without them still validate.
    """

    op: str
    reason: str
    count: int
    macs: int  # weighted by runs per chunk
    # A representative node: its op, and each argument's shape, dtype and kind, or its value.
    example: dict[str, Any] | None = None
    # Backend programs if this group alone were supported (the exact partitioner re-run over every
    # program the group is in); None when not computed (no capability partitioner, out of budget).
    programs_if_supported: int | None = None
    repro: Repro | None = None
    repro_note: str | None = None  # why there is no repro (op not expressible, over the group limit)

    @property
    def repro_ready(self) -> bool:
        return self.repro is not None and self.repro.reproduced


class ProgramResult(BaseModel):
    name: str
    runs_per_chunk: int
    ops: int | None = None
    ops_on_backend: int | None = None
    ops_supported: int | None = None
    macs: int | None = None  # one run, unweighted
    macs_on_backend: int | None = None
    macs_supported: int | None = None
    partitions: int | None = None
    connected_groups: int | None = None
    delegates: int | None = None
    pt2: str | None = None  # the traced program saved with torch.export.save
    pte: str | None = None  # the lowered program, inside the bundle


class Bundle(BaseModel):
    sha256: str
    path: str


class TraceInfo(BaseModel):
    seed: int
    checkpoint: str | None = None
    weights: Literal["random", "checkpoint"] = "random"
    cache_key: str | None = None
    substitutions: list[str] = Field(default_factory=list)  # static stand-ins for untraceable code
    frames: int = 0  # eager reference frames computed within the trace bound
    frames_wanted: int = 16
    # The policy stacks a history of observations: frame 0 (the test case) is its only reference frame.
    frame_history: bool = False


class WeightsInfo(BaseModel):
    """Which weights the cell was measured with, and why."""

    mode: Literal["real", "fake"]
    requested: Literal["auto", "real", "fake"]
    reason: str  # "asked for", or the estimate against the worker's memory that decided
    parameter_bytes: int | None = None  # parameters, buffers and constants of the traced programs
    estimated_peak_gb: float | None = None  # estimated peak memory of a stage with real weights
    worker_memory_gb: float | None = None  # the memory of the worker that decided
    needs_worker_gb: int | None = None  # the smallest worker, in whole GB, the real-weight stages fit


class ReusedFrom(BaseModel):
    """The stored result a cell took instead of lowering again (same reuse key: coverfarm.reuse)."""

    job_id: int
    sweep_id: int


class FakeWeightRun(BaseModel):
    """What an attempt with fake weights measured before a worker with enough memory measured the cell
    with real weights, kept in the real-weight result, and where the two disagree. Fake weights change no
    op, dtype or shape, so the coverage columns should agree: a difference is worth a look."""

    job_id: int
    attempt: int
    worker_memory_gb: float | None = None  # the memory of the worker that fell back to fake weights
    ops: Ops
    heavy_macs: HeavyMacs
    programs: Programs
    # "ops.total: 100 with fake weights, 101 with real"; empty when every count both measured agrees
    differences: list[str] = Field(default_factory=list)


class ResultDocument(BaseModel):
    schema_version: int = SCHEMA_VERSION
    policy: str
    backend: str
    options: Options = Field(default_factory=Options)
    trace: StageResult
    trace_info: TraceInfo | None = None
    partition: StageResult = Field(default_factory=lambda: StageResult(status=StageStatus.NOT_RUN))
    export: StageResult = Field(default_factory=lambda: StageResult(status=StageStatus.NOT_RUN))
    ops: Ops = Field(default_factory=Ops)
    heavy_macs: HeavyMacs = Field(default_factory=HeavyMacs)
    programs: Programs = Field(default_factory=Programs)
    blockers: list[Blocker] = Field(default_factory=list)
    program_list: list[ProgramResult] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    bundle: Bundle | None = None
    weights: WeightsInfo | None = None
    # Peak resident memory (MB) of each stage's child process by the end of that stage: trace,
    # reference, partition, export (a later phase of the same process includes the earlier ones).
    memory: dict[str, float] = Field(default_factory=dict)
    # Fast lowering's levers (worker.lower.fast.levers): each "active", or why it was left off and its
    # part of lowering ran stock (an upstream it was not written against). Empty when none applied.
    levers: dict[str, str] = Field(default_factory=dict)
    # Set when the cell reused a stored result with its reuse key: the job and sweep that measured it.
    reused_from: ReusedFrom | None = None
    # Set on a real-weight result whose cell was measured with fake weights first (on a worker without
    # the memory): what that run measured, and where the two disagree.
    fake_weight_run: FakeWeightRun | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def needs_bigger_worker(self) -> int | None:
        """The memory (whole GB) a real-weight run needs when ``weights: auto`` fell back to fake weights
        because the policy did not fit the worker, so export did not run; None otherwise (real weights,
        or fake ones asked for)."""
        weights = self.weights
        if weights is None or weights.mode != "fake" or weights.requested != "auto":
            return None
        if self.export.status is not StageStatus.NOT_RUN:
            return None
        return weights.needs_worker_gb

    def cause(self) -> str | None:
        """The one-line cause of the first stage that did not finish (the row's footnote)."""
        for stage in (self.trace, self.partition, self.export):
            if stage.error is not None:
                return f"{stage.error.stage}: {stage.error.one_line()}"
        return None

    @property
    def blockers_known(self) -> bool:
        """Whether ``blockers`` holds every node left on the CPU: the support check answered for every
        program (after partitioning, or from its answers alone: docs/metrics.md, "blockers")."""
        return self.ops.supported is not None

    @property
    def status(self) -> StageStatus:
        """The cell's overall state: the first stage that did not end ``ok``, else ``ok``."""
        for stage in (self.trace, self.partition, self.export):
            if stage.status is not StageStatus.OK:
                return StageStatus.SLOW if stage.status is StageStatus.SLOW else StageStatus.FAILED
        return StageStatus.OK


_COMPARED = (
    ("ops", ("total", "on_backend", "supported")),
    ("heavy_macs", ("total", "on_backend", "supported")),
    ("programs", ("count", "connected_groups")),
)


def fake_weight_run(fake: ResultDocument, real: ResultDocument, job_id: int, attempt: int) -> FakeWeightRun:
    """What the fake-weight attempt ``attempt`` of job ``job_id`` measured, checked against the real-weight
    result: each count both measured that differs."""
    differences = []
    for part, fields in _COMPARED:
        for name in fields:
            was, now = getattr(getattr(fake, part), name), getattr(getattr(real, part), name)
            if was is not None and now is not None and was != now:
                differences.append(f"{part}.{name}: {was} with fake weights, {now} with real")
    return FakeWeightRun(
        job_id=job_id,
        attempt=attempt,
        worker_memory_gb=fake.weights.worker_memory_gb if fake.weights is not None else None,
        ops=fake.ops,
        heavy_macs=fake.heavy_macs,
        programs=fake.programs,
        differences=differences,
    )
