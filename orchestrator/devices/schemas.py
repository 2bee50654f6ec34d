"""What clients and runners send and get back about runners, tokens, device jobs and imports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import DeviceResult, ProbeReport
from orchestrator.inputs import Count, Name, Number, Text
from orchestrator.models import RunnerState


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # None: the farm's COVERFARM_ENROLMENT_TOKEN_TTL_S. At most 30 days.
    expires_in_s: Number | None = Field(None, gt=0, le=30 * 86400)


class TokenIssued(BaseModel):
    token: str  # shown once; the farm keeps only its sha256
    expires_at: datetime


SigningKey = Annotated[Text, Field(pattern=r"^[0-9a-f]{64}$", description="Ed25519 public key, hex")]


class Enrol(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: Text = Field(min_length=1, max_length=200)
    name: Text = Field(min_length=1, max_length=255)
    probe: ProbeReport
    signing_key: SigningKey | None = None  # verifies the runner's signed offline results


class OfflineEnrol(BaseModel):
    """An admin enrolling a host that cannot reach the farm: it signs results for `results import`."""

    model_config = ConfigDict(extra="forbid")

    name: Text = Field(min_length=1, max_length=255)
    device_classes: list[Name] = Field(min_length=1, max_length=16)
    signing_key: SigningKey


class OfflineEnrolled(BaseModel):
    runner_id: int
    name: str
    device_classes: list[str]
    state: RunnerState


class Enrolled(BaseModel):
    runner_id: int
    credential: str  # "<runner id>.<secret>", shown once; the farm keeps only the secret's sha256
    device_classes: list[str]
    state: RunnerState
    broker_url: str | None  # the queues to consume; None: the embedded default's filesystem broker
    heartbeat_interval_s: float
    device_timeout_s: float


class RunnerStatus(BaseModel):
    runner_id: int
    state: RunnerState
    state_reason: str | None


class RunnerPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    device_classes: list[str]
    state: RunnerState
    state_reason: str | None
    state_changed_at: datetime | None
    enrolled_at: datetime
    last_heartbeat: datetime | None
    probe: dict[str, Any]


class HealthCheck(BaseModel):
    device_class: str
    sha256: str


class HealthReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device_class: Name
    sha256: Text
    result: DeviceResult


class Claim(BaseModel):
    job_id: int
    attempt: int
    device_class: str
    kind: Literal["run", "baseline"] = "run"  # run the bundle, or time eager PyTorch on the host's CPU
    bundle_sha256: str
    timeout_s: float
    policy: str
    options: dict[str, Any]  # the cell's coverfarm.result.Options: a baseline builds the policy with them


class AttemptRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: Count = Field(ge=1)


class RunReport(AttemptRef):
    result: DeviceResult


class BaselineReport(AttemptRef):
    baseline: BaselineResult


class InfraError(AttemptRef):
    error: Text = Field(min_length=1, max_length=20000)


class Alive(BaseModel):
    alive: bool


class Imported(BaseModel):
    kind: Literal["device_result", "baseline"] = "device_result"
    runner_id: int
    device_class: str  # a baseline: the classes of the runner's runs it pairs with, comma-separated
    bundle_sha256: str | None  # None for a baseline
    cells: list[int]


class ImportBatch(BaseModel):
    """Signed results made offline, stored all together or not at all."""

    model_config = ConfigDict(extra="forbid")

    # COVERFARM_MAX_IMPORT_BYTES bounds the bytes; this the count (a real result is about 50 KB).
    results: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)


class ImportedBatch(BaseModel):
    imported: list[Imported]


class DeviceBundle(BaseModel):
    """A bundle a device class should run for a sweep, and the cells whose device result it gives."""

    bundle_sha256: str
    policy: str
    backend: str
    cells: list[int]
