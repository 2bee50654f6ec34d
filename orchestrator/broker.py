"""Since when the broker holds the farm's messages, as the broker itself says.

A Redis without persistence that restarts comes back empty, and so does a failover to a server that had
not taken every write: each message sent before that moment is gone. Redis says when it started
(``INFO server``: ``uptime_in_seconds``) and which server it is (``run_id``); ``BrokerWatch`` turns that
into the moment since which the broker holds what it was sent, and the reconciler re-sends every queued
job sent before it (``jobs.reconcile.reconcile``). No state is kept outside this process: a restart seen
by no orchestrator (both down together) is still found, by the broker's uptime, on the next one's first
pass.

The embedded default's filesystem broker keeps its messages in files, which outlive its processes: it
has no such moment (None).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, cast

import redis
from celery import Celery

from orchestrator.models import utcnow

log = logging.getLogger(__name__)

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
ASK_TIMEOUT_S = 5.0


class BrokerWatch:
    """Asks the broker, once a reconciler pass, since when it holds what it was sent."""

    def __init__(self, celery: Celery) -> None:
        self._celery = celery
        self._client: redis.Redis | None = None
        self._run_id: str | None = None
        self._switched_at: datetime | None = None

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
        if self._client is None:
            url = str(self._celery.conf.broker_url or "")
            if not url.startswith(REDIS_SCHEMES):
                return None  # a transport without a server of its own (the filesystem broker)
            # Bounded: a broker behind a link that is down must not hold the reconciler's pass.
            self._client = redis.Redis.from_url(
                url, socket_timeout=ASK_TIMEOUT_S, socket_connect_timeout=ASK_TIMEOUT_S
            )
        return cast(dict[str, Any], self._client.info("server"))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
