"""Sweep and cell schemas: what clients send (create) and what they get back (public views)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from coverfarm.result import Options, ResultDocument
from coverfarm.routes import check_stack_name
from coverfarm.stacks import DEFAULT_STACK
from coverfarm.workarounds import unknown
from orchestrator.inputs import Flag, Name, Number, Text
from orchestrator.models import JobStatus

# A stack name (coverfarm.stacks) is part of its queues' names (coverfarm.routes), so it is held to
# their rule too.
# The stack rule says what a well-formed name is (its length included); Text refuses a NUL before it.
StackName = Annotated[Text, Field(strict=True), AfterValidator(check_stack_name)]


class SweepOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    constant_prop: Flag = True
    lowering: Literal["stock", "fast"] = "fast"
    # Recorded in each cell's options (not in the sweep's own columns): auto picks fake weights on a
    # worker whose memory the real-weight peak is estimated to exceed.
    weights: Literal["auto", "real", "fake"] = "auto"
    # VulkanPartitioner({"force_fp16": True}) for the sweep's Vulkan cells (recorded in their options;
    # the other backends' cells have no such option). Needs the vulkan backend in the sweep.
    force_fp16: bool = False
    # Each bundle carries its programs' ETRecords, which reading a device profile needs (recorded in
    # each cell's options).
    etrecord: bool = False
    # Graph rewrites (coverfarm.workarounds) for the cells of the backends each is for, recorded in their
    # options as changing what is measured; one no backend of the sweep takes is a 422.
    workarounds: list[Name] = Field(default_factory=list, max_length=20)

    @field_validator("workarounds")
    @classmethod
    def _known_once(cls, names: list[str]) -> list[str]:
        said = unknown(names)
        if said is not None:
            raise ValueError(said)
        for index, name in enumerate(names):
            if name in names[:index]:
                raise ValueError(f"{name!r} is listed twice")
        return sorted(names)


class SweepCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policies: list[Name] = Field(min_length=1, max_length=200)
    backends: list[Name] = Field(min_length=1, max_length=20)
    options: SweepOptions = Field(default_factory=SweepOptions)
    # Device classes to run each cell's bundle on (those of the cell's backend), e.g. cpu-x86_64-xnnpack.
    device_classes: list[Name] = Field(default_factory=list, max_length=20)
    # None: the farm's stage bound. The range is checked against the settings by the service.
    timeout_s: Number | None = None
    # Result reuse (coverfarm.reuse): fresh lowers every cell again even where a stored result has its
    # key; reuse_unfinished lets cells take stored slow and failed results too, not only ok ones;
    # reuse_device lets a reused cell take the device runs and baselines stored with its key too.
    fresh: Flag = False
    reuse_unfinished: Flag = False
    reuse_device: Flag = False
    # The stacks to measure, each cell once per stack; a stack no live worker serves waits for one.
    stacks: list[StackName] = Field(default_factory=lambda: [DEFAULT_STACK], min_length=1, max_length=20)

    @field_validator("policies", "backends", "device_classes", "stacks")
    @classmethod
    def _no_duplicates(cls, names: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in names:
            if not name.strip():
                raise ValueError("names must not be empty")
            if name in seen:
                raise ValueError(f"{name!r} is listed twice")
            seen.add(name)
        return names


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    stage: str
    queue: str
    status: JobStatus
    memory_gb: float | None = None  # a lower job's memory need, routing it to a memory class
    status_reason: str | None
    attempt: int
    worker: str | None
    error: str | None
    timeout_s: float
    created_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None


class ResultBrief(BaseModel):
    """A stored result's columns, without its document (GET /api/cells/{id} has it)."""

    model_config = ConfigDict(from_attributes=True)

    job_id: int
    attempt: int
    status: str
    export_status: str
    ops_total: int | None
    ops_on_backend: int | None
    macs_total: int | None
    macs_on_backend: int | None
    programs: int | None


class ResultPublic(ResultBrief):
    document: ResultDocument


class CellPublic(BaseModel):
    id: int
    sweep_id: int
    policy: str
    backend: str
    stack: str = DEFAULT_STACK  # the stack (coverfarm.stacks) the cell is measured with
    options: Options
    # The latest job's status, except "slow" while the slow result's longer re-run is pending.
    state: JobStatus
    pending: bool  # queued or running: the grid and report show ⏳
    # Why its queued lower job waits: no live worker of its stack ("waiting for a worker of stack
    # et-1.4.1"), or of its memory class ("waiting for a ≥ 64 GB worker of stack et-1.5.1").
    waiting: str | None = None
    result: ResultPublic | None
    jobs: list[JobPublic]


class SweepSummary(BaseModel):
    id: int
    created_at: datetime
    options: SweepOptions
    timeout_s: float
    policies: list[str]
    backends: list[str]
    stacks: list[str] = Field(default_factory=lambda: [DEFAULT_STACK])
    device_classes: list[str] = Field(default_factory=list)
    fresh: bool = False
    reuse_unfinished: bool = False
    reuse_device: bool = False
    state: Literal["running", "done", "cancelled"]
    counts: dict[str, int]  # cells per state
    cancelled_at: datetime | None


class SweepPublic(SweepSummary):
    cells: list[CellPublic]


class CellBrief(BaseModel):
    """A cell of a page (GET /api/sweeps/{id}/cells): its state and latest result's columns."""

    id: int
    policy: str
    backend: str
    stack: str = DEFAULT_STACK
    state: JobStatus
    pending: bool
    result: ResultBrief | None
    url: str  # the cell with its jobs and whole document


class CellPage(BaseModel):
    total: int  # cells matching the filters, in all
    offset: int
    limit: int
    cells: list[CellBrief]


class BackendColumn(BaseModel):
    """A backend's column of a sweep, over each cell's latest result."""

    backend: str
    cells: int
    measured: int  # cells with a stored result
    exported: int  # cells whose export is ok
    ops_on_backend: int | None  # summed over the measured cells that counted them
    ops_total: int | None
    macs_on_backend: int | None
    macs_total: int | None
    ops_share: float | None  # ops_on_backend / ops_total
    macs_share: float | None


class SweepOverview(SweepSummary):
    """A sweep's summary (GET /api/sweeps/{id}/summary): counts per state and per backend column,
    no cell and no document."""

    columns: list[BackendColumn]
