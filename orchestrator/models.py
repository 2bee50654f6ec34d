"""The farm's tables. Alembic owns the schema (migrations/); these classes only map it.

Statuses are assigned in one place, ``orchestrator.jobs.transitions``; nothing else writes them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column, relationship

from coverfarm.stacks import DEFAULT_STACK
from orchestrator.column_types import ERROR, REASON, BigId, JSONType, UTCDateTime


class Base(DeclarativeBase):
    # Named constraints, so that later migrations can drop them on SQLite (batch mode) and Postgres alike.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


def utcnow() -> datetime:
    return datetime.now(UTC)


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    SLOW = "slow"
    FAILED = "failed"
    CANCELLED = "cancelled"


PENDING_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)

JobStatusType = Enum(
    JobStatus,
    name="job_status",
    native_enum=False,
    create_constraint=True,
    length=16,
    values_callable=lambda members: [member.value for member in members],
)

# A cell's state is a job status too, written only by jobs.cell_state.refresh_cell: no CHECK of its own.
CellStateType = Enum(
    JobStatus,
    native_enum=False,
    create_constraint=False,
    length=16,
    values_callable=lambda members: [member.value for member in members],
)


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    constant_prop: Mapped[bool]
    lowering: Mapped[str] = mapped_column(String(16))
    timeout_s: Mapped[float] = mapped_column(Float)
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Device classes each cell with a bundle runs on (those of the cell's backend), e.g. cpu-x86_64-xnnpack.
    device_classes: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # Result reuse (coverfarm.reuse): fresh runs every cell even where a stored result has its key;
    # reuse_unfinished lets a cell take a stored slow or failed result too, not only an ok one.
    fresh: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    reuse_unfinished: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # reuse_device: a reused cell takes the stored device runs and baselines of its reuse key too,
    # instead of running its bundle again (a device's number belongs to its run unless asked).
    reuse_device: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The stacks (coverfarm.stacks) the sweep measures, in the order it names them; each cell is of one.
    stacks: Mapped[list[str]] = mapped_column(
        JSONType, default=lambda: [DEFAULT_STACK], server_default=text(f"'[\"{DEFAULT_STACK}\"]'")
    )

    # What the sweep was made of, in its cells' order, and the options its cells record (the Vulkan cells'
    # force_fp16, every cell's etrecord, the workarounds): read by a big sweep's summary without reading a
    # cell.
    policies: Mapped[list[str]] = mapped_column(JSONType, default=list, server_default=text("'[]'"))
    backends: Mapped[list[str]] = mapped_column(JSONType, default=list, server_default=text("'[]'"))
    weights: Mapped[str] = mapped_column(String(8), default="auto", server_default="auto")
    force_fp16: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    etrecord: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The workarounds asked (coverfarm.workarounds); each cell records those of its backend.
    workarounds: Mapped[list[str]] = mapped_column(JSONType, default=list, server_default=text("'[]'"))

    cells: Mapped[list[Cell]] = relationship(back_populates="sweep", order_by="Cell.id")


class Cell(Base):
    __tablename__ = "cells"
    __table_args__ = (
        UniqueConstraint("sweep_id", "policy", "backend", "stack"),
        # A sweep's cells counted per backend and state, and their latest results found, from the index
        # alone (sweeps.repository: the summary, the list, a page of cells).
        Index("ix_cells_sweep_states", "sweep_id", "backend", "state", "pending", "result_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    policy: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(64))
    stack: Mapped[str] = mapped_column(String(64), default=DEFAULT_STACK, server_default=DEFAULT_STACK)
    options: Mapped[dict[str, Any]] = mapped_column(JSONType)  # coverfarm.result.Options, as JSON
    # Kept by the job service as its CPU jobs change (orchestrator.jobs.cell_state.refresh_cell), so that a
    # big sweep's summary and pages read them off the cells instead of deriving them from every job and
    # result: the cell's state and whether it is pending (jobs.cell_state.cell_state), and its latest result.
    state: Mapped[JobStatus] = mapped_column(
        CellStateType, default=JobStatus.QUEUED, server_default=JobStatus.QUEUED.value
    )
    pending: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    result_id: Mapped[int | None] = mapped_column(
        ForeignKey("results.id", ondelete="SET NULL", use_alter=True, name="fk_cells_result_id_results")
    )

    sweep: Mapped[Sweep] = relationship(back_populates="cells")
    jobs: Mapped[list[Job]] = relationship(back_populates="cell", order_by="Job.id")


class JobKind(StrEnum):
    """What a job does. A cell has CPU lower jobs ("lower", then at most one longer re-run on
    "lower.long") and, once it has a bundle, device jobs on a device class: a bundle run and, where a
    runner of the class can time one, an eager baseline (eager PyTorch timed on a host of that class)."""

    LOWER = "lower"
    DEVICE_RUN = "device_run"
    BASELINE = "baseline"


DEVICE_KINDS = (JobKind.DEVICE_RUN, JobKind.BASELINE)  # the kinds that run on a device class

JobKindType = Enum(
    JobKind,
    name="job_kind",
    native_enum=False,
    create_constraint=True,
    length=16,
    values_callable=lambda members: [member.value for member in members],
)


class Job(Base):
    __tablename__ = "jobs"
    # A cell has one job per stage: the first "lower", at most one re-run on "lower.long", and one job
    # per device class and kind. A device job, and only a device job, names its device class.
    __table_args__ = (
        UniqueConstraint("cell_id", "stage"),
        Index("ix_jobs_status", "status"),
        CheckConstraint(
            "(kind = 'lower' AND device_class IS NULL) OR (kind <> 'lower' AND device_class IS NOT NULL)",
            name="kind_device_class",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id", ondelete="CASCADE"), index=True)
    kind: Mapped[JobKind] = mapped_column(JobKindType)
    device_class: Mapped[str | None] = mapped_column(String(64))  # a device job's; None for a lower job
    # The job's name in its cell, as the API and the pages show it: "lower" or "lower.long" for a lower
    # job, "run:<device class>" or "baseline:<device class>" for a device job (jobs.sending.stage_of).
    # Nothing reads the kind or the class back out of it: the two columns above say them.
    stage: Mapped[str] = mapped_column(String(64))
    queue: Mapped[str] = mapped_column(String(64))
    timeout_s: Mapped[float] = mapped_column(Float)
    status: Mapped[JobStatus] = mapped_column(JobStatusType, default=JobStatus.QUEUED)
    status_reason: Mapped[str | None] = mapped_column(REASON)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # A lower job that needs more memory than a worker it landed on had: the need, in GB, that routes it
    # to a worker of that memory class (None: any worker of the cell's stack).
    memory_gb: Mapped[float | None] = mapped_column(Float)
    worker: Mapped[str | None] = mapped_column(String(255))
    # The process on ``worker``'s host that runs the current attempt: a redelivered message can tell
    # from it that the attempt died with its process (a killed pool child) and run again at once.
    worker_pid: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(ERROR)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    cell: Mapped[Cell] = relationship(back_populates="jobs")
    attempts: Mapped[list[JobAttempt]] = relationship(back_populates="job", order_by="JobAttempt.attempt")
    result: Mapped[Result | None] = relationship(back_populates="job")


class JobAttempt(Base):
    __tablename__ = "job_attempts"
    __table_args__ = (UniqueConstraint("job_id", "attempt"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    worker: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The job's status when this attempt ended, or "lost" when its worker stopped heartbeating.
    outcome: Mapped[str | None] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(ERROR)

    job: Mapped[Job] = relationship(back_populates="attempts")


class Result(Base):
    __tablename__ = "results"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # ResultDocument.status
    export_status: Mapped[str] = mapped_column(String(16))
    ops_total: Mapped[int | None] = mapped_column(Integer)
    ops_on_backend: Mapped[int | None] = mapped_column(Integer)
    macs_total: Mapped[int | None] = mapped_column(BigInteger)
    macs_on_backend: Mapped[int | None] = mapped_column(BigInteger)
    programs: Mapped[int | None] = mapped_column(Integer)
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)  # coverfarm.result.ResultDocument
    # sha256 of everything that produced the document (coverfarm.reuse); None: stored before reuse
    # existed, or by an engine that names no key. A later cell with the same key reuses the result.
    reuse_key: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    job: Mapped[Job] = relationship(back_populates="result")


class WorkerState(StrEnum):
    ONLINE = "online"
    OFFLINE = "offline"


class Worker(Base):
    """A CPU worker (a Celery worker process, by its node name). Its state changes only through
    ``orchestrator.workers.transitions``."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    queues: Mapped[list[str]] = mapped_column(JSONType)
    # The stack the worker's environment is (coverfarm.stacks), its package versions, and its usable
    # memory; stored before 0007 as the default stack with versions and memory unknown.
    stack: Mapped[str] = mapped_column(String(64), default=DEFAULT_STACK, server_default=DEFAULT_STACK)
    versions: Mapped[dict[str, str] | None] = mapped_column(JSONType)
    memory_gb: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))  # a WorkerState value
    state_reason: Mapped[str | None] = mapped_column(REASON)
    state_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RunnerState(StrEnum):
    QUARANTINED = "quarantined"  # enrolled or back from an infrastructure error: health check first
    HEALTHY = "healthy"  # passed its health check; takes device jobs
    OFFLINE = "offline"  # missed heartbeats
    REVOKED = "revoked"  # its credential no longer opens anything


