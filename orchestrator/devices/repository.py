"""Every query on runners, enrolment tokens, device runs and device baselines."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from orchestrator.models import (
    LIVE_RUNNER_STATES,
    Cell,
    CellDeviceRow,
    DeviceBaseline,
    DeviceRun,
    EnrolmentToken,
    Job,
    Result,
    Runner,
    RunnerState,
    utcnow,
)


def use_token(session: Session, token_hash: str, now: datetime) -> bool:
    """Mark the token used, if it is unused and unexpired; whether this call did.

    One conditional UPDATE, decided by its row count: of two enrolments racing with one token, the
    second's UPDATE waits for the first to commit (Postgres: the row lock; SQLite: the write lock on the
    file) and then finds ``used_at`` set. A read followed by a write would let both through on SQLite,
    where SELECT ... FOR UPDATE locks nothing and a transaction begins only at its first write.
    """
    result = session.execute(
        update(EnrolmentToken)
        .where(
            EnrolmentToken.token_hash == token_hash,
            EnrolmentToken.used_at.is_(None),
            EnrolmentToken.expires_at > now,
        )
        .values(used_at=now)
        .execution_options(synchronize_session=False)
    )
    return getattr(result, "rowcount", 0) == 1


def token_enrolled(session: Session, token_hash: str, runner_id: int) -> None:
    """Record which runner a used token enrolled."""
    session.execute(
        update(EnrolmentToken)
        .where(EnrolmentToken.token_hash == token_hash)
        .values(runner_id=runner_id)
        .execution_options(synchronize_session=False)
    )


def get_runner(session: Session, runner_id: int) -> Runner | None:
    return session.get(Runner, runner_id)


def list_runners(session: Session, limit: int, offset: int) -> Sequence[Runner]:
    return session.scalars(select(Runner).order_by(Runner.id).limit(limit).offset(offset)).all()


def count_runners(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Runner)) or 0


def silent_live(session: Session, before: datetime) -> Sequence[Runner]:
    return session.scalars(
        select(Runner)
        .where(
            Runner.state.in_(LIVE_RUNNER_STATES),
            func.coalesce(Runner.last_heartbeat, Runner.enrolled_at) < before,
        )
        .order_by(Runner.id)
        .with_for_update(skip_locked=True)
    ).all()


def run_classes_of_sweep(session: Session, sweep_id: int) -> list[str]:
    """The device classes with a stored run of one of the sweep's cells, by name."""
    query = select(DeviceRun.device_class).join(Cell, Cell.id == DeviceRun.cell_id)
    return sorted(set(session.scalars(query.where(Cell.sweep_id == sweep_id))))


def enrolled_classes(session: Session) -> set[str]:
    """Device classes some runner that is not revoked serves."""
    rows = session.scalars(select(Runner.device_classes).where(Runner.state != RunnerState.REVOKED.value))
    return {name for classes in rows for name in classes}


def _upsert(
    session: Session,
    table: type[CellDeviceRow],
    values: dict[str, Any],
    keys: tuple[str, ...] = ("cell_id", "device_class"),
) -> None:
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    statement = insert(table).values(**values, created_at=utcnow(), updated_at=utcnow())
    replace = {key: statement.excluded[key] for key in (*values, "updated_at") if key not in keys}
    session.execute(statement.on_conflict_do_update(index_elements=list(keys), set_=replace))


RUN_KEY = ("cell_id", "device_class", "runtime_patches")  # device_runs' unique key (migration 0013)


def upsert_run(session: Session, values: dict[str, Any]) -> None:
    """Insert or replace the device run of (cell, class, runtime patches): a retry or a second import of
    the same runtime replaces it; a candidate-fix runtime's run stands beside the stock runtime's."""
    _upsert(session, DeviceRun, {"runtime_patches": "", **values}, RUN_KEY)


