"""The Celery app, queue names and message schemas shared by the orchestrator and the workers (no torch).

Messages carry only a job id: the jobs table, not the broker, is the truth about what has to run, so a
duplicated or late message is harmless (the worker's start transition turns it into a no-op).
"""

from __future__ import annotations

import warnings

from celery import Celery
from pydantic import BaseModel, ConfigDict

from coverfarm import backends
from coverfarm.device_classes import backend_of
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK

QUEUE_LOWER = "lower"
QUEUE_LOWER_LONG = "lower.long"
QUEUES = (QUEUE_LOWER, QUEUE_LOWER_LONG)
LOWER_TASK = "coverfarm.lower"
DEVICE_TASK = "coverfarm.device_run"
DEVICE_QUEUE_PREFIX = "device."
BASELINE_QUEUE_PREFIX = "baseline."
MESSAGE_VERSION = 1
LOST_PROCESS_WAIT_S = 2.0


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


def time_limits(stage_timeout_s: float) -> tuple[float, float]:
    """(soft, hard) Celery limits for a job whose engine stages are each bounded by ``stage_timeout_s``.

    The engine bounds trace, partition and export separately and reports a stage that runs out as
    ``slow``, so the task's own limits sit above three bounds plus set-up: Celery's limits are only
    the backstop for an engine that stops responding, never the thing that marks a cell slow.
    """
    soft = 3 * stage_timeout_s + 120
    return soft, soft + 60


def visibility_timeout(settings: Settings) -> float:
    # Redis re-delivers an unacknowledged message after this long; it must exceed the longest hard
    # limit or a healthy long job would be handed to a second worker while the first still runs it.
    return time_limits(settings.long_timeout_s)[1] + 600


def make_celery(settings: Settings) -> Celery:
    app = Celery("coverfarm", broker=settings.celery_broker_url, set_as_current=False)
    transport_options: dict[str, object] = {"visibility_timeout": visibility_timeout(settings)}
    if settings.broker_url is None:
        settings.ensure_home()
        folder = str(settings.broker_dir)
        # control_folder defaults to ./control, relative to whatever directory the process runs in.
        control = str(settings.broker_dir / "control")
        transport_options |= {"data_folder_in": folder, "data_folder_out": folder, "control_folder": control}
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # How long the worker waits for a result from a pool process that died before it fails the task
        # with WorkerLostError, puts the message back and has the job queued again
        # (orchestrator.jobs.tasks.LowerRequest). Results go to the database, not through the pool, so
        # nothing is waited for but the loss itself (Celery's default is 10 s).
        worker_lost_wait=LOST_PROCESS_WAIT_S,
        task_default_queue=QUEUE_LOWER,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
    return app


def send_lower(app: Celery, message: LowerMessage, queue: str, stage_timeout_s: float) -> None:
    soft, hard = time_limits(stage_timeout_s)
    app.send_task(
        LOWER_TASK,
        args=[message.model_dump(mode="json")],
        queue=queue,
        soft_time_limit=soft,
        time_limit=hard,
    )


def send_device(app: Celery, message: DeviceMessage, queue: str) -> None:
    app.send_task(DEVICE_TASK, args=[message.model_dump(mode="json")], queue=queue)


def quiet_as_root(app: Celery) -> None:
    """Silence Celery's warning about a worker run by root, where it has nothing to warn about.

    What it guards against is a root worker unpickling a broker message, which runs whatever code the
    message holds; Celery itself refuses that (``SecurityError``) unless ``C_FORCE_ROOT`` is set. The
    farm's workers and runners accept JSON alone (``make_celery``), which carries data, never code, so as
    root (a container, ``make run`` on a fresh VM) the warning only hides coverfarm's own first lines.
    Should pickle ever be accepted, the warning stays."""
    from celery.exceptions import SecurityWarning

    if set(app.conf.accept_content) <= {"json", "application/json"}:
        warnings.filterwarnings("ignore", category=SecurityWarning)
