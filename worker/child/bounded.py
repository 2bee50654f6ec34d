"""Run a stage in a child process that is killed when one of its phases runs out of time.

The child writes an event log (``events.py``); ``{"event": "phase", "phase": NAME}`` switches the phase
whose clock is running. Each phase has its own bound over its cumulative time, so that a lowering that
never ends still leaves the coverage numbers that partitioning produced before it. The child runs in its
own process group and the whole group is killed, so no grandchild outlives the bound; on Linux the child
is also killed by the kernel when the process that started it dies (a SIGKILLed worker leaves none).

The parent also records the child's peak resident memory at the end of each phase: Linux's ``VmHWM`` in
``/proc/<pid>/status`` (the high-water mark of the resident set), sampled while the child runs
(``peak_rss_bytes``), and the exact ``ru_maxrss`` that ``wait4`` returns when the child is reaped.
Elsewhere there are no per-phase figures.

A CPU stage (trace, lower, repros) runs with the host's timing lock held shared (``host_lock``,
``farmrun.hostlock``): it starts only once no device run or eager baseline is timing on this host, or
waiting to, and none starts timing until it ends. Its bounds count from its start, not from the wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farmrun.hostlock import HostLock
from worker.child.events import read_events

POLL_S = 0.2
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def peak_rss_bytes(pid: int) -> int | None:
    """The process's resident-set high-water mark so far (None when it is gone or not on Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    return None  # a zombie has no memory lines


def _die_with_parent(parent: int) -> None:
    """preexec_fn: ask the kernel to SIGKILL this child when the thread that forked it dies.

    start_new_session takes the child out of the worker's process group, so a SIGKILL of the worker
    (or of its whole group) would otherwise leave it running its stage to the end. Linux only; elsewhere
    the child keeps running until its stage ends.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died between fork and prctl: then the signal will never come.
    if os.getppid() != parent:
        os._exit(1)


@dataclass
class StageRun:
    """How a child ended, with every event it logged."""

    events: list[dict[str, Any]]
    returncode: int | None
    timed_out_phase: str | None  # the phase whose bound ran out, if any
    phase_seconds: dict[str, float] = field(default_factory=dict)
    log_tail: str = ""
    # Peak resident bytes of the child by the end of each phase it entered (cumulative: a later phase
    # includes the earlier ones); missing where it could not be read.
    phase_peak_bytes: dict[str, int] = field(default_factory=dict)


def run_bounded(
    module: str,
    args: Sequence[str],
    events_path: Path,
    bounds: Mapping[str, float],
    first_phase: str,
    log_path: Path,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    env: Mapping[str, str] | None = None,
    host_lock: HostLock | None = None,
) -> StageRun:
    """Run ``python -m module args`` with per-phase time bounds (seconds); the child's stdout and
    stderr go to ``log_path``. With ``host_lock``, the child runs as a stage of that lock."""
    # A stage's bounds count from its start: waiting for a timing on this host is not the stage's time.
    with host_lock.stage() if host_lock is not None else contextlib.nullcontext():
        events_path.unlink(missing_ok=True)
        with log_path.open("wb") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", module, *args, "--events", str(events_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
                env=None if env is None else {**os.environ, **env},
            )
        phase, phase_start = first_phase, time.monotonic()
        spent: dict[str, float] = {}
        peaks: dict[str, int] = {}  # of the phases that ended
        # (wall clock, peak) of the samples not yet charged to a phase: a phase event is read after the
        # samples taken since it was written, so a sample belongs to the phase its time falls in.
        samples: list[tuple[float, int]] = []
        exit_peak: int | None = None
        seen = 0
        timed_out: str | None = None
        try:
            while True:
                samples.append((time.time(), peak_rss_bytes(child.pid) or 0))
                returncode, exit_peak = _reap(child)
                events = read_events(events_path)
                now = time.monotonic()
                for event in events[seen:]:
                    if on_event is not None:
                        on_event(event)
                    if event["event"] == "phase" and event["phase"] != phase:
                        spent[phase] = spent.get(phase, 0.0) + now - phase_start
                        ended = _before(samples, event)
                        peaks[phase] = max([peaks.get(phase, 0), *(peak for _, peak in ended)])
                        samples = samples[len(ended) :]
                        phase, phase_start = event["phase"], now
                seen = len(events)
                if returncode is not None:
                    break
                if spent.get(phase, 0.0) + now - phase_start > bounds.get(phase, float("inf")):
                    timed_out = phase
                    _kill_group(child)
                    break
                time.sleep(POLL_S)
        finally:
            if child.poll() is None:
                _kill_group(child)
        spent[phase] = spent.get(phase, 0.0) + time.monotonic() - phase_start
        peaks[phase] = max([peaks.get(phase, 0), exit_peak or 0, *(peak for _, peak in samples)])
        events = read_events(events_path)
        if on_event is not None:
            for event in events[seen:]:
                on_event(event)
        return StageRun(
            events=events,
            returncode=child.returncode,
            timed_out_phase=timed_out,
            phase_seconds=spent,
            log_tail=_tail(log_path),
            phase_peak_bytes={name: value for name, value in peaks.items() if value},
        )


def _before(samples: list[tuple[float, int]], event: dict[str, Any]) -> list[tuple[float, int]]:
    """The leading samples taken before ``event`` was written (its ``t``, the same wall clock). A sample
    taken after a phase event may already hold what the next phase allocated first; peaks are
    cumulative, so it counts for the next phase only, and the phase that ended keeps the last sample
    taken inside it. An event without a time takes every sample (it cannot be placed)."""
    written = float(event.get("t", float("inf")))
    count = 0
    while count < len(samples) and samples[count][0] < written:
        count += 1
    return samples[:count]


def _reap(child: subprocess.Popen[bytes]) -> tuple[int | None, int | None]:
    """``child.poll()``, but through ``wait4`` so that an exit also gives the child's exact peak
    resident bytes (``ru_maxrss``, kB on Linux)."""
    if child.returncode is not None:
        return child.returncode, None
    try:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: Popen knows the code
        return child.poll(), None
    if pid == 0:
        return None, None
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss * 1024 if sys.platform.startswith("linux") else None


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
