"""A device cell's profile: one chunk run once more with an event tracer on, and where its time goes.

A **profile run** (``ProfileRun``) is apart from the timed runs: a runner whose host declares a profiling
runtime (``COVERFARM_PROFILING_EXECUTOR_RUNNER``, ``gpu_runner/profiling.py``) runs the bundle's action
chunk once more with it, after its timed runs, and keeps the ETDump each program wrote. It travels with
the device result (``DeviceResult.profile``), marked ``kind: profile``; its milliseconds are taken with
the tracer on and are never a latency (the cell's latency is the timed runs' alone).

**Where the time goes** (``ProfileSummary``) is read from those ETDumps and the bundle's ETRecords by
``executorch.devtools.Inspector`` (``worker/profile/summarize.py``, which needs torch, so it runs in a
child process of its own, never in the runner's). docs/metrics.md defines each figure.

No torch here: the orchestrator, the report and the grid read these documents.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from coverfarm.result import Blocker

CPU = "cpu"  # ``ProfileOp.where`` of an op the runtime ran on its CPU kernels (not delegated)


class ProfileEtdump(BaseModel):
    """The ETDump one program's process wrote during the profiled chunk (its bytes, base64)."""

    program: str
    executions: int  # executions of the program in the profiled chunk
    warmup: int = 0  # executions before them (a warm-up chunk), which the figures leave out
    bytes: int
    sha256: str
    etdump_b64: str


class ProfileDelegate(BaseModel):
    backend: str  # the runtime's name of the delegate (``XnnpackBackend``, ``VulkanBackend``)
    ms: float  # its DELEGATE_CALL events, summed
    calls: int


class ProfileOp(BaseModel):
    """One op by the time the profiled chunk spent in it, summed over its events."""

    # the ATen op of a CPU-left op (``aten.cumsum.default``); the backend's event name inside a delegate
    name: str
    where: str  # ``cpu`` or the delegate's backend
    ms: float
    calls: int
    programs: list[str]


class ProfileProgram(BaseModel):
    name: str
    executions: int
    execute_ms: float  # its Method::execute events, summed
    delegate_ms: float
    cpu_ops_ms: float


class ProfileSummary(BaseModel):
    """Where the profiled chunk's time went (docs/metrics.md, "Profile figures")."""

    chunk_ms: float | None  # the chunk's wall clock in the profile run; None where not measured
    execute_ms: float
    delegate_ms: float
    delegates: list[ProfileDelegate]
    cpu_ops_ms: float
    runtime_ms: float  # execute − delegates − CPU ops: the runtime between its instructions
    handover_ms: float | None  # chunk − execute: between the programs' executions
    cpu_share: float | None  # cpu_ops_ms over chunk_ms (or execute_ms, ``share_of``)
    share_of: Literal["chunk", "execute"]
    top_ops: list[ProfileOp]
    programs: list[ProfileProgram]
    op_names_from: Literal["etrecord", "etdump"]  # ETRecord op types, or the kernels' own event names
    inspector_version: str | None = None  # the executorch whose Inspector read it


class ProfileRun(BaseModel):
    kind: Literal["profile"] = "profile"
    status: Literal["ok", "failed"]
    error: str | None = None
    runtime: str  # which profiling runtime, in words
    stand_in: bool = False  # the wheel's pybindings standing in for a profiling executor_runner
    chunk_ms: float | None = None  # wall clock of the profiled chunk (tracer on): never a latency
    handover_note: str | None = None  # why the hand-over is not measured, where it is not
    etdumps: list[ProfileEtdump] = Field(default_factory=list)
    summary: ProfileSummary | None = None
    summary_note: str | None = None  # why there is no summary


def blockers_of(op: ProfileOp, blockers: list[Blocker]) -> list[Blocker]:
    """The blocker groups (op, reason) of a CPU-left op: those of its ATen op; none for a delegated op."""
    if op.where != CPU:
        return []
    return [b for b in blockers if b.op == op.name]


def share(part: float, whole: float | None) -> float | None:
    return None if not whole else part / whole
