"""Failure classes of a native run (``coverfarm.device_result.DeviceFailure``) from how an
``executor_runner`` process ended and what it printed: refused at load, crashed (its signal and last
lines) or out of time, with the runtime's own message kept in full and shortened for the cause."""

from __future__ import annotations

import signal
from collections.abc import Sequence

from coverfarm.device_result import DeviceFailure, FailureKind
from coverfarm.device_words import short_message
from gpu_runner.native.log import LOG_LINE, NOT_REGISTERED

TAIL_LINES = 40  # of a failed process's output kept in its failure


def _strip(line: str) -> str:
    match = LOG_LINE.match(line.rstrip())
    return match.group("message").strip() if match else line.strip()


def runtime_message(lines: Sequence[str]) -> str:
    """The runtime's own account of a failure, from a process's output: a C++ exception's ``what()``
    (the Vulkan backend's checks throw), then fatal and error log lines, else the last line."""
    found: list[str] = []
    for line in lines:
        text = line.strip()
        if "what():" in text:
            found.append(text.split("what():", 1)[1].strip())
        elif (match := LOG_LINE.match(text)) and (match.group("level") or "") in ("E", "F"):
            found.append(match.group("message").strip())
        elif " is false!" in text or text.startswith("terminate called") or NOT_REGISTERED.search(text):
            found.append(_strip(text))
    found = [text for text in dict.fromkeys(found) if text]
    if found:
        return "; ".join(found)
    meaningful = [line.strip() for line in lines if line.strip()]
    return _strip(meaningful[-1]) if meaningful else "no error logged"


def classify_exit(
    kind: FailureKind, program: str, returncode: int | None, lines: Sequence[str], what: str
) -> DeviceFailure:
    """A failure of class ``kind`` from how a process ended and what it printed."""
    message = runtime_message(lines)
    signal_number = -returncode if returncode is not None and returncode < 0 else None
    exit_status = returncode if returncode is not None and returncode >= 0 else None
    how = (
        f"signal {signal_number} ({_signal_name(signal_number)})"
        if signal_number is not None
        else f"status {exit_status}"
    )
    said = f"program {program} {what} ({how})" if kind == "crashed" else f"program {program} {what}"
    cause = f"{said}: {short_message(message)}"
    return DeviceFailure(
        kind=kind,
        cause=_one_line(cause),
        program=program,
        message=message,
        signal=signal_number,
        exit_status=exit_status,
        last_lines=[line.rstrip() for line in lines[-TAIL_LINES:]],
    )


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number or 0).name
    except ValueError:
        return "unknown"


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
