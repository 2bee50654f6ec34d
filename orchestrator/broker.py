"""Since when the broker holds the farm's messages, as the broker itself says.

A Redis without persistence that restarts comes back empty, and so does a failover to a server that had
not taken every write: each message sent before that moment is gone. Redis says when it started
(``INFO server``: ``uptime_in_seconds``) and which server it is (``run_id``); ``BrokerWatch`` turns that
into the moment since which the broker holds what it was sent, and the reconciler re-sends every queued
job sent before it (``jobs.service.reconcile``). No state is kept outside this process: a restart seen
by no orchestrator (both down together) is still found, by the broker's uptime, on the next one's first
pass.

The embedded default's filesystem broker keeps its messages in files, which outlive its processes: it
has no such moment (None).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from kombu import Connection

from orchestrator.models import utcnow

log = logging.getLogger(__name__)


class BrokerWatch:
    """Asks the broker, once a reconciler pass, since when it holds what it was sent."""

    def __init__(self, celery: Celery) -> None:
        self._celery = celery
        self._connection: Connection | None = None
        self._run_id: str | None = None
        self._switched_at: datetime | None = None
        self._serverless = False  # the transport has no server to ask (the filesystem broker)

    def holds_since(self) -> datetime | None:
        """The broker's start, or the moment this watch first saw another server answer (a failover,
        whose new server may have started long ago); None when the broker cannot say (not Redis) or
        does not answer now (the next pass asks again)."""
        try:
            info = self._server_info()
        except Exception as error:
            log.debug("the broker did not say when it started: %s: %s", type(error).__name__, error)
            return None
        if info is None:
            return None
        now = utcnow()
        run_id = str(info.get("run_id", ""))
        if self._run_id is not None and run_id != self._run_id:
            log.warning("the broker is another server now (run_id %s, was %s)", run_id[:8], self._run_id[:8])
            self._switched_at = now
        self._run_id = run_id
        started = now - timedelta(seconds=float(info.get("uptime_in_seconds", 0)))
        return max(started, self._switched_at) if self._switched_at is not None else started

    def _server_info(self) -> dict[str, Any] | None:
        if self._serverless:
            return None
        if self._connection is None:
            self._connection = self._celery.connection_for_read()
        try:
            client = getattr(self._connection.default_channel, "client", None)
            if client is None or not hasattr(client, "info"):
                self._serverless = True
                self.close()
                return None
            info: dict[str, Any] = client.info("server")
            return info
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.release()
            except Exception as error:
                log.debug("closing the broker connection: %s", error)
            self._connection = None
