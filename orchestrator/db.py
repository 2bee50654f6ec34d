"""Engine, sessions and the unit of work: one session, committed once, messages sent only after commit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery import Celery
from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from coverfarm.queues import DeviceMessage, LowerMessage, send_device, send_lower
from coverfarm.settings import Settings

OUTBOX = "coverfarm_outbox"
log = logging.getLogger(__name__)


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


def make_engine(settings: Settings) -> Engine:
    url = settings.sqlalchemy_url
    if url.startswith("sqlite"):
        settings.ensure_home()
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    # The embedded default has the server and a worker process writing one file: WAL lets readers
    # run beside the writer, and foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@dataclass(frozen=True)
class Outgoing:
    message: LowerMessage | DeviceMessage
    queue: str
    stage_timeout_s: float


def enqueue_after_commit(session: Session, outgoing: Outgoing) -> None:
    """Hold a task until the session's transaction commits; a rolled-back session sends nothing."""
    session.info.setdefault(OUTBOX, []).append(outgoing)


def take_outbox(session: Session) -> list[Outgoing]:
    outbox: list[Outgoing] = session.info.pop(OUTBOX, [])
    return outbox


def send_all(celery: Celery, outbox: list[Outgoing]) -> None:
    # A send that fails here leaves its job queued with nothing on the broker; the reconciler sends
    # it again (resend_after_s), so the caller still succeeds for what it stored.
    for item in outbox:
        try:
            if isinstance(item.message, DeviceMessage):
                send_device(celery, item.message, item.queue)
            else:
                send_lower(celery, item.message, item.queue, item.stage_timeout_s)
        except Exception:
            log.exception("sending job %s failed; the reconciler will send it again", item.message.job_id)


@contextmanager
def unit_of_work(factory: Callable[[], Session], celery: Celery) -> Iterator[Session]:
    """Commit once at the end (roll back on error), then send what the transaction enqueued."""
    with factory() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            take_outbox(session)
            raise
        send_all(celery, take_outbox(session))
