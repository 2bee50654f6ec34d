"""Child processes started in a process group of their own (``start_new_session=True``): starting one
that stops when its parent goes, stopping one with its whole group, and turning SIGTERM and SIGHUP into
the same orderly exit as Ctrl-C."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

# Set by ``start_child``; read (and removed, so grandchildren do not inherit it) by ``die_with_parent``.
PARENT_ENV = "COVERFARM_STOP_WITH_PARENT"
_PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def start_child(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``command`` in a process group of its own, to be stopped with ``stop_group``. Should this
    process end without stopping it (SIGKILL), the child gets SIGTERM from the kernel (``die_with_parent``,
    which ``coverfarm``'s entry point runs)."""
    env = {**(kwargs.pop("env", None) or os.environ), PARENT_ENV: str(os.getpid())}
    return subprocess.Popen(command, start_new_session=True, env=env, **kwargs)


def die_with_parent() -> None:
    """In a child ``start_child`` started: ask Linux for SIGTERM when the parent ends, and exit at once
    when it already has (it ended before the request was made). Elsewhere, and when not started so,
    nothing."""
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if str(os.getppid()) != parent:
        raise SystemExit(f"coverfarm: the process that started this one ({parent}) is gone")


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


def stop_group(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM the child's whole process group, then SIGKILL it if it is still there after ``grace_s``."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
