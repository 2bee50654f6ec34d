"""The CPU worker's Celery task, the jobs domain's side of a lower job: ``coverfarm worker`` (or
``celery -A orchestrator.jobs.tasks worker -Q <queues>`` with the queues of its stack and memory classes,
``coverfarm.routes.worker_queues``). The task's name is ``coverfarm.queues.LOWER_TASK``, not its module's.

A worker is of one stack (``COVERFARM_STACK``, else the detected one) and gives each job its share of
memory (``COVERFARM_WORKER_MEMORY_GB``, else MemTotal; ``coverfarm worker`` sets the share): it registers
both with its package versions, and runs no job of another stack or one that needs more memory.

The task body imports no torch; the engine (``settings.engine``, by default ``worker.engine:analyze``)
is a plugin, imported by that name on the first job a process runs; the task imports nothing of the
worker package. The torch-free host facts a worker registers and keys reuse with are the contract's:
``coverfarm.worker_memory`` (this worker's memory), ``coverfarm.versions`` (its package versions) and
``coverfarm.reuse`` (the reuse key, from the engine module's ``reuse_fields``). Results and job
transitions go straight to the database (CPU workers are trusted, inside the farm), each in its own
transaction; tasks a transaction creates (the slow re-run) are sent only after it commits.

This module holds the Celery app, the task and the worker's signals; one job in a pool process is
``orchestrator.jobs.lower_run``, what a worker process holds ``orchestrator.jobs.worker_runtime``, and
the heartbeats ``orchestrator.jobs.heartbeats``.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from billiard.einfo import ExceptionInfo, ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery import Task
from celery.exceptions import Reject
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from celery.worker.request import Request
from sqlalchemy.exc import OperationalError

from coverfarm import backends
from coverfarm.queues import LOWER_TASK, LowerMessage
from coverfarm.settings import get_settings
from coverfarm.stack_detect import detect_stack
from coverfarm.versions import versions
from coverfarm.worker_memory import worker_memory_gb
from farmrun.celery_app import make_celery
from farmrun.periodic import Periodic
from orchestrator.db import make_engine, make_sessionmaker
from orchestrator.jobs import service as jobs
from orchestrator.jobs.heartbeats import worker_heartbeat
from orchestrator.jobs.lower_run import run_lower
from orchestrator.jobs.worker_runtime import DatabaseGone, Runtime
from orchestrator.workers import service as workers

log = logging.getLogger(__name__)


_runtime: Runtime | None = None


def runtime() -> Runtime:
    global _runtime
    if _runtime is None or _runtime.pid != os.getpid():
        if _runtime is not None:
            # A forked pool child inherited the parent's pooled connections: drop them without
            # closing, or the child would end the parent's sessions on those sockets.
            _runtime.engine.dispose(close=False)
        settings = get_settings()
        engine = make_engine(settings)
        sessions = make_sessionmaker(engine)
        _runtime = Runtime(settings, engine, sessions, app, os.getpid(), detect_stack(), _memory_gb())
    return _runtime


def _memory_gb() -> float | None:
    try:
        return worker_memory_gb()
    except ValueError as error:
        log.warning("this worker's memory is unknown: %s", error)
        return None


app = make_celery(get_settings())


_beat: Periodic | None = None


@worker_process_init.connect
def _connected(**_kwargs: Any) -> None:
    """A pool process opens its database connection as it starts, not in its first job's time (a
    database away now is met again, and waited for, by that job)."""
    try:
        with runtime().engine.connect():
            pass
    except OperationalError as error:
        log.warning("no database connection yet: %s", str(error).splitlines()[0])


@worker_ready.connect
def _registered(sender: Any, **_kwargs: Any) -> None:
    global _beat
    queues = sorted(sender.app.amqp.queues.consume_from or sender.app.amqp.queues)
    rt = runtime()
    with rt.transaction() as session:
        workers.register(
            session, sender.hostname, queues, rt.stack, versions(*backends.names()), rt.memory_gb
        )
    _beat = worker_heartbeat(rt, sender.hostname)
    _beat.start()


@worker_shutdown.connect
def _stopped(sender: Any, **_kwargs: Any) -> None:
    if _beat is not None:
        _beat.stop()
    with runtime().transaction() as session:
        workers.stopped(session, sender.hostname)


def lost_process(job_id: int, worker: str, pid: int) -> None:
    """In the worker's main process: pool process ``pid`` died running job ``job_id``. Its attempt is
    ended as lost and the job sent again now (``jobs.lose_process``); should the database not answer,
    the job's missed heartbeat tells the reconciler later. Celery puts the message back too
    (``task_reject_on_worker_lost``): whichever comes first starts the next attempt, the other is a
    duplicate ``jobs.start`` drops."""
    rt = runtime()
    try:
        with rt.transaction() as session:
            requeued = jobs.lose_process(session, job_id, worker, pid, rt.settings)
    except Exception as error:
        log.error(
            "job %s: process %s died; not re-queued now (%s: %s)", job_id, pid, type(error).__name__, error
        )
        return
    if requeued:
        log.warning("job %s: process %s died running it; the job is queued again", job_id, pid)


class LowerRequest(Request):
    """Celery's request of a lower task, in the worker's main process, which sees a pool process die."""

    def on_failure(
        self, exc_info: ExceptionInfo, send_failed_event: bool = True, return_ok: bool = False
    ) -> None:
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)
        error = exc_info.exception
        if isinstance(error, ExceptionWithTraceback):  # as the pool hands it over
            error = error.exc
        if not isinstance(error, WorkerLostError) or self.worker_pid is None:
            return
        try:
            message = LowerMessage.model_validate(self.args[0])
        except (IndexError, ValueError):
            return
        lost_process(message.job_id, self.hostname or socket.gethostname(), self.worker_pid)


@app.task(name=LOWER_TASK, bind=True, Request=LowerRequest)
def lower(self: Task[Any, Any], message: dict[str, Any]) -> None:
    parsed = LowerMessage.model_validate(message)
    worker = self.request.hostname or socket.gethostname()
    try:
        run_lower(parsed.job_id, worker, runtime())
    except DatabaseGone as gone:
        # The message goes back to the queue, not into the acknowledged void: the job is still queued
        # (or its attempt will be found silent), and a worker takes it again once the database is back.
        log.error("%s; the message goes back to the queue", gone)
        raise Reject(str(gone), requeue=True) from None