def upsert_baseline(session: Session, values: dict[str, Any]) -> None:
    """Insert or replace the eager baseline of (cell, class): a retried attempt replaces it."""
    _upsert(session, DeviceBaseline, values)


def runs_by_runner(session: Session, runner_id: int) -> Sequence[DeviceRun]:
    """The device runs a runner reported or whose signed results were imported, oldest first."""
    return session.scalars(
        select(DeviceRun).where(DeviceRun.runner_id == runner_id).order_by(DeviceRun.id)
    ).all()


def runs_of_cells(session: Session, cell_ids: Sequence[int]) -> Sequence[DeviceRun]:
    """The run each (cell, class) shows: the stock runtime's where there is one, else a candidate fix's
    (the first by its patches); the others are ``candidate_runs_of_cells``."""
    return [runs[0] for runs in _runs_by_column(session, cell_ids).values()]


def candidate_runs_of_cells(session: Session, cell_ids: Sequence[int]) -> Sequence[DeviceRun]:
    """The candidate-fix runs beside the run each (cell, class) shows, by cell, class and patches."""
    return [run for runs in _runs_by_column(session, cell_ids).values() for run in runs[1:]]


def _runs_by_column(session: Session, cell_ids: Sequence[int]) -> dict[tuple[int, str], list[DeviceRun]]:
    if not cell_ids:
        return {}
    query = select(DeviceRun).where(DeviceRun.cell_id.in_(cell_ids))
    order = (DeviceRun.cell_id, DeviceRun.device_class, DeviceRun.runtime_patches)
    found: dict[tuple[int, str], list[DeviceRun]] = {}
    for run in session.scalars(query.order_by(*order)):  # "" (the stock runtime) sorts first
        found.setdefault((run.cell_id, run.device_class), []).append(run)
    return found


def baselines_of_cells(session: Session, cell_ids: Sequence[int]) -> Sequence[DeviceBaseline]:
    if not cell_ids:
        return []
    return session.scalars(select(DeviceBaseline).where(DeviceBaseline.cell_id.in_(cell_ids))).all()


def earlier_runs(
    session: Session, policy: str, backend: str, device_class: str, before_sweep_id: int, limit: int = 20
) -> Sequence[tuple[Cell, DeviceRun]]:
    """Successful runs of (policy, backend) on ``device_class`` in sweeps before ``before_sweep_id``,
    newest sweep first: the candidates for a cell's previous sweep (the caller matches options and stack)."""
    rows = session.execute(
        select(Cell, DeviceRun)
        .join(DeviceRun, DeviceRun.cell_id == Cell.id)
        .where(
            Cell.policy == policy,
            Cell.backend == backend,
            Cell.sweep_id < before_sweep_id,
            DeviceRun.device_class == device_class,
            DeviceRun.status == "ok",
            DeviceRun.runtime_patches == "",  # a sweep's history is of release runtimes
        )
        .order_by(Cell.sweep_id.desc())
        .limit(limit)
    ).all()
    return [(cell, run) for cell, run in rows]


def cells_with_bundle(session: Session, sha256: str) -> Sequence[Cell]:
    """Cells whose stored CPU result produced the bundle ``sha256``."""
    sha = Result.document["bundle"]["sha256"].as_string()
    return session.scalars(
        select(Cell).join(Result, Result.cell_id == Cell.id).where(sha == sha256).order_by(Cell.id)
    ).all()


def sweep_cells(session: Session, sweep_id: int) -> Sequence[Cell]:
    return session.scalars(select(Cell).where(Cell.sweep_id == sweep_id).order_by(Cell.id)).all()


def bundle_of_cell(session: Session, cell_id: int) -> str | None:
    """The bundle sha256 of the cell's latest stored CPU result, if it has one."""
    sha = Result.document["bundle"]["sha256"].as_string()
    return session.scalar(
        select(sha)
        .join(Job, Job.id == Result.job_id)
        .where(Result.cell_id == cell_id)
        .order_by(Job.id.desc())
    )
