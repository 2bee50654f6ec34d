"""An offline run's whole directory of signed results in one import, on a real Postgres: hundreds of
results of the size real ones have (about 50 KB) go through the batch route's own body limit
(COVERFARM_MAX_IMPORT_BYTES) and are stored in one transaction, all of them or, on one refusal, none;
through the API, and through `coverfarm results import DIR` against a real `coverfarm serve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from devicetools import CLASS, device_result, enrol, lower_with_bundle
from farmkit import settings_from
from fastapi.testclient import TestClient
from runnertools import run_cli
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from dashboard.app import create_app
from farmrun.signing import new_key_pair, sign
from orchestrator.models import DeviceRun

RESULTS = 300


def device_run_count(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(DeviceRun)) or 0


def full_size(sha: str, policy: str, median_ms: float) -> dict[str, Any]:
    """A device result as large as a real one: its raw samples (kept, every one) make most of it."""
    document = device_result(sha, median_ms)
    document["policy"] = policy
    document["latency"]["samples_ms"] = [median_ms + k * 1e-7 for k in range(3800)]
    return document


def signed_set(runner_id: int, private_key: str, bundles: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """RESULTS signed results of one runner, spread over ``bundles`` ((policy, sha256) each)."""
    return [
        sign(full_size(sha, policy, 2.0 + i / 1000), runner_id, private_key)
        for i in range(RESULTS)
        for policy, sha in [bundles[i % len(bundles)]]
    ]


def signed_results(
    client: TestClient,
    admin: dict[str, str],
    sessions: sessionmaker[Session],
    settings: Settings,
    tmp_path: Path,
) -> list[dict[str, Any]]:
    """RESULTS signed results of one offline runner, spread over the bundles of two cells."""
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, name="offline", signing_key=public_key)
    body = {"policies": ["act", "vqbet"], "backends": ["xnnpack"], "device_classes": []}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    bundles = [
        (cell["policy"], lower_with_bundle(sessions, settings, cell["jobs"][0]["id"], cell["policy"],
                                           tmp_path / cell["policy"]).sha256)
        for cell in sweep["cells"]
    ]  # fmt: skip
    return signed_set(runner_id, private_key, bundles)


def test_hundreds_of_results_import_in_one_batch_all_or_none(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    results = signed_results(client, admin, sessions, settings, tmp_path)
    size = len(json.dumps({"results": results}))
    assert size > 7 * settings.max_body_bytes, size  # a real directory's size, past the general limit
    assert len(json.dumps(results[0])) > 40_000

    # One changed result refuses the whole batch, named, and nothing of the 299 others is stored.
    tampered = [*results[:-1], {**results[-1], "status": "failed"}]
    refused = client.post("/api/results/import-batch", headers=admin, json={"results": tampered})
    assert refused.status_code == 403, refused.text[:300]
    assert f"result {RESULTS} of {RESULTS}" in refused.json()["detail"] and "bad signature" in refused.text
    assert device_run_count(sessions) == 0

    stored = client.post("/api/results/import-batch", headers=admin, json={"results": results})
    assert stored.status_code == 201, stored.text[:300]
    assert len(stored.json()["imported"]) == RESULTS
    assert device_run_count(sessions) == 2  # one row per (cell, class): the latest of each replaced the rest

    # Every other body keeps the general limit.
    single = client.post("/api/results/import", headers=admin, json={**results[0], "pad": "x" * size})
    assert single.status_code == 413


def test_the_batch_limit_is_its_own_setting(
    settings: Settings, sessions: sessionmaker[Session], admin: dict[str, str]
) -> None:
    small = settings.model_copy(update={"max_import_bytes": 3 * 1024 * 1024})
    with TestClient(create_app(small, sessions=sessions, background=False)) as client:
        past = client.post("/api/results/import-batch", headers=admin,
                           json={"results": [{"pad": "x" * (small.max_import_bytes + 1)}]})  # fmt: skip
        assert past.status_code == 413
        under = client.post("/api/results/import-batch", headers=admin,
                            json={"results": [{"pad": "x" * (small.max_body_bytes + 1)}]})  # fmt: skip
        assert under.status_code == 422, under.text[:300]  # read and refused: no signature


def test_results_import_of_a_directory_of_hundreds_through_a_real_server(
    api: httpx.Client, server: str, farm_env: dict[str, str], farm_sessions: sessionmaker[Session],
    tmp_path: Path,
) -> None:  # fmt: skip
    """`coverfarm results import DIR` as a process, against `coverfarm serve` with the general 2 MiB
    limit: one line and nothing stored on a refusal; every result stored otherwise."""
    sweep = api.post("/api/sweeps", json={"policies": ["act", "vqbet"], "backends": ["xnnpack"]}).json()
    settings = settings_from(farm_env)
    bundles = [
        (cell["policy"], lower_with_bundle(farm_sessions, settings, cell["jobs"][0]["id"], cell["policy"],
                                           tmp_path / cell["policy"]).sha256)
        for cell in sweep["cells"]
    ]  # fmt: skip
    private_key, public_key = new_key_pair()
    body = {"name": "air-gapped", "device_classes": [CLASS], "signing_key": public_key}
    enrolled = api.post("/api/runners/offline", json=body)
    assert enrolled.status_code == 201, enrolled.text
    results = signed_set(enrolled.json()["runner_id"], private_key, bundles)

    def directory(name: str, documents: list[dict[str, Any]]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        for i, document in enumerate(documents):
            (folder / f"{i:03d}.json").write_text(json.dumps(document))
        return folder

    def stored() -> int:
        with farm_sessions() as session:
            runs = select(func.count()).select_from(DeviceRun)
            return session.scalar(runs.where(DeviceRun.runner_id == enrolled.json()["runner_id"])) or 0

    tampered = directory("tampered", [*results[:150], {**results[150], "status": "failed"}, *results[151:]])
    refused = run_cli(farm_env, "results", "import", str(tampered), "--url", server, timeout=900)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("coverfarm: error: ") and f"result 151 of {RESULTS}" in line, line
    assert stored() == 0

    imported = run_cli(farm_env, "results", "import", str(directory("results", results)), "--url", server,
                       timeout=900)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert f"stored {RESULTS} results" in imported.stdout
    assert stored() == 2  # one row per (cell, class)
