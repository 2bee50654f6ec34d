"""Fan-out of stored events to SSE clients, woken by Postgres LISTEN/NOTIFY across processes.

One thread per orchestrator process listens on the ``coverfarm_events`` channel (a trigger on ``events``
notifies inside the writing transaction, so the wake-up arrives exactly at commit, from whichever process
wrote), reads the new rows and hands them to each subscriber's asyncio queue. The rows, not the
notifications, carry the data: a notification lost across a reconnect costs at most the safety-net
interval, never an event.

SQLite (the embedded default) has no cross-process signal, so there the thread reads the table
every quarter second instead; it is one indexed query on a local file.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from orchestrator.events.repository import CHANNEL, after, last_id
from orchestrator.models import Event

log = logging.getLogger(__name__)

SAFETY_NET_S = 5.0
WAIT_S = 1.0  # how long one wait for a notification blocks, so that stop() returns promptly
SQLITE_INTERVAL_S = 0.25
BATCH = 500


def event_data(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "kind": event.kind,
        "sweep_id": event.sweep_id,
        "cell_id": event.cell_id,
        "job_id": event.job_id,
        "payload": event.payload,
        "created_at": event.created_at.isoformat(),
    }


@dataclass(eq=False)
class Subscriber:
    loop: asyncio.AbstractEventLoop
    sweep_id: int | None
    start: int  # events up to this id were stored before the subscription (replayed on request only)
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)


class EventHub:
    def __init__(self, sessions: Callable[[], Session], database_url: str) -> None:
        self._sessions = sessions
        url = make_url(database_url)
        self._listen_dsn = (
            url.set(drivername="postgresql").render_as_string(hide_password=False)
            if url.get_backend_name() == "postgresql"
            else None
        )
        self._lock = threading.Lock()
        self._subscribers: set[Subscriber] = set()
        self._last = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._sessions() as session:
            self._last = last_id(session)
        self._thread = threading.Thread(target=self._run, name="coverfarm-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_S + 1)

    def subscribe(self, loop: asyncio.AbstractEventLoop, sweep_id: int | None) -> Subscriber:
        with self._lock:
            subscriber = Subscriber(loop=loop, sweep_id=sweep_id, start=self._last)
            self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.discard(subscriber)

    def backlog(self, since: int, until: int, sweep_id: int | None) -> list[dict[str, Any]]:
        """Stored events in (since, until], for a client reconnecting with Last-Event-ID."""
        with self._sessions() as session:
            events = after(session, since, sweep_id, limit=10 * BATCH)
            return [event_data(event) for event in events if event.id <= until]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._listen_dsn is None:
                    self._drain()
                    self._stop.wait(SQLITE_INTERVAL_S)
                else:
                    self._listen(self._listen_dsn)
            except Exception:
                log.exception("event listener failed; retrying in a second")
                self._stop.wait(1.0)

    def _listen(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self._drain()  # whatever was committed before LISTEN took effect
            drained = time.monotonic()
            while not self._stop.is_set():
                woken = any(True for _ in conn.notifies(timeout=WAIT_S, stop_after=1))
                if woken or time.monotonic() - drained > SAFETY_NET_S:
                    self._drain()
                    drained = time.monotonic()

    def _drain(self) -> None:
        while True:
            with self._sessions() as session:
                events = [event_data(event) for event in after(session, self._last, limit=BATCH)]
            with self._lock:
                for data in events:
                    self._last = max(self._last, data["id"])
                    for subscriber in self._subscribers:
                        if data["id"] > subscriber.start and subscriber.sweep_id in (None, data["sweep_id"]):
                            subscriber.loop.call_soon_threadsafe(subscriber.queue.put_nowait, data)
            if len(events) < BATCH:
                return
