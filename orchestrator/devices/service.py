"""What happens to runners: tokens, enrolment, heartbeats, health checks, revocation, going offline.

A runner enrols quarantined; it becomes healthy only when it reports a passing run of the health-check
bundle of one of its classes; an infrastructure error sends it back to quarantine; the reconciler marks
a silent one offline, and its next heartbeat brings it back quarantined (health check first). Services
flush, never commit.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy.orm import Session

from coverfarm import device_classes
from coverfarm.settings import Settings
from farmrun.signing import credential_hash
from orchestrator.artifacts.health import health_bundle
from orchestrator.artifacts.store import ArtifactStore
from orchestrator.devices import repository
from orchestrator.devices.auth import credential, new_secret
from orchestrator.devices.errors import Forbidden, NotReady, Unauthenticated, Unprocessable
from orchestrator.devices.schemas import (
    Enrol,
    Enrolled,
    HealthCheck,
    HealthReport,
    OfflineEnrol,
    OfflineEnrolled,
    RunnerPublic,
    RunnerStatus,
    TokenCreate,
    TokenIssued,
)
from orchestrator.devices.transitions import lock_runner, transition
from orchestrator.errors import NotFound
from orchestrator.models import EnrolmentToken, Runner, RunnerState, utcnow


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, settings: Settings, body: TokenCreate) -> TokenIssued:
    # Hex, never starting with '-': the token is passed on a command line (`--token TOKEN`).
    token = secrets.token_hex(24)
    expires_at = utcnow() + timedelta(seconds=body.expires_in_s or settings.enrolment_token_ttl_s)
    session.add(EnrolmentToken(token_hash=_token_hash(token), expires_at=expires_at))
    session.flush()
    return TokenIssued(token=token, expires_at=expires_at)


def enrol(session: Session, settings: Settings, body: Enrol) -> Enrolled:
    token_hash = _token_hash(body.token)
    # Used first, atomically; a refusal below rolls the whole request back, the token's use with it.
    if not repository.use_token(session, token_hash, utcnow()):
        raise Unauthenticated("enrolment token unknown, already used or expired; ask an admin for a new one")
    if not body.probe.device_classes:
        raise Unprocessable("the probe offers no device class; `coverfarm runner probe` says why")
    classes = measured_classes(body.probe.device_classes, settings.backends)
    secret = new_secret()
    runner = Runner(
        name=body.name,
        device_classes=classes,
        probe=body.probe.model_dump(mode="json"),
        credential_hash=credential_hash(secret),
        signing_key=body.signing_key,
        state=RunnerState.QUARANTINED.value,
        state_reason="enrolled: health check first",
        state_changed_at=utcnow(),
        last_heartbeat=utcnow(),
    )
    session.add(runner)
    session.flush()
    repository.token_enrolled(session, token_hash, runner.id)
    return Enrolled(
        runner_id=runner.id,
        credential=credential(runner.id, secret),
        device_classes=classes,
        state=RunnerState.QUARANTINED,
        broker_url=settings.broker_url,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        device_timeout_s=settings.device_timeout_s,
    )


OFFLINE_REASON = "enrolled offline: signs device results for `coverfarm results import`, takes no jobs"


def measured_classes(offered: list[str], backends: list[str]) -> list[str]:
    """The probe's classes whose backend this farm measures: a host's runtime may offer a class of a
    backend the farm does not (a wheel registers OpenVINO beside XNNPACK), which the runner then does not
    take. A malformed name, or none of the farm's backends, is refused with the reason."""
    measured, refused = [], []
    for name in offered:
        try:
            measured.append(device_classes.check(name, backends))
        except ValueError as error:
            try:
                device_classes.backend_of(name)
            except ValueError:
                raise Unprocessable(str(error)) from None
            refused.append(str(error))
    if not measured:
        raise Unprocessable(refused[0])
    return measured


def enrol_offline(session: Session, settings: Settings, body: OfflineEnrol) -> OfflineEnrolled:
    """A runner for a host that cannot reach the farm (an admin's act, no token, no probe).

    It gets no usable bearer credential (the stored hash is of a secret nobody keeps) and stays
    offline: it never heartbeats, so it never passes a health check, and its results reach the farm only
    as signed imports. Import asks for no health check: the check exists so that a live runner does not
    take jobs it would fail, and every imported result carries its own test case and frame checks.
    """
    classes = list(dict.fromkeys(body.device_classes))
    for name in classes:
        try:
            device_classes.check(name, settings.backends)
        except ValueError as error:
            raise Unprocessable(str(error)) from None
    runner = Runner(
        name=body.name,
        device_classes=classes,
        probe={},
        credential_hash=credential_hash(new_secret()),
        signing_key=body.signing_key,
        state=RunnerState.OFFLINE.value,
        state_reason=OFFLINE_REASON,
        state_changed_at=utcnow(),
        last_heartbeat=None,
    )
    session.add(runner)
    session.flush()
    return OfflineEnrolled(
        runner_id=runner.id, name=runner.name, device_classes=classes, state=RunnerState.OFFLINE
    )


