"""The words a device runtime's failure is shown with, written once: what the runtime did (refused a
program at load, crashed while running one) and its own message shortened to the check that failed.

The runner writes them into a failure's cause (``gpu_runner.native.failures``), the grid shows a failure
with them (``coverfarm.device_result.DeviceFailure.short_cause``) and the report groups the runtime's
refusals and crashes by them (``orchestrator.reports``). Plain text only: no torch, no orchestrator, so
the torch-free runner imports it.
"""

from __future__ import annotations

import re

REFUSED_AT_LOAD = "refused at load"
CRASHED_WHILE_RUNNING = "crashed while running"
WRONG_OUTPUT = "output wrong"
# A failure kind (coverfarm.device_result.FailureKind) the runtime's own message explains, in words.
RUNTIME_FAILURES = {"refused_at_load": REFUSED_AT_LOAD, "crashed": CRASHED_WHILE_RUNNING}

# How the Vulkan graph builder says the runtime has no kernel for a delegated op.
MISSING_OPERATOR = "Missing operator: "

_RAISED_FROM = re.compile(r"Exception raised from \S+ at (?:\S*/)?(?P<where>[^/\s]+:\d+): ")
# Where a check sits in the runtime's source: "IndexTensor.cpp:76".
_CHECK_PLACE = re.compile(r"\b[\w-]+\.(?:cpp|cc|c|h|hpp|mm):\d+")
MORE = "…"  # the rest is in the tooltip and on the cell's page


def short_message(message: str) -> str:
    """A runtime's message as the grid shows it: its first failure, where the check that failed sits
    (``IndexTensor.cpp:76``) and what it says, without the exception's type and the source path."""
    parts = message.split("; ")
    text = next((part for part in parts if not part.startswith("terminate called")), message)
    if MISSING_OPERATOR in text:  # the graph builder's assert: what it lacks says it all
        return text[text.index(MISSING_OPERATOR) :].strip()
    return _RAISED_FROM.sub(lambda m: f"{m.group('where')}: ", text).strip()


def compact(cause: str) -> str:
    """A failure's words as a grid cell shows them: up to the place of the check that failed
    ("refused at load: forward: IndexTensor.cpp:76 …"), ``MORE`` marking what was left out (the cell's
    tooltip and page keep it all); a cause that names no check's place, whole."""
    place = _CHECK_PLACE.search(cause)
    if place is None:
        return cause
    head = cause[: place.end()]
    return head if head == cause.rstrip() else f"{head} {MORE}"


def runtime_failure(kind: str, message: str, program: str | None = None) -> str | None:
    """A refusal or crash in words: "refused at load: forward: IndexTensor.cpp:76: ..."; None for a kind
    the runtime's message does not explain (``RUNTIME_FAILURES``)."""
    words = RUNTIME_FAILURES.get(kind)
    if words is None:
        return None
    where = f"{program}: " if program else ""
    return f"{words}: {where}{short_message(message)}"
