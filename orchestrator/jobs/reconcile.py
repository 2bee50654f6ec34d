"""The reconciler's pass over the jobs (``reconcile``, run by ``orchestrator.reconciler``): attempts
whose worker went silent lost and their jobs sent again, queued jobs whose message seems lost (never
sent, not started long after their send, or sent before the broker last started) sent again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from coverfarm.settings import Settings
from orchestrator.jobs import repository
from orchestrator.jobs.sending import _send
from orchestrator.jobs.service import _lose_attempt
from orchestrator.models import utcnow

log = logging.getLogger(__name__)

# How long after a message's send its job may be stamped sent (``orchestrator.db.mark_sent``).
SEND_STAMP_MARGIN = timedelta(seconds=2)


def reconcile(
    session: Session,
    settings: Settings,
    unsent_before: set[int] | None = None,
    broker_since: datetime | None = None,
) -> list[int]:
    """Re-queue jobs whose worker went silent and re-send queued jobs whose message seems lost.

    The jobs table, not the broker, decides what still has to run: a SIGKILLed worker leaves its
    message unacknowledged in Redis until the visibility timeout (hours), so waiting for the broker
    would stall the cell. A duplicate message that does arrive later is dropped by ``start``.

    A queued job the broker never took (``sent_at IS NULL``: its send failed after the commit) is sent
    when the previous pass saw it so too: ``unsent_before`` holds those ids and is updated in place. The
    one pass of grace leaves alone a job whose sender has committed and is sending right now (another
    reconciler's, say). None: send every such job at once.

    ``broker_since`` is the moment since which the broker holds what it was sent (its start, or a
    failover: ``orchestrator.broker``): a queued job sent before it has no message any more and is sent
    again now, not ``resend_after_s`` after its send.
    """
    now = utcnow()
    resent: list[int] = []
    for job in repository.silent_running(session, now - timedelta(seconds=settings.heartbeat_timeout_s)):
        if _lose_attempt(
            session, job, f"{job.worker} stopped heartbeating (attempt {job.attempt})", settings
        ):
            _send(session, job)
            resent.append(job.id)
    cutoff = now - timedelta(seconds=settings.resend_after_s)
    if broker_since is not None:
        # A job is stamped once the broker took its message, a moment after the send: one sent just
        # before the broker went may carry a stamp just after it came back.
        cutoff = max(cutoff, min(broker_since + SEND_STAMP_MARGIN, now))
    unsent = set()
    emptied: list[int] = []
    for job in repository.unsent_queued(session, cutoff):
        if job.id in resent:  # re-queued just above, its message already in the outbox
            continue
        if job.sent_at is None:
            if unsent_before is not None and job.id not in unsent_before:
                unsent.add(job.id)
                continue
            log.warning("job %s has no message on the broker (its send failed); sending it", job.id)
        elif broker_since is not None and job.sent_at < broker_since + SEND_STAMP_MARGIN:
            emptied.append(job.id)
        else:
            log.warning("job %s sent at %s and not started; sending it again", job.id, job.sent_at)
        _send(session, job)
        resent.append(job.id)
    if emptied:
        log.warning(
            "the broker holds messages since %s only: sending again %d queued job(s) sent before (%s)",
            broker_since, len(emptied), _some(emptied),
        )  # fmt: skip
    if unsent_before is not None:
        unsent_before.clear()
        unsent_before.update(unsent)
    return resent


def _some(ids: list[int], shown: int = 10) -> str:
    """``ids`` for a log line: the first ``shown`` of them, and how many more."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(map(str, ids[:shown])) + more
