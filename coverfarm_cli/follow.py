"""Following a sweep to its end (``coverfarm sweep submit --wait``) from its event stream.

The stream says when something changed; the sweep's light summary (``GET /api/sweeps/{id}/summary``:
counts, no cell) says whether it is done. The summary is read once the stream is open (a change
before that arrives as an event), then only after an event that can end the sweep (a job ended, a
device result, the sweep cancelled; never a job that started), and at most once every ``interval_s``:
events that arrive in between are folded into the next read. So a sweep of ten thousand cells costs
a few summaries a second at most, never a read of every cell per event. A stream quiet for
``quiet_s`` asks ``done(True)``: nothing moves in a sweep whose every pending cell waits for a worker
that is not there, and the caller may look for that then.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

# Job statuses that can leave nothing pending; "queued" and "running" never end a sweep.
ENDING = frozenset({"ok", "slow", "failed", "cancelled"})
INTERVAL_S = 1.0
QUIET_S = 10.0


def could_end(event: dict[str, Any]) -> bool:
    """Whether the sweep can be done after this event (of the stream's ``data:`` lines)."""
    if event.get("kind") == "job":
        return (event.get("payload") or {}).get("status") in ENDING
    return event.get("kind") in ("sweep", "device")


class _Stream:
    """The sweep's event stream, read on a thread of its own into a queue: ("open", None) once the
    response starts, ("event", data) per event, then ("gone", error) when it ends for any reason."""

    def __init__(self, url: str, sweep_id: int) -> None:
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=60))
        self._thread = threading.Thread(target=self._read, args=(url, sweep_id), daemon=True)
        self._thread.start()

    def _read(self, url: str, sweep_id: int) -> None:
        try:
            with self._client.stream("GET", f"{url}/api/events", params={"sweep": sweep_id}) as stream:
                stream.raise_for_status()
                self.items.put(("open", None))
                for line in stream.iter_lines():
                    if line.startswith("data:"):
                        self.items.put(("event", json.loads(line.removeprefix("data:"))))
            self.items.put(("gone", "the stream ended"))
        except (httpx.HTTPError, ValueError) as error:
            self.items.put(("gone", error))

    def close(self) -> None:
        self._client.close()  # ends the read on its thread


def follow(
    url: str,
    sweep_id: int,
    done: Callable[[bool], bool],
    interval_s: float = INTERVAL_S,
    quiet_s: float = QUIET_S,
) -> None:
    """Return once ``done(quiet)`` (a read of the sweep's summary; ``quiet`` when no event came for
    ``quiet_s``) says so, reconnecting the stream when it drops."""
    while True:
        stream = _Stream(url, sweep_id)
        try:
            kind, error = stream.items.get()
            if kind == "open":
                # Subscribed first, then read the state: a change in between arrives as an event.
                if done(False):
                    return
                error = _until_done(stream, done, interval_s, quiet_s)
                if error is None:
                    return
        finally:
            stream.close()
        print(f"coverfarm: event stream interrupted ({error}); reconnecting", file=sys.stderr)
        time.sleep(1)


def _until_done(
    stream: _Stream, done: Callable[[bool], bool], interval_s: float, quiet_s: float
) -> object | None:
    """None once the sweep is done; what ended the stream, when it ends first."""
    last_read = time.monotonic()
    owed = False  # an event that can end the sweep came after the last read
    while True:
        wait = quiet_s if not owed else max(0.0, last_read + interval_s - time.monotonic())
        try:
            kind, data = stream.items.get(timeout=wait)
        except queue.Empty:
            if not owed:  # quiet: nothing happened for quiet_s
                last_read = time.monotonic()
                if done(True):
                    return None
                continue
            kind, data = "due", None
        if kind == "gone":
            return data
        if kind == "event":
            owed = owed or could_end(data)
            if not owed or time.monotonic() - last_read < interval_s:
                continue
        if owed:
            owed = False
            last_read = time.monotonic()
            if done(False):
                return None
