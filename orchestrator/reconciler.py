"""The reconciler loop the orchestrator runs: re-queues jobs the broker alone would leave stuck (a
silent worker's, and each queued one whose message a restarted broker lost), and marks workers and
device runners that stopped heartbeating offline.

It sits above the domains it calls on (jobs, workers, devices), which never import it; the app starts it
(``orchestrator.app``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from celery import Celery
from sqlalchemy.orm import Session

from coverfarm.settings import Settings
from orchestrator.broker import BrokerWatch
from orchestrator.db import unit_of_work
from orchestrator.devices.service import mark_silent_offline as mark_runners_offline
from orchestrator.jobs.reconcile import reconcile
from orchestrator.workers.service import mark_silent_offline

log = logging.getLogger(__name__)


def reconcile_once(
    sessions: Callable[[], Session],
    celery: Celery,
    settings: Settings,
    unsent: set[int] | None = None,
    broker: BrokerWatch | None = None,
) -> list[int]:
    """One pass; ``unsent``: the never-sent jobs the previous pass saw (``jobs.reconcile.reconcile``);
    ``broker``: asked since when the broker holds what it was sent (a restart lost the rest)."""
    since = broker.holds_since() if broker is not None else None
    with unit_of_work(sessions, celery) as session:
        resent = reconcile(session, settings, unsent, since)
        offline = mark_silent_offline(session, settings)
        runners_offline = mark_runners_offline(session, settings)
    if offline:
        log.warning("reconciler marked workers offline: %s", offline)
    if runners_offline:
        log.warning("reconciler marked device runners offline: %s", runners_offline)
    if resent:
        log.warning("reconciler re-sent jobs %s", resent)
    return resent


class Reconciler:
    def __init__(self, sessions: Callable[[], Session], celery: Celery, settings: Settings) -> None:
        self._sessions = sessions
        self._celery = celery
        self._settings = settings
        self._stop = threading.Event()
        self._unsent: set[int] = set()
        self._broker = BrokerWatch(celery)
        self._thread = threading.Thread(target=self._run, name="coverfarm-reconciler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._settings.reconcile_interval_s):
            try:
                reconcile_once(self._sessions, self._celery, self._settings, self._unsent, self._broker)
            except Exception:
                log.exception("reconciler pass failed; trying again next interval")
        self._broker.close()
