"""The event log a stage child process writes, one JSON object per line, and its parent reads.

A child reports what it measured as soon as it has it, so that a child killed at its time bound (or
one that crashes inside ExecuTorch) still leaves everything measured before that moment.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from coverfarm.result import SUBPROCESS_WORDS


class EventLog:
    """Append-only writer, flushed after every event (the parent may kill us at any moment)."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _type_name(error: BaseException) -> str:
    return f"{type(error).__module__}.{type(error).__qualname__}".removeprefix("builtins.")


# A failed subprocess's own words: at most this many of the last lines it left in the stage's log.
OUTPUT_LINES = 6
OUTPUT_TAIL_BYTES = 16_384
_RECORDS = ("DEBUG:", "INFO:")


def _log_tail(fd: int = 2) -> str:
    """The end of what this process wrote to ``fd`` when it is a regular file (a stage child's stdout and
    stderr are its stage log), else nothing."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with open(f"/proc/self/fd/{fd}", "rb") as log:
            start = max(0, log.seek(0, os.SEEK_END) - OUTPUT_TAIL_BYTES)
            log.seek(start)
            tail = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    # Read from the middle of the log, the first line is a piece of one.
    return tail.partition("\n")[2] if start > 0 else tail


def subprocess_output(error: BaseException) -> str | None:
    """What a failed subprocess said: its captured stderr (or output) when the caller captured it, else
    the last lines it wrote to this process's stderr, the stage's log, just before the error (ExecuTorch
    runs ``flatc`` with ``check=True`` and captures nothing, so its CalledProcessError says only "returned
    non-zero exit status 1")."""
    if not isinstance(error, subprocess.CalledProcessError):
        return None
    sys.stderr.flush()
    captured = error.stderr or error.output
    text = captured.decode("utf-8", "replace") if isinstance(captured, bytes) else captured or _log_tail()
    # The stage's own log records (ExecuTorch's INFO lines about each op) are not the subprocess's.
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(_RECORDS)]
    return " / ".join(lines[-OUTPUT_LINES:]) or None


def error_fields(error: BaseException) -> dict[str, str]:
    """An ``error`` event's fields for ``error``: its type, its message with its notes and the chain of
    exceptions it was raised from or while handling (torch's ``export.load`` only says "check the
    warnings above" and keeps the real cause in its context), a failed subprocess's own words
    (``subprocess_output``), and the traceback."""
    lines = [str(error), *getattr(error, "__notes__", [])]
    said = subprocess_output(error)
    if said is not None:
        lines.append(f"{SUBPROCESS_WORDS}{said}")
    seen = {id(error)}
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        lines.append(f"caused by {_type_name(cause)}: {cause}")
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return {
        "type": _type_name(error),
        "message": "\n".join(lines),
        "traceback": "".join(traceback.format_exception(error)),
    }


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the log (a line cut short by a kill is ignored)."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
