"""One lower job in a CPU worker's pool process (``run_lower``): started, with whether the process of
a running attempt here is still alive (``attempt_alive_here``); finished at once with a stored result of
its reuse key (``begin``), or run by the engine under a heartbeat, its bundle stored, and finished or
failed. The task body imports no torch: the engine is imported by its name on the first job."""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sqlalchemy.orm import Session

from coverfarm import reuse
from coverfarm.result import ResultDocument
from coverfarm.settings import Settings
from orchestrator.artifacts import repository as artifacts
from orchestrator.artifacts.store import ArtifactError, ArtifactStore, Stored
from orchestrator.jobs import service as jobs
from orchestrator.jobs.heartbeats import job_heartbeat
from orchestrator.jobs.worker_runtime import Analyzer, Runtime, load_engine, patiently

log = logging.getLogger(__name__)


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
