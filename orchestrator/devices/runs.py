"""Device jobs over authenticated HTTP (claim, heartbeat, result, infrastructure error) and offline imports.

Two kinds of device job (``Job.kind``, on the device class ``Job.device_class``): a bundle run
(``device_run``, stage ``run:<class>``), whose result is a device result, and an eager baseline
(``baseline``, stage ``baseline:<class>``), eager PyTorch timed on the CPU of a host of that class,
whose result is a baseline document. A runner may only report on a job it claimed: the job row names the
runner holding its current attempt, and anything else is refused before anything is written. Each result
of a (cell, device class) is one row, upserted, so a retried attempt or a repeated import replaces it and
never duplicates it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from coverfarm import device_classes
from coverfarm.baseline import BaselineResult
from coverfarm.device_result import DeviceResult
from coverfarm.latency_interval import interval_of
from coverfarm.result import Options, error_line
from coverfarm.settings import Settings
from farmrun import signing
from orchestrator.devices import repository, service
from orchestrator.devices.errors import Conflict, Forbidden, Unprocessable
from orchestrator.devices.schemas import (
    Alive,
    BaselineReport,
    Claim,
    DeviceBundle,
    Imported,
    ImportedBatch,
    InfraError,
    RunReport,
)
from orchestrator.errors import NotFound
from orchestrator.events import repository as events
from orchestrator.jobs import service as jobs
from orchestrator.jobs.transitions import lock_job, transition
from orchestrator.models import Cell, Job, JobKind, JobStatus, Runner, RunnerState, Sweep


def worker_name(runner: Runner) -> str:
    """How a runner is named on the jobs it runs (``Job.worker``)."""
    return f"runner-{runner.id}"


def _device_job(session: Session, runner: Runner, job_id: int) -> tuple[Job, str]:
    job = lock_job(session, job_id)
    device_class = job.device_class if job is not None else None
    if job is None or device_class is None:
        raise Forbidden(f"job {job_id} is not a device job")
    if device_class not in runner.device_classes:
        raise Forbidden(f"job {job_id} runs on {device_class}, which runner {runner.id} does not serve")
    return job, device_class


def claim(session: Session, runner: Runner, job_id: int, settings: Settings) -> Claim:
    service.require_healthy(runner)
    _, device_class = _device_job(session, runner, job_id)
    started = jobs.start(session, job_id, worker_name(runner), settings)
    if started is None:
        raise Conflict(f"job {job_id} has nothing to run (done, cancelled or running elsewhere)")
    job = lock_job(session, job_id)
    assert job is not None
    sha = repository.bundle_of_cell(session, job.cell_id)
    if sha is None:  # cannot happen for a job created from a bundle; say so rather than run nothing
        jobs.end(session, job, JobStatus.FAILED, "the cell has no bundle", "the cell has no bundle")
        raise Conflict(f"job {job_id}: the cell has no bundle to run")
    return Claim(
        job_id=job_id,
        attempt=started.attempt,
        device_class=device_class,
        kind="baseline" if job.kind is JobKind.BASELINE else "run",
        bundle_sha256=sha,
        timeout_s=job.timeout_s,
        policy=started.policy,
        options=started.options.model_dump(mode="json"),
    )


def _own_attempt(session: Session, runner: Runner, job_id: int, attempt: int) -> Job:
    job, _ = _device_job(session, runner, job_id)
    if job.worker != worker_name(runner):
        raise Forbidden(f"job {job_id} is not runner {runner.id}'s: it did not claim it")
    current = jobs.running_attempt(session, job_id, attempt)
    if current is None:
        raise Conflict(f"attempt {attempt} of job {job_id} is no longer running (the job is {job.status})")
    return current


def heartbeat(session: Session, runner: Runner, job_id: int, attempt: int) -> Alive:
    service.heartbeat(session, runner)
    job, _ = _device_job(session, runner, job_id)
    if job.worker != worker_name(runner):
        return Alive(alive=False)
    return Alive(alive=jobs.heartbeat(session, job_id, attempt, worker_name(runner)))


def _store(
    session: Session,
    cell_id: int,
    device_class: str,
    result: DeviceResult,
    document: dict[str, Any],
    *,
    runner_id: int,
    source: str,
    job_id: int | None = None,
    attempt: int | None = None,
) -> None:
    repository.upsert_run(
        session,
        {
            "cell_id": cell_id,
            "device_class": device_class,
            "job_id": job_id,
            "runner_id": runner_id,
            "attempt": attempt,
            "source": source,
            "status": result.status,
            "median_ms": interval_of(result.latency).figure_ms if result.latency else None,
            "error": result.error,
            "bundle_sha256": result.bundle_sha256,
            "document": document,
            "runtime_patches": result.runtime_identity.patches_key if result.runtime_identity else "",
        },
    )


def report(session: Session, runner: Runner, job_id: int, body: RunReport) -> None:
    job = _own_attempt(session, runner, job_id, body.attempt)
    if job.kind is JobKind.BASELINE:
        raise Unprocessable(
            f"job {job_id} times the eager baseline: report it to /device-jobs/{job_id}/baseline"
        )
    device_class = job.device_class
    assert device_class is not None
    expected = repository.bundle_of_cell(session, job.cell_id)
    if body.result.bundle_sha256 != expected:
        raise Unprocessable(
            f"the result is of bundle {body.result.bundle_sha256}; job {job_id} runs {expected}"
        )
    _store(
        session,
        job.cell_id,
        device_class,
        body.result,
        body.result.model_dump(mode="json"),
        runner_id=runner.id,
        source="job",
        job_id=job.id,
        attempt=body.attempt,
    )
    if body.result.status == "ok":
        jobs.end(
            session, job, JobStatus.OK, f"attempt {body.attempt} on runner {runner.id} stored its result"
        )
    else:
        error = body.result.error or "failed without a cause"
        jobs.end(
            session, job, JobStatus.FAILED, f"attempt {body.attempt} on runner {runner.id}: {error}", error
        )


BASELINE_STATUS = {"ok": JobStatus.OK, "slow": JobStatus.SLOW, "failed": JobStatus.FAILED}


def report_baseline(session: Session, runner: Runner, job_id: int, body: BaselineReport) -> None:
    """Store a baseline job's document as the eager baseline of its (cell, device class)."""
    job = _own_attempt(session, runner, job_id, body.attempt)
    if job.kind is not JobKind.BASELINE:
        raise Unprocessable(f"job {job_id} runs a bundle: report it to /device-jobs/{job_id}/result")
    device_class = job.device_class
    assert device_class is not None
    baseline: BaselineResult = body.baseline
    if baseline.policy != job.cell.policy:
        raise Unprocessable(
            f"the baseline is of policy {baseline.policy}; job {job_id} times {job.cell.policy}"
        )
    repository.upsert_baseline(
        session,
        {
            "cell_id": job.cell_id,
            "device_class": device_class,
            "job_id": job.id,
            "runner_id": runner.id,
            "attempt": body.attempt,
            "status": baseline.status,
            "median_ms": interval_of(baseline.latency).figure_ms if baseline.latency else None,
            "error": baseline.error,
            "document": baseline.model_dump(mode="json"),
        },
    )
    to = BASELINE_STATUS[baseline.status]
    error = None if to is JobStatus.OK else (baseline.error or f"baseline {baseline.status} without a cause")
    reason = f"attempt {body.attempt} on runner {runner.id} stored its baseline ({baseline.status})"
    jobs.end(session, job, to, reason, error)


