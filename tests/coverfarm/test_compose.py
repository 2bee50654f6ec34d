"""docker-compose.yml read as YAML (no container engine runs here): the orchestrator and every CPU worker
see one artifact store, so a bundle a worker stores is one the orchestrator serves to device runners."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def services() -> dict[str, dict[str, Any]]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def runs(service: dict[str, Any], command: str) -> bool:
    return service.get("command", [])[:2] == ["coverfarm", command]


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """container path -> volume name, for named volumes."""
    return {spec.split(":")[1]: spec.split(":")[0] for spec in service.get("volumes", [])}


def test_the_orchestrator_and_the_workers_share_one_artifact_store() -> None:
    farm = services()
    serving = [s for s in farm.values() if runs(s, "serve")]
    workers = [s for s in farm.values() if runs(s, "worker")]
    assert len(serving) == 1 and workers
    stores = set()
    for service in serving + workers:
        artifact_dir = service["environment"]["COVERFARM_ARTIFACT_DIR"]
        home = service["environment"]["COVERFARM_HOME"]
        assert not artifact_dir.startswith(home.rstrip("/") + "/"), "the store must not sit in a private home"
        assert artifact_dir in mounts(service), f"{artifact_dir} is not a mounted volume"
        stores.add(mounts(service)[artifact_dir])
    assert len(stores) == 1, f"the store is not one volume: {stores}"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert stores <= set(compose["volumes"])
