"""Every query on jobs, attempts and results, and the runners a baseline job waits for (workers:
orchestrator.workers.repository; the rest of the runners: orchestrator.devices.repository)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from coverfarm.device_result import ProbeReport
from orchestrator.models import (
    LIVE_RUNNER_STATES,
    Cell,
    CellDeviceRow,
    DeviceBaseline,
    DeviceRun,
    Job,
    JobAttempt,
    JobStatus,
    Result,
    Runner,
    utcnow,
)

REUSED_SOURCE = "reused"  # a device run's source when it was copied from a cell of the same reuse key


def _insert(session: Session) -> Any:
    # Both dialects spell the upsert the same way (INSERT ... ON CONFLICT DO UPDATE) but SQLAlchemy
    # exposes it per dialect.
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def upsert_result(session: Session, values: dict[str, Any]) -> None:
    """Insert or replace the result of ``values['job_id']`` (a retried attempt replaces, never duplicates)."""
    statement = _insert(session)(Result).values(**values, created_at=utcnow(), updated_at=utcnow())
    replace = {key: statement.excluded[key] for key in (*values, "updated_at") if key != "job_id"}
    session.execute(statement.on_conflict_do_update(index_elements=[Result.job_id], set_=replace))


def stored_result(session: Session, job_id: int) -> tuple[dict[str, Any], int] | None:
    """(document, attempt) of the job's stored result, as the database has it now."""
    row = session.execute(select(Result.document, Result.attempt).where(Result.job_id == job_id)).first()
    return None if row is None else (row[0], row[1])


def result_with_key(
    session: Session, key: str, other_than_job: int, statuses: list[str]
) -> tuple[dict[str, Any], int, int] | None:
    """(document, job id, sweep id) of the newest result with reuse key ``key`` and one of ``statuses``,
    of a job other than ``other_than_job`` (the index on ``reuse_key`` finds it)."""
    row = session.execute(
        select(Result.document, Result.job_id, Cell.sweep_id)
        .join(Cell, Cell.id == Result.cell_id)
        .where(Result.reuse_key == key, Result.job_id != other_than_job, Result.status.in_(statuses))
        .order_by(Result.id.desc())
        .limit(1)
    ).first()
    return None if row is None else (row[0], row[1], row[2])


def close_attempt(session: Session, job_id: int, number: int, outcome: str, error: str | None) -> None:
    """Stamp the end of attempt ``number`` of the job, with its outcome, in one statement."""
    session.execute(
        update(JobAttempt)
        .where(JobAttempt.job_id == job_id, JobAttempt.attempt == number)
        .values(finished_at=utcnow(), outcome=outcome, error=error)
    )


def beat(session: Session, job_id: int, number: int, worker: str) -> bool:
    """Stamp a running attempt's heartbeat; False when the job is no longer this attempt's to run."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == number, Job.worker == worker, Job.status == JobStatus.RUNNING)
        .values(heartbeat_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))


def silent_running(session: Session, before: datetime) -> Sequence[Job]:
    return session.scalars(
        select(Job)
        .where(Job.status == JobStatus.RUNNING, Job.heartbeat_at < before)
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()


def unsent_queued(session: Session, before: datetime) -> Sequence[Job]:
    """Queued jobs the broker never took (their send failed) or took before ``before``."""
    return session.scalars(
        select(Job)
        .where(Job.status == JobStatus.QUEUED, or_(Job.sent_at.is_(None), Job.sent_at < before))
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()


def pending_of_sweep(session: Session, sweep_id: int) -> Sequence[int]:
    return session.scalars(
        select(Job.id)
        .join(Cell)
        .where(Cell.sweep_id == sweep_id, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
        .order_by(Job.id)
    ).all()


def baseline_classes(session: Session) -> set[str]:
    """Device classes some live runner (quarantined or healthy) serves on a host that can time eager
    baselines (its probe found torch and lerobot installed). An offline runner is not counted: a baseline
    job nobody is there to take would keep its sweep running, while the cell has its milliseconds."""
    rows = session.execute(
        select(Runner.device_classes, Runner.probe).where(Runner.state.in_(LIVE_RUNNER_STATES))
    )
    return {name for classes, probe in rows if _times_baselines(probe) for name in classes}


def _times_baselines(probe: dict[str, Any]) -> bool:
    baseline = ProbeReport.model_validate(probe).baseline
    return baseline is not None and baseline.status == "ok"


def stored_device_row(
    session: Session,
    model: type[DeviceRun] | type[DeviceBaseline],
    reuse_key: str,
    device_class: str,
    statuses: Sequence[str] | None,
    bundle_sha256: str | None = None,
) -> DeviceRun | DeviceBaseline | None:
    """The newest device run (or baseline) on ``device_class`` of a cell whose newest result has
    ``reuse_key``, with one of ``statuses`` (None: any) and, for a run, of bundle ``bundle_sha256``."""
    query: Select[Any] = (
        select(model)
        .join(Cell, Cell.id == model.cell_id)
        .join(Result, Result.id == Cell.result_id)
        .where(Result.reuse_key == reuse_key, model.device_class == device_class)
        .order_by(model.updated_at.desc(), model.id.desc())
        .limit(1)
    )
    if statuses is not None:
        query = query.where(model.status.in_(statuses))
    if bundle_sha256 is not None and model is DeviceRun:
        query = query.where(DeviceRun.bundle_sha256 == bundle_sha256)
    if model is DeviceRun:  # a reused cell takes the stock runtime's run, never a candidate fix's
        query = query.where(DeviceRun.runtime_patches == "")
    found: DeviceRun | DeviceBaseline | None = session.scalars(query).first()
    return found


def copy_device_row(session: Session, row: CellDeviceRow, cell_id: int) -> None:
    """A copy of a stored device run or baseline as ``cell_id``'s, marked ``reused`` (a run's source)
    and of no job of this cell; its runner and document are the source's, as measured."""
    values = {
        "cell_id": cell_id,
        "device_class": row.device_class,
        "job_id": None,
        "runner_id": row.runner_id,
        "attempt": row.attempt,
        "status": row.status,
        "median_ms": row.median_ms,
        "error": row.error,
        "document": row.document,
    }
    if isinstance(row, DeviceRun):
        session.add(DeviceRun(**values, source=REUSED_SOURCE, bundle_sha256=row.bundle_sha256))
    else:
        session.add(DeviceBaseline(**values))
    session.flush()
