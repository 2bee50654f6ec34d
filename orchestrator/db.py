"""Engine, sessions and the unit of work: one session, committed once, messages sent only after commit.

A job's ``sent_at`` is stamped only once the broker has taken its message (after the commit), so a job
whose send failed stays ``sent_at IS NULL`` and the reconciler sends it on its next pass. On SQLite,
``SELECT ... FOR UPDATE`` takes the database's write lock (``BEGIN IMMEDIATE``): SQLite ignores FOR
UPDATE, and pysqlite begins a transaction only at its first write, so two requests could otherwise both
read a row as it was and both act on it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery import Celery
from sqlalchemy import Connection, Engine, create_engine, event, update
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from coverfarm.errors import UserError
from coverfarm.queues import DeviceMessage, LowerMessage
from coverfarm.settings import Settings
from farmrun.celery_app import send_device, send_lower
from orchestrator.models import Job, utcnow

OUTBOX = "coverfarm_outbox"
log = logging.getLogger(__name__)


def make_engine(settings: Settings) -> Engine:
    url = settings.sqlalchemy_url
    # hide_parameters: a failed statement's error (and the log line it becomes) does not carry its
    # values, which may be a credential's hash.
    if url.startswith("sqlite"):
        settings.ensure_home()
        create_private(settings.sqlite_path)
        engine = create_engine(url, connect_args={"timeout": 30}, hide_parameters=True)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, hide_parameters=True)


def create_private(path: os.PathLike[str] | str) -> None:
    """Create the SQLite file readable by its owner only (it holds the runners' credential hashes);
    SQLite gives its -wal and -shm files the same mode. An existing file is made 0600 too."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def check_sqlite(path: os.PathLike[str] | str) -> None:
    """UserError, saying what to do, when the SQLite file is not a sound database (PRAGMA quick_check).
    A missing or empty file is fine: the migrations create the schema."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    try:
        conn = sqlite3.connect(path, timeout=30)
        try:
            rows = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
        finally:
            conn.close()
    except sqlite3.Error as error:
        rows = [str(error)]
    except UnicodeDecodeError:  # SQLite's own message quotes the damaged bytes
        rows = ["its schema or pages hold bytes that are not text"]
    if rows != ["ok"]:
        raise UserError(
            f"the database {path} is damaged ({'; '.join(rows)}): stop every coverfarm process using it, "
            "then restore it from a backup, or move it away to start an empty farm"
        )


def _sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    # The embedded default has the server and a worker process writing one file: WAL lets readers
    # run beside the writer, and foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@event.listens_for(Session, "do_orm_execute")
def _sqlite_for_update(state: ORMExecuteState) -> None:
    """On SQLite, make ``SELECT ... FOR UPDATE`` lock: take the write lock before the read, so the rows
    read are the latest and stay so until this transaction ends (see the module's docstring)."""
    if not state.is_select or getattr(state.statement, "_for_update_arg", None) is None:
        return
    connection = state.session.connection()
    if connection.dialect.name != "sqlite":
        return
    dbapi = connection.connection.dbapi_connection
    if dbapi is not None and not dbapi.in_transaction:  # in one already: an earlier write holds the lock
        connection.exec_driver_sql("BEGIN IMMEDIATE")


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


def _send(celery: Celery, item: Outgoing) -> None:
    if isinstance(item.message, DeviceMessage):
        send_device(celery, item.message, item.queue)
    else:
        send_lower(celery, item.message, item.queue, item.stage_timeout_s)


def send_all(celery: Celery, outbox: list[Outgoing]) -> list[int]:
    """Send each message, trying a failed one once more at once; the ids of the jobs sent.

    A send that fails twice leaves its job queued, unstamped, with nothing on the broker: the
    reconciler's next pass sends it (``sent_at IS NULL``), so the caller still succeeds for what it
    stored.
    """
    sent = []
    for item in outbox:
        for attempt in (1, 2):
            try:
                _send(celery, item)
            except Exception as error:
                if attempt == 2:
                    log.error(
                        "sending job %s failed twice (%s: %s); the reconciler will send it",
                        item.message.job_id, type(error).__name__, error,
                    )  # fmt: skip
                continue
            sent.append(item.message.job_id)
            break
    return sent


def mark_sent(factory: Callable[[], Session], job_ids: list[int]) -> None:
    """Stamp ``sent_at`` on jobs whose message the broker took. Should this fail, the reconciler sends
    them once more: a duplicate message is dropped by the worker's start transition."""
    try:
        with factory() as session:
            session.execute(
                update(Job)
                .where(Job.id.in_(job_ids), Job.sent_at.is_(None))
                .values(sent_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            session.commit()
    except Exception as error:
        log.warning("jobs %s were sent but not stamped (%s): they may be sent twice", job_ids, error)


def read_one_snapshot(session: Session) -> None:
    """Have every read of ``session``'s transaction see the database as its first read found it.

    A page built from several statements (a sweep's progress, its cells, their jobs, results and device
    runs) then never shows a job as running beside the result a worker committed between two of them.
    Postgres: REPEATABLE READ, which a transaction that only reads never fails under; SQLite: a deferred
    ``BEGIN``, whose first read fixes the WAL snapshot (pysqlite begins no transaction for reads). A
    session bound to an outer connection (a test's rolled-back transaction) reads as that connection
    does. Call it before the session's first statement."""
    if isinstance(session.get_bind(), Connection):
        return
    if session.get_bind().dialect.name == "sqlite":
        session.connection().exec_driver_sql("BEGIN")
    else:
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


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
        outbox = take_outbox(session)
    if outbox and (sent := send_all(celery, outbox)):
        mark_sent(factory, sent)
