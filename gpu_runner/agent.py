"""The device runner service behind ``coverfarm runner start``.

Three processes, all in the runner's process group:

- the **supervisor** (``Agent.run``) heartbeats the orchestrator, runs the health-check bundle until the
  orchestrator calls the runner healthy, then starts the consumer, and runs the health check again
  whenever the consumer stops (an infrastructure error stops it on purpose);
- the **consumer** (``python -m gpu_runner.agent consume``), a Celery worker on the queues
  ``device.<class>`` of the runner's classes, one job at a time (solo pool, prefetch 1, acks late). Per
  message it claims the job over HTTP, fetches the bundle, runs it, beats the job and reports the
  result; the broker message carries only the job id. On a host with torch and lerobot installed it also
  consumes ``baseline.<class>``: eager PyTorch timed on this host's CPU, the speed-up's baseline;
- per bundle, a fresh ``coverfarm runner run-bundle`` process (fresh for timing, and so that a runtime
  that crashes takes down nothing but itself), which runs its replicas in fresh processes of their own;
  per baseline, a fresh ``coverfarm baseline`` process, the only one that loads torch, never while a
  bundle runs (one job at a time). Both hold the host's timing lock (``farmrun.hostlock``) while they
  time, so a CPU worker on the same host starts no stage meanwhile; a job waiting for that lock keeps
  beating.

Everything the runner tells the farm goes through ``gpu_runner.client`` with its credential; it never
sees the database. None of these modules imports torch; the run-bundle process loads the ExecuTorch
runtime.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import TimingRules
from coverfarm.result import Options
from coverfarm.settings import Settings, get_settings
from farmrun.periodic import Outage, Periodic
from gpu_runner import profiling
from gpu_runner.client import FarmClient, Refused
from gpu_runner.config import RunnerConfig, load
from gpu_runner.timing_options import as_arguments

log = logging.getLogger("coverfarm.runner")

# The health check shows the runtime works; its figures are not compared with anything.
HEALTH_RULES = TimingRules(warmup=1, min_chunks=5, min_s=0.0, max_s=5.0, replicas=1)
UNAUTHORISED = (401, 403)
NOT_READY = 423
CLI = "import sys; from coverfarm_cli import main; sys.exit(main())"


@dataclass(frozen=True)
class Timing:
    """How this runner times (the farm's rules, with ``runner start``'s overrides) and who it is."""

    rules: TimingRules
    runner_id: int | None = None
    lock_wait_s: float = 0.0  # how long a timing may wait for the host's lock (a child's timeout grows)

    def arguments(self) -> list[str]:
        args = as_arguments(self.rules)
        return args if self.runner_id is None else [*args, "--runner-id", str(self.runner_id)]


def work_dir(settings: Settings) -> Path:
    return settings.home / "runner"


Document = tuple[dict[str, Any] | None, str | None]


def child_document(what: str, args: list[str], timeout_s: float, work: Path) -> Document:
    """(document, None) from a fresh ``coverfarm <args> --out F`` process; (None, why) when it wrote none
    (it refused its arguments, crashed or ran past ``timeout_s``)."""
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="child.", dir=work) as folder:
        out = Path(folder) / "document.json"
        command = [sys.executable, "-c", CLI, *args, "--out", str(out)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return None, f"{what} did not finish within {timeout_s:g} s"
        if not out.is_file():
            tail = " ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
            return None, f"{what} exited with status {done.returncode} and wrote no result: {tail}"
        document: dict[str, Any] = json.loads(out.read_text())
        return document, None


def run_bundle_process(bundle: Path, sha256: str, timing: Timing, timeout_s: float, work: Path) -> Document:
    """(result document, None) from a fresh ``run-bundle`` process; (None, why) when it gave none."""
    args = ["runner", "run-bundle", str(bundle), "--sha256", sha256, *timing.arguments(), "--unsigned"]
    # Each replica is bounded by the device timeout; the lock is waited for once, before them.
    bound = timing.rules.replicas * timeout_s + timing.lock_wait_s + 60
    if profiling.configured() is not None:
        # the profile run and its reading, and a numerics run (after a wrong output) and its comparison,
        # each bounded the same
        bound += 4 * timeout_s
    return child_document("run-bundle", args, bound, work)


def baseline_process(policy: str, options: Options, timing: Timing, work: Path) -> Document:
    """(baseline document, None) from a fresh ``coverfarm baseline`` process; (None, why) when it gave
    none (it refused its arguments, say a checkpoint that is not on this host, or it crashed)."""
    args = [
        "baseline", "--policy", policy, "--seed", str(options.seed), "--timeout", f"{options.timeout_s:g}",
        *timing.arguments(),
    ]  # fmt: skip
    if options.checkpoint:
        args += ["--checkpoint", options.checkpoint]
    # Each replica's two phases (build, time) are bounded by timeout_s in its own child; the lock is
    # waited for once, before them. This is the backstop.
    bound = timing.rules.replicas * 2 * options.timeout_s + timing.lock_wait_s + 60
    return child_document("coverfarm baseline", args, bound, work)


def job_beat(client: FarmClient, job_id: int, attempt: int, interval_s: float) -> Periodic:
    """Beats a claimed job every heartbeat interval while its bundle runs."""

    def beat() -> None:
        try:
            if not client.job_heartbeat(job_id, attempt):
                log.warning("job %s attempt %s is no longer ours", job_id, attempt)
        except (Refused, httpx.HTTPError) as error:
            log.warning("heartbeat of job %s failed: %s", job_id, error)

    return Periodic(beat, interval_s, f"job-beat-{job_id}")


DONE, RECHECK, REQUEUE = "done", "recheck", "requeue"


def run_job(client: FarmClient, job_id: int, timing: Timing, work: Path) -> str:
    """Claim, fetch, run and report one device job. DONE: take the next; RECHECK: an infrastructure
    error, health check before more work; REQUEUE: this runner may not take the job now (not healthy,
    or its credential refused), so the message goes back for another runner."""
    try:
        claim = client.claim(job_id)
    except Refused as refused:
        log.warning("job %s not claimed: %s", job_id, refused)
        return REQUEUE if refused.status == NOT_READY or refused.status in UNAUTHORISED else DONE
    except httpx.TransportError as error:
        # The orchestrator is not there: the message goes back for when it is (the supervisor waits).
        log.warning("job %s not claimed: the orchestrator did not answer (%s)", job_id, error)
        return REQUEUE
    attempt, sha = int(claim["attempt"]), str(claim["bundle_sha256"])
    if claim.get("kind") == "baseline":
        return run_baseline_job(client, claim, timing, work)
    log.info("job %s attempt %s: bundle %s on %s", job_id, attempt, sha, claim["device_class"])
    with job_beat(client, job_id, attempt, client.config.heartbeat_interval_s):
        try:
            bundle = client.fetch(sha, work / "bundles")
        except (Refused, httpx.HTTPError, OSError, tarfile.TarError) as error:
            return _infra(client, job_id, attempt, f"bundle {sha} could not be fetched: {error}")
        document, why = run_bundle_process(bundle, sha, timing, float(claim["timeout_s"]), work)
    if document is None:
        return _infra(client, job_id, attempt, why or "run-bundle gave no result")
    try:
        client.report(job_id, attempt, document)
    except Refused as refused:
        log.error("result of job %s attempt %s refused: %s", job_id, attempt, refused)
    return DONE


def run_baseline_job(client: FarmClient, claim: dict[str, Any], timing: Timing, work: Path) -> str:
    """Time the claimed cell's policy in eager PyTorch on this host's CPU and report the document. A
    baseline that cannot be measured here (its checkpoint is not on this host, the policy fails to build)
    is reported as a failed baseline with its cause: it says something about the policy, not the host."""
    job_id, attempt = int(claim["job_id"]), int(claim["attempt"])
    options = Options.model_validate({**claim["options"], "timeout_s": claim["timeout_s"]})
    log.info("job %s attempt %s: eager baseline of %s on this host's CPU", job_id, attempt, claim["policy"])
    with job_beat(client, job_id, attempt, client.config.heartbeat_interval_s):
        document, why = baseline_process(claim["policy"], options, timing, work)
    if document is None:
        failed = BaselineResult(policy=claim["policy"], options=options, frames=1, status="failed", error=why)
        document = failed.model_dump(mode="json")
    try:
        client.report_baseline(job_id, attempt, document)
    except Refused as refused:
        log.error("baseline of job %s attempt %s refused: %s", job_id, attempt, refused)
    return DONE


def _infra(client: FarmClient, job_id: int, attempt: int, error: str) -> str:
    log.error("job %s attempt %s: infrastructure error: %s", job_id, attempt, error)
    try:
        client.infra_error(job_id, attempt, error)
    except (Refused, httpx.HTTPError) as refused:
        log.error("reporting the infrastructure error of job %s failed: %s", job_id, refused)
    return RECHECK


def health_check(client: FarmClient, timing: Timing, work: Path) -> dict[str, Any]:
    """Run the farm's health-check bundle of one of the runner's classes and report it; the runner's
    state as the orchestrator then sees it."""
    checks = client.health_checks()
    if not checks:
        status = client.heartbeat()
        status["state_reason"] = "the farm has no health-check bundle for " + ", ".join(
            client.config.device_classes
        )
        return status
    check = checks[0]
    try:
        bundle = client.fetch(check["sha256"], work / "bundles")
    except (Refused, httpx.HTTPError, OSError, tarfile.TarError) as error:
        status = client.heartbeat()
        status["state_reason"] = f"health-check bundle could not be fetched: {error}"
        return status
    document, why = run_bundle_process(bundle, check["sha256"], timing, client.config.device_timeout_s, work)
    if document is None:
        document = {"bundle_sha256": check["sha256"], "status": "failed", "error": why}
    return client.report_health(check["device_class"], check["sha256"], document)


class Agent:
    """The supervisor: heartbeats, health checks, and the consumer process."""

    def __init__(self, config: RunnerConfig, config_path: Path, settings: Settings, timing: Timing) -> None:
        self.config, self.config_path, self.settings, self.timing = config, config_path, settings, timing
        self.client = FarmClient(config)
        self.stop = threading.Event()
        self.revoked: str | None = None
        self.consumer: subprocess.Popen[bytes] | None = None
        # Silent past the farm's own heartbeat timeout (six beats), the orchestrator is gone: the
        # consumer stops (no job can be claimed) and the supervisor tries less and less often.
        self.outage = Outage(
            f"the orchestrator at {config.url}", patience_s=6 * config.heartbeat_interval_s, log=log
        )

    def _beat(self) -> None:
        if not self.outage.due():
            return
        try:
            self.client.heartbeat()
        except Refused as refused:
            self.outage.succeeded()
            if refused.status in UNAUTHORISED:
                self.revoked = refused.detail
                self._shutdown()
            log.warning("heartbeat refused: %s", refused)
        except httpx.HTTPError as error:
            self.outage.failed(error)
            if self.outage.gone:
                self._stop_consumer()
            else:
                log.warning("heartbeat failed: %s", error)
        else:
            self.outage.succeeded()

    def _stop_consumer(self) -> None:
        if self.consumer is not None and self.consumer.poll() is None:
            self.consumer.send_signal(signal.SIGTERM)

    def _shutdown(self, *_args: object) -> None:
        self.stop.set()
        self._stop_consumer()

    def _on_signal(self, *_args: object) -> None:
        # Not ``_shutdown`` itself: a handler runs in the main thread between two bytecodes, maybe while
        # that thread holds ``stop``'s lock (inside Event.wait), and Event.set would then wait on it
        # for ever. A thread of its own sets it once the main thread lets go.
        threading.Thread(target=self._shutdown, name="runner-shutdown", daemon=True).start()

    def run(self) -> int:
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(number, self._on_signal)
        beats = Periodic(self._beat, self.config.heartbeat_interval_s, "runner-heartbeat", join_timeout_s=5)
        beats.start()
        work = work_dir(self.settings)
        try:
            while not self.stop.is_set():
                try:
                    health = Timing(HEALTH_RULES, self.timing.runner_id, self.timing.lock_wait_s)
                    status = health_check(self.client, health, work)
                except Refused as refused:
                    if refused.status in UNAUTHORISED:
                        self.revoked = refused.detail
                        break
                    raise
                except httpx.HTTPError as error:
                    self.outage.failed(error)
                    self.stop.wait(max(self.config.heartbeat_interval_s, self.outage.wait_s, 5.0))
                    continue
                self.outage.succeeded()
                log.info("runner %s: %s (%s)", self.config.runner_id, status["state"], status["state_reason"])
                if status["state"] != "healthy":
                    self.stop.wait(max(self.config.heartbeat_interval_s, 5.0))
                    continue
                self._consume()
        finally:
            beats.stop()
            self.client.close()
        if self.revoked is not None:
            log.error("runner %s stops: %s", self.config.runner_id, self.revoked)
            return 3
        return 0

    def _consume(self) -> None:
        command = [
            sys.executable, "-m", "gpu_runner.agent", "consume", "--config", str(self.config_path),
            "--rules", self.timing.rules.model_dump_json(),
        ]  # fmt: skip
        self.consumer = subprocess.Popen(command)
        while self.consumer.poll() is None:
            self.stop.wait(0.5)
        log.info("consumer exited with status %s", self.consumer.returncode)


def consume(config: RunnerConfig, settings: Settings, timing: Timing) -> None:
    """The consumer process: a Celery worker on the runner's device queues, one job at a time."""
    from celery import Task
    from celery.exceptions import Reject

    from coverfarm.queues import DEVICE_TASK, DeviceMessage, baseline_queue, device_queue
    from coverfarm.stacks import current_stack
    from farmrun.celery_app import make_celery, quiet_as_root
    from gpu_runner.probe import baseline_capability

    if settings.broker_url is None and config.broker_url is not None:
        settings = settings.model_copy(update={"broker_url": config.broker_url})
    app = make_celery(settings)
    client = FarmClient(config)
    work = work_dir(settings)

    @app.task(name=DEVICE_TASK, bind=True, acks_late=True)
    def device_run(self: Task[Any, Any], message: dict[str, Any]) -> None:
        parsed = DeviceMessage.model_validate(message)
        outcome = run_job(client, parsed.job_id, timing, work)
        if outcome != DONE:
            # Stop taking work: the supervisor runs the health check, then starts a new consumer.
            # A warm shutdown lets this task return (and its message be acknowledged or rejected).
            os.kill(os.getpid(), signal.SIGTERM)
        if outcome == REQUEUE:
            raise Reject(f"runner {config.runner_id} may not take job {parsed.job_id} now", requeue=True)

    del device_run
    # Its CPU classes' bundles (XNNPACK's, OpenVINO's) of its own stack: those its wheel's runtime runs.
    stack = current_stack()
    queues = [device_queue(name, stack) for name in config.device_classes]
    eager = baseline_capability()
    if config.baseline and eager.status == "ok":
        queues += [baseline_queue(name) for name in config.device_classes]
    else:
        why = eager.status if eager.status != "ok" else "turned off at registration (--no-baseline)"
        log.info("no eager-baseline jobs on this host: %s", why)
    quiet_as_root(app)
    # Quiet: this line says what it consumes, where a consumer restarted after each health check would
    # print Celery's banner again every time.
    log.info("runner %s consumes %s", config.runner_id, ",".join(queues))
    app.worker_main(
        [
            "--quiet", "worker",
            "--queues", ",".join(queues),
            "--concurrency", "1",
            "--pool", "solo",
            "--hostname", f"runner-{config.runner_id}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", "INFO",
        ]
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.agent")
    parser.add_argument("command", choices=["consume"])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--rules", required=True, help="TimingRules as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config, settings = load(args.config), get_settings()
    rules = TimingRules.model_validate_json(args.rules)
    consume(config, settings, Timing(rules, config.runner_id, settings.timing_lock_wait_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
