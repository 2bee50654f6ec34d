"""Worker views."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from orchestrator.models import WorkerState


class WorkerPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    queues: list[str]
    state: WorkerState
    state_reason: str | None
    state_changed_at: datetime | None
    started_at: datetime
    last_heartbeat: datetime
