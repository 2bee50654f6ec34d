"""Queue names and message schemas shared by the orchestrator, the CPU workers and the device runners (no
torch, no Celery: the Celery app that sends and consumes them is ``farmrun.celery_app``).

Messages carry only a job id: the jobs table, not the broker, is the truth about what has to run, so a
duplicated or late message is harmless (the worker's start transition turns it into a no-op).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from coverfarm import backends
from coverfarm.device_classes import backend_of
from coverfarm.stacks import DEFAULT_STACK

QUEUE_LOWER = "lower"
QUEUE_LOWER_LONG = "lower.long"
QUEUES = (QUEUE_LOWER, QUEUE_LOWER_LONG)
LOWER_TASK = "coverfarm.lower"
DEVICE_TASK = "coverfarm.device_run"
DEVICE_QUEUE_PREFIX = "device."
BASELINE_QUEUE_PREFIX = "baseline."
MESSAGE_VERSION = 1


def baseline_queue(device_class: str) -> str:
    """The queue of eager-baseline jobs for ``device_class``, consumed only by runners of the class whose
    host has torch and lerobot (``baseline.cpu-x86_64-xnnpack``)."""
    return f"{BASELINE_QUEUE_PREFIX}{device_class}"


def device_queue(device_class: str, stack: str = DEFAULT_STACK) -> str:
    """The queue device runners of ``device_class`` consume (``device.cpu-x86_64-xnnpack``).

    A CPU backend's class (XNNPACK's, OpenVINO's: ``BackendInfo.cpu_class``) and VGF's
    (``BackendInfo.wheel_runtime``) run their bundles on the Python runtime of the executorch wheel
    installed beside the runner, so a cell of another stack than
    the default goes to runners of that stack (``device.cpu-x86_64-xnnpack@et-1.4.1``), as its lower job
    went to that stack's workers (``coverfarm.routes``). Other classes run a native runtime the host
    declares: their queue is one for every stack, and a run whose runtime is not the cell's release is
    flagged on the cell."""
    if stack != DEFAULT_STACK and backends.runs_on_wheel(backend_of(device_class)):
        return f"{DEVICE_QUEUE_PREFIX}{device_class}@{stack}"
    return f"{DEVICE_QUEUE_PREFIX}{device_class}"


class LowerMessage(BaseModel):
    """The one argument of the ``coverfarm.lower`` task."""

    model_config = ConfigDict(frozen=True)

    version: int = MESSAGE_VERSION
    job_id: int
    policy: str  # for the worker's log line; the job row is authoritative
    backend: str


class DeviceMessage(BaseModel):
    """The one argument of the ``coverfarm.device_run`` task, consumed by device runners.

    The runner claims the job over authenticated HTTP before doing anything; the claim, not this
    message, tells it what the job is (run a bundle, or time the eager baseline) and which bundle.
    """

    model_config = ConfigDict(frozen=True)

    version: int = MESSAGE_VERSION
    job_id: int
    device_class: str