def status(runner: Runner) -> RunnerStatus:
    return RunnerStatus(
        runner_id=runner.id, state=RunnerState(runner.state), state_reason=runner.state_reason
    )


def heartbeat(session: Session, runner: Runner) -> RunnerStatus:
    locked = lock_runner(session, runner.id)
    if locked is None:
        raise Unauthenticated(f"runner {runner.id} is gone")
    locked.last_heartbeat = utcnow()
    if locked.state == RunnerState.OFFLINE.value:
        transition(session, locked, RunnerState.QUARANTINED, "heartbeats resumed: health check first")
    session.flush()
    return status(locked)


def health_checks(runner: Runner, store: ArtifactStore) -> list[HealthCheck]:
    """The health-check bundles the runner may run, one per class whose backend has one."""
    checks = []
    for name in runner.device_classes:
        sha = health_bundle(store, device_classes.backend_of(name))
        if sha is not None:
            checks.append(HealthCheck(device_class=name, sha256=sha))
    return checks


def report_health(session: Session, runner: Runner, store: ArtifactStore, body: HealthReport) -> RunnerStatus:
    locked = lock_runner(session, runner.id)
    if locked is None:
        raise Unauthenticated(f"runner {runner.id} is gone")
    expected = {check.device_class: check.sha256 for check in health_checks(locked, store)}
    if expected.get(body.device_class) != body.sha256 or body.result.bundle_sha256 != body.sha256:
        raise Forbidden(
            f"{body.sha256} is not the health-check bundle of {body.device_class} for this runner"
        )
    locked.last_heartbeat = utcnow()
    if body.result.status == "ok":
        if locked.state != RunnerState.HEALTHY.value:
            median = body.result.latency.median_ms if body.result.latency else None
            reason = f"health check on {body.device_class} passed" + (
                f" ({median:.3g} ms per chunk)" if median is not None else ""
            )
            if locked.state == RunnerState.OFFLINE.value:
                transition(session, locked, RunnerState.QUARANTINED, "heartbeats resumed: health check first")
            transition(session, locked, RunnerState.HEALTHY, reason)
    else:
        cause = f"health check on {body.device_class} failed: {body.result.error}"
        if locked.state == RunnerState.HEALTHY.value:
            transition(session, locked, RunnerState.QUARANTINED, cause)
        else:
            locked.state_reason = cause
    session.flush()
    return status(locked)


def quarantine(session: Session, runner_id: int, reason: str) -> None:
    """An infrastructure error on the runner: health check again before more work."""
    locked = lock_runner(session, runner_id)
    if locked is not None and locked.state == RunnerState.HEALTHY.value:
        transition(session, locked, RunnerState.QUARANTINED, reason)


def revoke(session: Session, runner_id: int) -> RunnerPublic:
    locked = lock_runner(session, runner_id)
    if locked is None:
        raise NotFound("runner", runner_id)
    if locked.state != RunnerState.REVOKED.value:
        transition(session, locked, RunnerState.REVOKED, "credential revoked by an admin")
    return view(locked)


def mark_silent_offline(session: Session, settings: Settings) -> list[int]:
    """Offline every quarantined or healthy runner silent for ``heartbeat_timeout_s``. Its running
    device job is re-queued by the job reconciler, which sees the same silence on the job."""
    now = utcnow()
    marked = []
    for runner in repository.silent_live(session, now - timedelta(seconds=settings.heartbeat_timeout_s)):
        silent_s = (now - (runner.last_heartbeat or runner.enrolled_at)).total_seconds()
        transition(
            session,
            runner,
            RunnerState.OFFLINE,
            f"missed heartbeats: silent for {silent_s:.0f} s (timeout {settings.heartbeat_timeout_s:g} s)",
        )
        marked.append(runner.id)
    return marked


def view(runner: Runner) -> RunnerPublic:
    return RunnerPublic.model_validate(runner)


def list_(session: Session, limit: int, offset: int) -> list[RunnerPublic]:
    return [view(runner) for runner in repository.list_runners(session, limit, offset)]


def count(session: Session) -> int:
    return repository.count_runners(session)


def require_healthy(runner: Runner) -> None:
    if runner.state != RunnerState.HEALTHY.value:
        raise NotReady(f"runner {runner.id} is {runner.state} ({runner.state_reason}): health check first")
