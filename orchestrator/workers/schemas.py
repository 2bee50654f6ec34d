"""Worker views."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from orchestrator.models import WorkerState


class WorkerPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    queues: list[str]
    stack: str  # coverfarm.stacks: the stack its environment is
    versions: dict[str, str] | None  # the package versions of that environment
    memory_gb: float | None  # the memory each of its jobs can count on (its usable memory / concurrency)
    state: WorkerState
    state_reason: str | None
    state_changed_at: datetime | None
    started_at: datetime
    last_heartbeat: datetime
