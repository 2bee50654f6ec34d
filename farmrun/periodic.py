"""A call repeated on a daemon thread at a fixed interval: the heartbeats of CPU workers, their jobs,
device runners and their jobs (no torch: the orchestrator side and the runner both import it)."""

from __future__ import annotations

import logging
import threading
import time
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


class Outage:
    """How long a peer (the orchestrator, the database) has not answered, and when to try it next.

    Tried every time at first; once it has been silent for ``patience_s`` it is said once (an error
    line: what is gone and since when) and tried less and less often, doubling the wait up to
    ``max_wait_s``, each try a warning; its return is said too. ``due`` tells a periodic caller whether to
    try now.
    """

    def __init__(
        self,
        what: str,
        patience_s: float,
        log: logging.Logger,
        max_wait_s: float = 300.0,
        first_wait_s: float = 5.0,
    ) -> None:
        self.what, self.patience_s, self.log, self.max_wait_s = what, patience_s, log, max_wait_s
        self.first_wait_s = first_wait_s
        self.since: float | None = None  # monotonic time of the first failure in a row
        self.wait_s = 0.0
        self._next = 0.0
        self._said = False

    @property
    def gone(self) -> bool:
        """Silent for longer than ``patience_s``."""
        return self.since is not None and time.monotonic() - self.since >= self.patience_s

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def failed(self, error: object) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if not self.gone:
            return
        self.wait_s = min(max(self.wait_s * 2, self.first_wait_s), self.max_wait_s)
        self._next = now + self.wait_s
        silent = now - self.since
        if not self._said:
            self._said = True
            self.log.error("%s has not answered for %.0f s (%s); waiting, next try in %.0f s",
                           self.what, silent, error, self.wait_s)  # fmt: skip
        else:
            self.log.warning("%s still not answering after %.0f s (%s); next try in %.0f s",
                             self.what, silent, error, self.wait_s)  # fmt: skip

    def succeeded(self) -> None:
        if self._said and self.since is not None:
            self.log.warning("%s answers again after %.0f s", self.what, time.monotonic() - self.since)
        self.since, self.wait_s, self._next, self._said = None, 0.0, 0.0, False