def infra_error(session: Session, runner: Runner, job_id: int, body: InfraError, settings: Settings) -> None:
    """The runner could not run the job for reasons of its own (download failed, runtime would not
    start): the job goes back to the queue and the runner back to its health check."""
    job = _own_attempt(session, runner, job_id, body.attempt)
    cause = error_line(body.error) or "no cause given"
    jobs.give_back(session, job, f"runner {runner.id} infrastructure error: {cause}", settings)
    service.quarantine(session, runner.id, f"infrastructure error on job {job_id}: {cause}")


def _signer(session: Session, document: dict[str, Any]) -> tuple[dict[str, Any], Runner]:
    """The document without its signature and the runner whose key verifies it; refused otherwise."""
    try:
        body, runner_id, value = signing.split(document)
    except ValueError as error:
        raise Unprocessable(str(error)) from None
    runner = repository.get_runner(session, runner_id)
    if runner is None or runner.state == RunnerState.REVOKED.value:
        raise Forbidden(f"the result is signed by runner {runner_id}, which is unknown or revoked")
    if runner.signing_key is None:
        raise Forbidden(f"runner {runner_id} has no signing key: enrol it again to sign offline results")
    if not signing.verify(body, runner_id, value, runner.signing_key):
        raise Forbidden(f"bad signature: the result was changed after runner {runner_id} signed it")
    return body, runner


