"""What an ``executor_runner`` process says about itself: ExecuTorch's PAL log lines on its stderr
(``I 00:00:00.012345 executorch:executor_runner.cpp:431] Model loaded in 12.3 ms.``), read into its load
time, each execution's time or only their total (older builds), the backends it found unregistered, a
bundled program's verdict, and its error messages (``RunnerLog``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# ExecuTorch's default PAL log line: level, time since start, "executorch:<file>:<line>] message".
# Board PALs sometimes drop the time or bracket the location; the pip wheel's pybindings print
# "[method.cpp:85] message" with no level. All are accepted.
LOG_LINE = re.compile(
    r"^(?:(?P<level>[DIEF]) (?:[0-9:.]+ )?\[?executorch:[^\]]*\]|\[[\w.]+:\d+\]) (?P<message>.*)$"
)
_LOADED = re.compile(r"^Model loaded in (?P<ms>[0-9.eE+-]+) ms\.?$")
_ITERATION = re.compile(r"^Iteration (?P<i>\d+) of (?P<n>\d+): (?P<ms>[0-9.eE+-]+) ms$")
_TOTAL = re.compile(r"^Model executed successfully (?P<n>\d+) time\(s\)(?: in (?P<ms>[0-9.eE+-]+) ms)?\.?$")
NOT_REGISTERED = re.compile(r"Backend (?P<name>\w+) is not registered")


@dataclass
class RunnerLog:
    """What one ``executor_runner`` process said about itself."""

    load_ms: float | None = None
    iteration_ms: list[float] = field(default_factory=list)
    executions: int | None = None
    total_execute_ms: float | None = None
    not_registered: list[str] = field(default_factory=list)
    bundleio_passed: bool | None = None
    errors: list[str] = field(default_factory=list)  # E and F (fatal: a failed check) messages


def parse_log(text: str) -> RunnerLog:
    log = RunnerLog()
    for line in text.splitlines():
        match = LOG_LINE.match(line.rstrip())
        if match is None:
            continue
        level, message = match.group("level") or "", match.group("message").strip()
        found = NOT_REGISTERED.search(message)
        if found:
            log.not_registered.append(found.group("name"))
        if (level and level in "EF") or found:
            log.errors.append(message)
        if loaded := _LOADED.match(message):
            log.load_ms = float(loaded.group("ms"))
        elif iteration := _ITERATION.match(message):
            log.iteration_ms.append(float(iteration.group("ms")))
        elif total := _TOTAL.match(message):
            log.executions = int(total.group("n"))
            log.total_execute_ms = float(total.group("ms")) if total.group("ms") else None
        elif "Test_result: PASS" in message:
            log.bundleio_passed = True
        elif "Test_result: FAIL" in message:
            log.bundleio_passed = False
    return log
