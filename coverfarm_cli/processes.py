"""Child processes started in a process group of their own (``start_new_session=True``): starting one
that stops when its parent goes, stopping one with its whole group, and turning SIGTERM and SIGHUP into
the same orderly exit as Ctrl-C.

Every stop is bounded: a group asked to stop (SIGTERM) that is still there after ``STOP_GRACE_S`` is
SIGKILLed, whether its parent stops it or the parent was killed outright and the child sees it gone. A
Celery worker's warm shutdown, which lets a running job finish, never holds a stop longer than that."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

# Set by ``start_child``; read (and removed, so grandchildren do not inherit it) by ``die_with_parent``.
PARENT_ENV = "COVERFARM_STOP_WITH_PARENT"
_PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long a process group asked to stop has before it is SIGKILLed.
STOP_GRACE_S = 10.0


def start_child(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``command`` in a process group of its own, to be stopped with ``stop_group``. Should this
    process end without stopping it (SIGKILL), the child gets SIGTERM from the kernel and its group is
    SIGKILLed ``STOP_GRACE_S`` later (``die_with_parent``, which ``coverfarm``'s entry point runs)."""
    env = {**(kwargs.pop("env", None) or os.environ), PARENT_ENV: str(os.getpid())}
    return subprocess.Popen(command, start_new_session=True, env=env, **kwargs)


def die_with_parent() -> None:
    """In a child ``start_child`` started: ask Linux for SIGTERM when the parent ends, and exit at once
    when it already has (it ended before the request was made); should the SIGTERM not end this
    process's group within ``STOP_GRACE_S`` (a worker finishing its job), SIGKILL it
    (``watch_parent``). Elsewhere, and when not started so, nothing."""
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if str(os.getppid()) != parent:
        raise SystemExit(f"coverfarm: the process that started this one ({parent}) is gone")
    watch_parent(int(parent))


def watch_parent(parent: int, grace_s: float = STOP_GRACE_S, every_s: float = 0.5) -> threading.Thread:
    """A daemon thread that, once ``parent`` is no longer this process's parent, waits ``grace_s`` and
    SIGKILLs this process's group (the group it leads, as ``start_child`` started it; else only this
    process). Forked children (a Celery pool's) do not inherit the thread: the group's SIGKILL is theirs."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        time.sleep(grace_s)
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="coverfarm-parent-watch", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP raise SystemExit(128 + signal) in the main thread, so ``finally``
    blocks run and stop what was started; a second signal during that clean-up is ignored."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def stop_group(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's whole process group, then SIGKILL it if it is still there after ``grace_s``."""
    stop_groups([process], grace_s)


def stop_groups(processes: Sequence[subprocess.Popen[bytes]], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process groups of ``processes`` (each led by its process) all at once, wait up to
    ``grace_s`` for them together, then SIGKILL each group: what its leader left behind (a Celery pool
    child that took a job while its worker shut down) goes with it."""
    for process in processes:
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def _signal_group(leader: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(leader, signum)
