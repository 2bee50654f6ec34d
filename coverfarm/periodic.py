"""A call repeated on a daemon thread at a fixed interval: the heartbeats of CPU workers, their jobs,
device runners and their jobs (no torch: the orchestrator side and the runner both import it)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    """Calls ``beat`` every ``interval_s`` seconds between ``start`` and ``stop`` (or inside ``with``).

    ``beat`` must handle its own errors: an exception ends the thread, and with it the beats.
    """

    def __init__(
        self, beat: Callable[[], None], interval_s: float, name: str, join_timeout_s: float | None = None
    ) -> None:
        self._beat, self._interval, self._join_timeout = beat, interval_s, join_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._join_timeout)

    def __enter__(self) -> Periodic:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._beat()
