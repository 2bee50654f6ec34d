"""An offline run's whole directory of signed results in one import, on a real Postgres: hundreds of
results of the size real ones have (about 50 KB) go through the batch route's own body limit
(COVERFARM_MAX_IMPORT_BYTES) and are stored in one transaction, all of them or, on one refusal, none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devicetools import device_result, enrol, lower_with_bundle
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from coverfarm.signing import new_key_pair, sign
from dashboard.app import create_app
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
    return [
        sign(full_size(sha, policy, 2.0 + i / 1000), runner_id, private_key)
        for i in range(RESULTS)
        for policy, sha in [bundles[i % len(bundles)]]
    ]


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
