"""HTTP for enrolment tokens, runners, device jobs and offline imports; the behaviour is in service.py
and runs.py. Runners authenticate with their credential (auth.py), admins with the admin token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response, status
from fastapi.responses import FileResponse, StreamingResponse

from orchestrator.artifacts.store import ArtifactError, ArtifactStore, NotStored, check_sha
from orchestrator.deps import AdminDep, SessionDep, SettingsDep
from orchestrator.devices import runs, service
from orchestrator.devices.auth import RunnerDep, RunnerOrAdminDep
from orchestrator.devices.errors import Missing, Unprocessable
from orchestrator.devices.schemas import (
    Alive,
    AttemptRef,
    BaselineReport,
    Claim,
    DeviceBundle,
    Enrol,
    Enrolled,
    HealthCheck,
    HealthReport,
    ImportBatch,
    Imported,
    ImportedBatch,
    InfraError,
    OfflineEnrol,
    OfflineEnrolled,
    RunnerPublic,
    RunnerStatus,
    RunReport,
    TokenCreate,
    TokenIssued,
)
from orchestrator.errors import responses
from orchestrator.inputs import Id, Name, Offset, StrictJSONRoute, Text

router = APIRouter(tags=["devices"], route_class=StrictJSONRoute)
# What a runner's own calls may answer besides their result: unknown credential, revoked runner.
RUNNER = responses(401, 403)
# ... and a device job's calls: not its job (403), no such path (404), not this attempt's (409), the body
# too large.
JOB = responses(401, 403, 404, 409, 413)


def _store(request: Request) -> ArtifactStore:
    return ArtifactStore(request.app.state.settings.artifacts_dir)


@router.post(
    "/enrolment-tokens",
    status_code=status.HTTP_201_CREATED,
    dependencies=[AdminDep],
    responses=responses(401, 413),
)
def create_token(session: SessionDep, settings: SettingsDep, body: TokenCreate | None = None) -> TokenIssued:
    """A one-time enrolment token (shown once, stored as its sha256)."""
    return service.create_token(session, settings, body or TokenCreate())


@router.post("/runners/enrol", status_code=status.HTTP_201_CREATED, responses=responses(401, 413))
def enrol(body: Enrol, session: SessionDep, settings: SettingsDep) -> Enrolled:
    """Trade a one-time token and the host's probe for a runner credential (shown once)."""
    return service.enrol(session, settings, body)


@router.post(
    "/runners/offline",
    status_code=status.HTTP_201_CREATED,
    dependencies=[AdminDep],
    responses=responses(401, 413),
)
def enrol_offline(body: OfflineEnrol, session: SessionDep, settings: SettingsDep) -> OfflineEnrolled:
    """Enrol a host that cannot reach the farm, by its signing key: its results come as signed imports."""
    return service.enrol_offline(session, settings, body)


@router.get("/runners")
def list_runners(
    session: SessionDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
) -> list[RunnerPublic]:
    """Device runners with their state and why, device classes, probe and last heartbeat."""
    response.headers["X-Total-Count"] = str(service.count(session))
    return service.list_(session, limit, offset)


@router.post("/runners/{runner_id:int}/revoke", dependencies=[AdminDep], responses=responses(401, 404))
def revoke(runner_id: Id, session: SessionDep) -> RunnerPublic:
    return service.revoke(session, runner_id)


@router.delete("/runners/{runner_id:int}", dependencies=[AdminDep], responses=responses(401, 404))
def delete_runner(runner_id: Id, session: SessionDep) -> RunnerPublic:
    """Revoke (the row stays: its results keep naming it)."""
    return service.revoke(session, runner_id)


@router.post("/runners/me/heartbeat", responses=RUNNER)
def runner_heartbeat(runner: RunnerDep, session: SessionDep) -> RunnerStatus:
    return service.heartbeat(session, runner)


@router.get("/runners/me/health-check", responses=RUNNER)
def health_checks(runner: RunnerDep, request: Request) -> list[HealthCheck]:
    return service.health_checks(runner, _store(request))


@router.post("/runners/me/health-check", responses=responses(401, 403, 413))
def report_health(
    body: HealthReport, runner: RunnerDep, session: SessionDep, request: Request
) -> RunnerStatus:
    return service.report_health(session, runner, _store(request), body)


@router.post("/device-jobs/{job_id:int}/claim", responses=responses(401, 403, 404, 409, 423))
def claim(job_id: Id, runner: RunnerDep, session: SessionDep, settings: SettingsDep) -> Claim:
    return runs.claim(session, runner, job_id, settings)


