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
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from billiard.einfo import ExceptionInfo, ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery import Celery, Task
from celery.exceptions import Reject
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from celery.worker.request import Request
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from coverfarm import backends, reuse
from coverfarm.queues import LOWER_TASK, LowerMessage
from coverfarm.result import Options, ResultDocument
from coverfarm.settings import Settings, get_settings
from coverfarm.stack_detect import detect_stack
from coverfarm.stacks import DEFAULT_STACK
from coverfarm.versions import versions
from coverfarm.worker_memory import worker_memory_gb
from farmrun.celery_app import make_celery
from farmrun.periodic import Outage, Periodic
from orchestrator.artifacts import repository as artifacts
from orchestrator.artifacts.store import ArtifactError, ArtifactStore, Stored
from orchestrator.db import make_engine, make_sessionmaker, unit_of_work
from orchestrator.jobs import service as jobs
from orchestrator.workers import service as workers

log = logging.getLogger(__name__)


class DatabaseGone(Exception):
    """The farm's database did not answer for as long as the worker waits for it."""


class Analyzer(Protocol):
    """worker.engine.analyze's signature."""

    def __call__(
        self,
        policy: str,
        backend: str,
        options: Options,
        out_dir: Path,
        progress: Callable[[str], None] | None = None,
    ) -> ResultDocument: ...


def load_engine(spec: str) -> Analyzer:
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise ValueError(f"engine {spec!r} must be 'module:function'")
    analyze: Analyzer = getattr(importlib.import_module(module_name), attribute)
    return analyze


@dataclass
class Runtime:
    """What one worker process needs, built lazily per process (prefork children must not share
    the parent's database connections)."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    celery: Celery
    pid: int
    stack: str = DEFAULT_STACK
    memory_gb: float | None = None  # each job's share; None: unknown (no MemTotal, no setting)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with unit_of_work(self.sessions, self.celery) as session:
            yield session


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


@cache
def _engine(spec: str) -> Analyzer:
    return load_engine(spec)


@cache
def _reuse_fields(spec: str) -> reuse.ReuseFields | None:
    return reuse.engine_fields(spec)


def cell_reuse_key(rt: Runtime, started: jobs.StartedJob) -> str | None:
    """The started cell's reuse key (``coverfarm.reuse``); None when the engine names none, or when the
    key cannot be computed here (said in the log; the cell then runs and is stored without one)."""
    try:
        fields = _reuse_fields(rt.settings.engine)
        if fields is None:
            return None
        return reuse.reuse_key(fields, started.policy, started.backend, started.options)
    except Exception as error:
        log.warning("job %s: no reuse key (%s: %s)", started.job_id, type(error).__name__, error)
        return None


def try_reuse(session: Session, rt: Runtime, started: jobs.StartedJob, key: str) -> bool:
    """Finish the started job with a copy of a stored result that has ``key``; False when there is none."""
    doc = jobs.reusable(session, key, started.job_id, started.reuse_unfinished)
    if doc is None:
        return False
    # The bundle is in the store already (it was stored with the source's result): device jobs,
    # if the sweep asks for any, are made by finish as for a fresh result.
    jobs.finish(session, started.job_id, started.attempt, doc, rt.settings, reuse_key=key)
    return True


@dataclass(frozen=True)
class Begun:
    """A started attempt, its reuse key, and whether a stored result finished it at once."""

    started: jobs.StartedJob
    key: str | None
    reused: bool


def begin(session: Session, rt: Runtime, job_id: int, worker: str) -> Begun | None:
    """Start the job and, unless its sweep is fresh, finish it with a stored result of its reuse key,
    in one transaction (one commit per job fewer than two); None when there is nothing to run."""
    started = jobs.start(
        session,
        job_id,
        worker,
        rt.settings,
        pid=os.getpid(),
        attempt_alive=attempt_alive_here(worker),
        worker_stack=rt.stack,
        worker_memory_gb=rt.memory_gb,
    )
    if started is None:
        return None
    key = cell_reuse_key(rt, started)
    reused = key is not None and not started.fresh and try_reuse(session, rt, started, key)
    return Begun(started, key, reused)


def job_heartbeat(rt: Runtime, job_id: int, attempt: int, worker: str) -> Periodic:
    """Stamps the running attempt every ``heartbeat_interval_s`` while the engine works, so the
    reconciler can tell a long stage from a dead worker."""

    def beat() -> None:
        try:
            with rt.transaction() as session:
                alive = jobs.heartbeat(session, job_id, attempt, worker)
            if not alive:
                log.warning("job %s attempt %s is no longer ours", job_id, attempt)
        except Exception:
            log.exception("heartbeat of job %s failed", job_id)

    return Periodic(beat, rt.settings.heartbeat_interval_s, f"heartbeat-{job_id}")


def worker_heartbeat(rt: Runtime, worker: str) -> Periodic:
    """The worker's own heartbeat, from its main process whether or not it runs a job, so that the
    reconciler can tell an idle worker from a dead one (and mark the dead one offline). A database that
    stays away past the heartbeat timeout is said once and then tried less often, not every beat."""
    outage = Outage("the farm's database", patience_s=rt.settings.heartbeat_timeout_s, log=log)

    def beat() -> None:
        if not outage.due():
            return
        try:
            with rt.transaction() as session:
                workers.seen(session, worker)
        except Exception as error:
            outage.failed(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            if not outage.gone:
                log.warning("heartbeat of worker %s failed: %s", worker, type(error).__name__)
            return
        outage.succeeded()

    return Periodic(beat, rt.settings.heartbeat_interval_s, "worker-heartbeat", join_timeout_s=5)


def process_running(pid: int) -> bool:
    """Whether process ``pid`` on this host exists and is not a zombie (Linux /proc; elsewhere
    existence only). A killed pool child stays a zombie until the Celery parent reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def attempt_alive_here(worker: str) -> Callable[[str | None, int | None], bool]:
    """For ``jobs.start``: whether the process running a job's current attempt is alive, as seen from
    ``worker``. Only an attempt of this same worker (node names carry the host, ``name@%h``) can be
    checked here; any other answers True and is left to the heartbeat timeout. A prefork child runs
    one task at a time, so an attempt recorded for this very process is not running any more."""

    def alive(name: str | None, pid: int | None) -> bool:
        if name != worker or pid is None:
            return True
        return pid != os.getpid() and process_running(pid)

    return alive