# The states of a runner that is there (heartbeating): the reconciler watches them, and a baseline job is
# made only for a class one of them can time.
LIVE_RUNNER_STATES = (RunnerState.QUARANTINED.value, RunnerState.HEALTHY.value)


class Runner(Base):
    """A device runner enrolled with a one-time token. Its state changes only through
    ``orchestrator.devices.transitions``; its credential is stored as a sha256."""

    __tablename__ = "runners"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    device_classes: Mapped[list[str]] = mapped_column(JSONType)
    probe: Mapped[dict[str, Any]] = mapped_column(JSONType)  # coverfarm.device_result.ProbeReport
    credential_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # Ed25519 public key (hex) that verifies the runner's signed offline results; the private key
    # never reaches the farm (farmrun/signing.py). None: the runner signs nothing.
    signing_key: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))  # a RunnerState value
    state_reason: Mapped[str | None] = mapped_column(REASON)
    state_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    enrolled_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat: Mapped[datetime | None] = mapped_column(UTCDateTime)


class EnrolmentToken(Base):
    """A one-time enrolment token, stored as its sha256."""

    __tablename__ = "enrolment_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))


class Artifact(Base):
    """A bundle in the content-addressed store (the files live in ``settings.artifacts_dir``)."""

    __tablename__ = "artifacts"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class CellDeviceRow:
    """What a device run and a device baseline both are: one row per (cell, device class), written by an
    attempt of a device job on a runner (upserted, so a retry replaces it), with its status, median and
    cause, and the whole document it came from."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple[UniqueConstraint]:
        # A constraint belongs to one table: each mapped class gets its own.
        return (UniqueConstraint("cell_id", "device_class"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id", ondelete="CASCADE"), index=True)
    device_class: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    attempt: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    median_ms: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(ERROR)
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class DeviceRun(CellDeviceRow, Base):
    """The device result of one cell on one device class: from its device job (``job_id``) or from an
    offline import. One row per (cell, class, runtime patches): a retried attempt or a second import
    replaces it; a run of a runtime built with candidate upstream fixes is kept beside the stock
    runtime's. ``status`` and ``document`` are coverfarm.device_result.DeviceResult's."""

    __tablename__ = "device_runs"
    __table_args__ = (UniqueConstraint("cell_id", "device_class", "runtime_patches"),)

    source: Mapped[str] = mapped_column(String(16))  # "job" or "import"
    bundle_sha256: Mapped[str] = mapped_column(String(64))
    # The runtime's declared upstream pull requests, comma-separated (``RuntimeIdentity.patches``,
    # ``runtime_patches_key``); empty for a release's runtime
    runtime_patches: Mapped[str] = mapped_column(String(200), default="", server_default="")


class DeviceBaseline(CellDeviceRow, Base):
    """Eager PyTorch timed on the CPU of a host of one device class, for one cell's policy and options:
    the baseline of that class's speed-up. From a baseline job; one row per (cell, class), replaced by a
    retried attempt. ``status`` and ``document`` are coverfarm.baseline.BaselineResult's."""

    __tablename__ = "device_baselines"


class Event(Base):
    """A stored change, the source of the SSE stream (its id is the stream's Last-Event-ID)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    sweep_id: Mapped[int | None] = mapped_column(Integer, index=True)
    cell_id: Mapped[int | None] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(Integer)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
