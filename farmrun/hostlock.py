"""One host-level lock that keeps timings apart from CPU stages and from each other (``fcntl.flock``).

Two files: the lock itself (``settings.timing_lock_path``) and a gate beside it (``<lock>.gate``).

- A **stage** (trace, lower, a repro, an eager baseline's build: anything that loads the CPU for long)
  passes the gate, then holds the lock *shared* until it ends; stages never wait for each other.
- A **timing** (a device run's timed chunks, an eager baseline's) takes the gate and keeps it, then takes
  the lock *exclusive*: it waits for the stages that already run to end, and because it holds the gate,
  no new stage starts meanwhile. The worker's queue stops between stages, never in one; the timing then
  runs alone and releases both. Two timings on one host queue at the gate.

A stage can run for 800 s or more (two phases of ``COVERFARM_STAGE_TIMEOUT_S`` each, more on
``lower.long``), so a timing waits at most ``timing_lock_wait_s``; past it, it times anyway and records
that it was not isolated (``Isolation.acquired`` false), which withholds its speed-up. A stage waits for a
timing without a bound: a timing is bounded by its rules' ``max_s`` and its process's timeout, and a
lock dies with the process holding it.

Every process that uses the same lock file is kept apart: ``coverfarm up`` (its worker and its local
runner share ``$COVERFARM_HOME``) needs nothing more; a worker and a runner started with different homes
on one host must name the same ``COVERFARM_TIMING_LOCK``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from coverfarm.device_result import Isolation

POLL_S = 0.2


def open_lock_file(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


def take_lock(fd: int, mode: int, deadline: float | None) -> bool:
    """flock ``fd`` in ``mode``; by ``deadline`` (monotonic) or, without one, however long it takes."""
    if deadline is None:
        fcntl.flock(fd, mode)
        return True
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


class HostLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.gate = path.with_name(path.name + ".gate")

    @contextlib.contextmanager
    def stage(self) -> Iterator[None]:
        """Hold the lock shared for a CPU stage: after any timing that holds or waits for it."""
        gate, lock = open_lock_file(self.gate), open_lock_file(self.path)
        try:
            take_lock(gate, fcntl.LOCK_EX, None)  # held by a timing that waits or runs: wait behind it
            take_lock(lock, fcntl.LOCK_SH, None)
            fcntl.flock(gate, fcntl.LOCK_UN)  # let the next stage (or timing) through the gate
            yield
        finally:
            os.close(lock)
            os.close(gate)

    @contextlib.contextmanager
    def timing(self, wait_s: float) -> Iterator[Isolation]:
        """Hold the lock exclusive while timing; waits at most ``wait_s`` for the stages that run.

        The yielded ``Isolation`` gets ``held_to`` when the block ends."""
        start = time.monotonic()
        deadline = start + wait_s
        gate, lock = open_lock_file(self.gate), open_lock_file(self.path)
        try:
            acquired = take_lock(gate, fcntl.LOCK_EX, deadline) and take_lock(lock, fcntl.LOCK_EX, deadline)
            isolation = Isolation(
                lock=str(self.path),
                acquired=acquired,
                waited_s=round(time.monotonic() - start, 3),
                held_from=datetime.now(UTC),
            )
            try:
                yield isolation
            finally:
                isolation.held_to = datetime.now(UTC)
        finally:
            os.close(lock)  # closing releases whatever this process held
            os.close(gate)


def held(lock: HostLock | None, wait_s: float) -> contextlib.AbstractContextManager[Isolation | None]:
    """``lock.timing(wait_s)``, or nothing (``None``) without a lock."""
    return lock.timing(wait_s) if lock is not None else contextlib.nullcontext()


def host_lock(settings_path: Path | None = None) -> HostLock:
    """The host's lock: ``settings_path``, else the one the farm's settings name."""
    if settings_path is not None:
        return HostLock(settings_path)
    from coverfarm.settings import get_settings

    return HostLock(get_settings().timing_lock_path)
