"""The runner's credential file (``$COVERFARM_HOME/runner.json`` or ``--config``), written 0600.

It holds the orchestrator's URL, the runner id and credential the orchestrator issued at enrolment, the
device classes it was enrolled for, the broker to consume, and the runner's private signing key (the farm
holds only its public half). An offline runner's file (``coverfarm runner enrol-offline``, written by an
admin and carried to the host) has no usable credential: it only signs results. No torch, no ExecuTorch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from coverfarm.errors import UserError


class RunnerConfig(BaseModel):
    url: str
    runner_id: int
    credential: str  # "<runner id>.<secret>"
    name: str
    device_classes: list[str]
    broker_url: str | None = None  # None: the embedded default's filesystem broker in COVERFARM_HOME
    heartbeat_interval_s: float = 15.0
    device_timeout_s: float = 900.0
    baseline: bool = True  # takes eager-baseline jobs when torch and lerobot are installed (register's probe)
    signing_key: str | None = None  # Ed25519 private key (hex) that signs its offline results
    offline: bool = False  # enrolled offline: signs results for `coverfarm results import`, takes no jobs

    @property
    def secret(self) -> str:
        return self.credential.partition(".")[2]


def save(config: RunnerConfig, path: Path, replace: bool = True) -> None:
    """Write ``config`` readable by its owner only (created 0600, never world-readable in between);
    with ``replace=False`` an existing file is refused."""
    if not replace and path.exists():
        raise UserError(f"{path} exists: choose another --out, or remove it first")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(config.model_dump_json(indent=2) + "\n")
    temporary.replace(path)


def load(path: Path) -> RunnerConfig:
    try:
        return RunnerConfig.model_validate(json.loads(path.read_text()))
    except FileNotFoundError:
        raise UserError(f"no runner credential at {path}: run `coverfarm runner register` first") from None
    except (ValueError, ValidationError) as error:
        raise UserError(f"{path} is not a runner credential file: {error}") from None


def load_if_present(path: Path) -> RunnerConfig | None:
    return load(path) if path.exists() else None