def _progress(job_id: int) -> Callable[[str], None]:
    def report(line: str) -> None:
        log.info("job %s: %s", job_id, line)

    return report


def store_bundle(doc: ResultDocument, settings: Settings) -> Stored | None:
    """Put the cell's bundle into the artifact store by its sha256 (idempotent), for device runners.

    A bundle the store refuses (its content does not hash to its name) is logged and left out: the cell
    keeps its CPU result, and no device job is made for a bundle the farm cannot serve.
    """
    if doc.bundle is None:
        return None
    try:
        return ArtifactStore(settings.artifacts_dir).put(Path(doc.bundle.path), doc.bundle.sha256)
    except (ArtifactError, OSError) as error:
        log.error("bundle %s not stored: %s", doc.bundle.sha256, error)
        return None


def patiently[T](rt: Runtime, what: str, work: Callable[[Session], T]) -> T:
    """``work`` in one transaction; while the database does not answer, again after 1, 2, 4 … s, for up to
    ``heartbeat_timeout_s`` (past it the reconciler treats the job as lost anyway); then DatabaseGone."""
    deadline = time.monotonic() + rt.settings.heartbeat_timeout_s
    wait = 1.0
    while True:
        try:
            with rt.transaction() as session:
                return work(session)
        except OperationalError as error:
            if time.monotonic() + wait > deadline:
                raise DatabaseGone(f"{what}: the database did not answer ({error.orig!r})") from None
            log.warning("%s: the database did not answer; trying again in %.0f s", what, wait)
            time.sleep(wait)
            wait = min(wait * 2, 30.0)


def run_lower(job_id: int, worker: str, rt: Runtime) -> None:
    begun = patiently(rt, f"starting job {job_id}", lambda session: begin(session, rt, job_id, worker))
    if begun is None:
        return
    started, key = begun.started, begun.key
    if begun.reused:
        log.info("job %s: reused a stored result with key %s", job_id, (key or "")[:12])
        return
    out_dir = rt.settings.results_dir / f"job-{job_id}" / f"attempt-{started.attempt}"
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info(
        "job %s attempt %s: %s on %s (stack %s)",
        job_id,
        started.attempt,
        started.policy,
        started.backend,
        started.stack,
    )
    with job_heartbeat(rt, job_id, started.attempt, worker):
        try:
            analyze = _engine(rt.settings.engine)
            doc = analyze(started.policy, started.backend, started.options, out_dir, _progress(job_id))
        except Exception:
            # Includes Celery's SoftTimeLimitExceeded: the engine stopped responding past every bound.
            error = traceback.format_exc()
            log.error("job %s attempt %s failed:\n%s", job_id, started.attempt, error)
            patiently(
                rt,
                f"failing job {job_id}",
                lambda session: jobs.fail(session, job_id, started.attempt, error),
            )
            return
    stored = store_bundle(doc, rt.settings)

    def store(session: Session) -> None:
        if stored is not None:
            artifacts.record(session, stored)
        jobs.finish(session, job_id, started.attempt, doc, rt.settings, reuse_key=key)

    # Should the database stay away past this, the attempt is lost: the reconciler runs it again.
    patiently(rt, f"storing the result of job {job_id}", store)


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