def import_document(session: Session, document: dict[str, Any], settings: Settings) -> Imported:
    """A signed device result (it names its bundle) or a signed eager baseline (``coverfarm baseline
    --out``), each stored the way its kind is."""
    if "bundle_sha256" in document:
        return import_result(session, document, settings)
    return import_baseline(session, document, settings)


def import_baseline(session: Session, document: dict[str, Any], settings: Settings) -> Imported:
    """Store an offline host's signed eager baseline for the cells that host's runner ran: every cell of
    the baseline's policy and options with a device run the same runner signed, for that run's class.
    A speed-up then needs both to be trusted measurements of that runner on that host."""
    body, runner = _signer(session, document)
    try:
        baseline = BaselineResult.model_validate(body)
    except ValidationError as error:
        raise Unprocessable(f"not a device result or baseline document: {error.errors()[0]['msg']}") from None
    targets = []
    for run in repository.runs_by_runner(session, runner.id):
        cell = session.get(Cell, run.cell_id)
        if cell is None or cell.policy != baseline.policy or not _same_weights(cell.options, baseline):
            continue
        if (cell, run.device_class) not in targets:  # a stock and a candidate-fix run share one baseline
            targets.append((cell, run.device_class))
    if not targets:
        raise Unprocessable(
            f"runner {runner.id} has no device run of {baseline.policy} with the baseline's weights "
            "(seed, checkpoint) to pair it with: import the runner's device results first"
        )
    for cell, device_class in targets:
        repository.upsert_baseline(
            session,
            {
                "cell_id": cell.id,
                "device_class": device_class,
                "job_id": None,
                "runner_id": runner.id,
                "attempt": None,
                "status": baseline.status,
                "median_ms": interval_of(baseline.latency).figure_ms if baseline.latency else None,
                "error": baseline.error,
                "document": body,
            },
        )
        events.emit(
            session,
            "device",
            sweep_id=cell.sweep_id,
            cell_id=cell.id,
            payload={
                "device_class": device_class,
                "status": baseline.status,
                "source": "import-baseline",
                "stack": cell.stack,
            },
        )
    return Imported(
        kind="baseline",
        runner_id=runner.id,
        device_class=", ".join(sorted({name for _, name in targets})),
        bundle_sha256=None,
        cells=[cell.id for cell, _ in targets],
    )


def _same_weights(options: Any, baseline: BaselineResult) -> bool:
    cell = Options.model_validate(options) if isinstance(options, dict) else options
    return (cell.seed, cell.checkpoint) == (baseline.options.seed, baseline.options.checkpoint)