@router.post("/device-jobs/{job_id:int}/heartbeat", responses=JOB)
def job_heartbeat(job_id: Id, body: AttemptRef, runner: RunnerDep, session: SessionDep) -> Alive:
    return runs.heartbeat(session, runner, job_id, body.attempt)


@router.post("/device-jobs/{job_id:int}/result", status_code=status.HTTP_204_NO_CONTENT, responses=JOB)
def report(job_id: Id, body: RunReport, runner: RunnerDep, session: SessionDep) -> None:
    runs.report(session, runner, job_id, body)


@router.post("/device-jobs/{job_id:int}/baseline", status_code=status.HTTP_204_NO_CONTENT, responses=JOB)
def report_baseline(job_id: Id, body: BaselineReport, runner: RunnerDep, session: SessionDep) -> None:
    """A baseline job's document: eager PyTorch timed on the CPU of the runner's host."""
    runs.report_baseline(session, runner, job_id, body)


@router.post("/device-jobs/{job_id:int}/infra-error", status_code=status.HTTP_204_NO_CONTENT, responses=JOB)
def infra_error(
    job_id: Id, body: InfraError, runner: RunnerDep, session: SessionDep, settings: SettingsDep
) -> None:
    runs.infra_error(session, runner, job_id, body, settings)


@router.post(
    "/results/import",
    status_code=status.HTTP_201_CREATED,
    dependencies=[AdminDep],
    responses=responses(401, 403, 413),
)
def import_result(
    document: Annotated[dict[str, Any], Body()], session: SessionDep, settings: SettingsDep
) -> Imported:
    """A signed offline result (``coverfarm runner run-bundle`` on an enrolled host) for a known bundle."""
    return runs.import_document(session, document, settings)


# A batch import's body is an offline run's whole directory, hundreds of results of about 50 KB each,
# stored in one transaction (all or none): the app includes this router with a limit of its own,
# COVERFARM_MAX_IMPORT_BYTES, where every other body has COVERFARM_MAX_BODY_BYTES.
imports_router = APIRouter(tags=["devices"], route_class=StrictJSONRoute)


@imports_router.post(
    "/results/import-batch",
    status_code=status.HTTP_201_CREATED,
    dependencies=[AdminDep],
    responses=responses(401, 403, 413),
)
def import_batch(body: ImportBatch, session: SessionDep, settings: SettingsDep) -> ImportedBatch:
    """An offline run's signed results, stored all together or, on any refusal, not at all."""
    return runs.import_batch(session, body.results, settings)


@router.get("/sweeps/{sweep_id:int}/device-bundles", dependencies=[AdminDep], responses=responses(401, 404))
def sweep_bundles(
    sweep_id: Id,
    device_class: Annotated[Name, Query()],
    session: SessionDep,
    settings: SettingsDep,
) -> list[DeviceBundle]:
    """The bundles a host of ``device_class`` should run for the sweep, with the cells each serves."""
    return runs.sweep_bundles(session, sweep_id, device_class, settings)


def _stored_bundle(request: Request, sha256: str) -> ArtifactStore:
    """The artifact store, once ``sha256`` is a well-formed address of a bundle it holds (else 422, 404)."""
    store = _store(request)
    try:
        check_sha(sha256)
    except ArtifactError as error:
        raise Unprocessable(str(error), ("path", "sha256")) from None
    if not store.has(sha256):
        raise Missing(f"bundle {sha256} is not in the artifact store")
    return store


@router.get(
    "/artifacts/{sha256}",
    dependencies=[RunnerOrAdminDep],
    response_class=StreamingResponse,
    responses={**responses(401, 403, 404), 200: {"content": {"application/x-tar": {}}}},
)
def artifact(sha256: Text, request: Request) -> StreamingResponse:
    """The bundle as an uncompressed tar; the runner verifies its sha256 after unpacking."""
    store = _stored_bundle(request, sha256)
    return StreamingResponse(store.tar_stream(sha256), media_type="application/x-tar")


@router.get(
    "/artifacts/{sha256}/{name:path}",
    dependencies=[RunnerOrAdminDep],
    response_class=FileResponse,
    responses={**responses(401, 403, 404), 200: {"content": {"application/octet-stream": {}}}},
)
def artifact_file(sha256: Text, name: Text, request: Request) -> FileResponse:
    """One file of a stored bundle by its path inside it: a lowered program is
    ``programs/<program>.pte``, the manifest ``manifest.json``."""
    store = _stored_bundle(request, sha256)
    try:
        found = store.file(sha256, name)
    except NotStored as error:
        raise Missing(str(error)) from None
    except ArtifactError as error:
        raise Unprocessable(str(error), ("path", "name")) from None
    return FileResponse(found, media_type="application/octet-stream", filename=found.name)
