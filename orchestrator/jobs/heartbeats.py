"""The CPU worker's heartbeats: a running attempt's (``job_heartbeat``), which tells the reconciler a long
stage from a dead worker, and the worker's own from its main process (``worker_heartbeat``), which tells
an idle worker from a dead one."""

from __future__ import annotations

import logging

from farmrun.periodic import Outage, Periodic
from orchestrator.jobs import service as jobs
from orchestrator.jobs.worker_runtime import Runtime
from orchestrator.workers import service as workers

log = logging.getLogger(__name__)


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