def import_result(session: Session, document: dict[str, Any], settings: Settings) -> Imported:
    """Store an offline run's signed result as the device result of every cell that has its bundle.

    Refused before anything is written: an unsigned or tampered document, a signer that is unknown,
    revoked or has no signing key, a result for a device class the signer was not enrolled for, and a
    bundle no cell produced. Each stored cell gets a ``device`` event, so an open grid shows it.
    """
    body, runner = _signer(session, document)
    runner_id = runner.id
    try:
        result = DeviceResult.model_validate(body)
    except ValidationError as error:
        raise Unprocessable(f"not a device result document: {error.errors()[0]['msg']}") from None
    if result.device_class is None:
        raise Unprocessable("the result names no device class (the host offered none for its backend)")
    try:
        backend = device_classes.check(result.device_class, settings.backends)
        backend = device_classes.backend_of(backend)
    except ValueError as error:
        raise Unprocessable(str(error)) from None
    if result.device_class not in runner.device_classes:
        served = ", ".join(runner.device_classes) or "none"
        raise Forbidden(
            f"the result is for {result.device_class}, which runner {runner_id} does not serve ({served})"
        )
    cells = [
        cell
        for cell in repository.cells_with_bundle(session, result.bundle_sha256)
        if cell.backend == backend
    ]
    if not cells:
        raise Unprocessable(f"bundle {result.bundle_sha256} is not one the farm knows (no cell produced it)")
    for cell in cells:
        _store(session, cell.id, result.device_class, result, body, runner_id=runner.id, source="import")
        _settle_queued_run(session, cell.jobs, result.device_class, runner.id)
        events.emit(
            session,
            "device",
            sweep_id=cell.sweep_id,
            cell_id=cell.id,
            payload={
                "device_class": result.device_class,
                "status": result.status,
                "source": "import",
                "stack": cell.stack,
            },
        )
    return Imported(
        runner_id=runner.id,
        device_class=result.device_class,
        bundle_sha256=result.bundle_sha256,
        cells=[cell.id for cell in cells],
    )


def _settle_queued_run(session: Session, cell_jobs: list[Job], device_class: str, runner_id: int) -> None:
    """The cell's bundle-run job of the class, still queued, has its result now: it is withdrawn (with
    that reason), so no live runner runs it again and the sweep can end. A running one is left alone:
    its runner's result will replace the imported one."""
    for job in cell_jobs:
        run = job.kind is JobKind.DEVICE_RUN and job.device_class == device_class
        locked = lock_job(session, job.id) if run else None
        if locked is not None and locked.status == JobStatus.QUEUED:
            reason = f"a signed result of offline runner {runner_id} was imported for this cell and class"
            transition(session, locked, JobStatus.CANCELLED, reason)


def import_batch(session: Session, documents: list[dict[str, Any]], settings: Settings) -> ImportedBatch:
    """Every document of an offline run's directory, or none: the first refusal names its document
    and the request's transaction rolls back whatever the earlier ones wrote.

    The device results go in before the baselines, whatever their order in the batch: a baseline pairs
    with the runner's stored device runs of its policy, so one read before its runs (``baseline-act.json``
    sorts before most sha256 names) would miss them. ``imported`` keeps the batch's order."""
    results_first = sorted(range(len(documents)), key=lambda i: "bundle_sha256" not in documents[i])
    imported: dict[int, Imported] = {}
    for index in results_first:
        try:
            imported[index] = import_document(session, documents[index], settings)
        except (Forbidden, Unprocessable) as error:
            raise type(error)(f"result {index + 1} of {len(documents)}: {error}") from None
    return ImportedBatch(imported=[imported[index] for index in range(len(documents))])


def sweep_bundles(
    session: Session, sweep_id: int, device_class: str, settings: Settings
) -> list[DeviceBundle]:
    """The bundles a host of ``device_class`` should run for the sweep: one per distinct bundle among
    the sweep's cells of that class's backend, with the cells it serves."""
    try:
        backend = device_classes.backend_of(device_classes.check(device_class, settings.backends))
    except ValueError as error:
        raise Unprocessable(str(error)) from None
    if session.get(Sweep, sweep_id) is None:
        raise NotFound("sweep", sweep_id)
    found: dict[str, DeviceBundle] = {}
    for cell in repository.sweep_cells(session, sweep_id):
        sha = repository.bundle_of_cell(session, cell.id) if cell.backend == backend else None
        if sha is None:
            continue
        entry = found.setdefault(
            sha, DeviceBundle(bundle_sha256=sha, policy=cell.policy, backend=cell.backend, cells=[])
        )
        entry.cells.append(cell.id)
    return list(found.values())
