"""End to end with the real engine: act on XNNPACK, submitted through the API, run by a real worker."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from farmtools import StartWorker, sweep_done, wait_for

REAL_ENGINE = "worker.engine:analyze"


@pytest.mark.real_policy
@pytest.mark.timeout(2400)
def test_act_on_xnnpack_through_the_farm(api: httpx.Client, start_worker: StartWorker) -> None:
    start_worker("w-real", COVERFARM_ENGINE=REAL_ENGINE)
    response = api.post("/api/sweeps", json={"policies": ["act"], "backends": ["xnnpack"], "timeout_s": 900})
    assert response.status_code == 201, response.text
    sweep_id = response.json()["id"]
    sweep: dict[str, Any] = wait_for(lambda: sweep_done(api, sweep_id), 2100, "act on xnnpack to finish")
    [cell] = sweep["cells"]
    assert cell["state"] == "ok", cell["jobs"]
    result = cell["result"]
    assert result["export_status"] == "ok"
    assert result["ops_total"] > 1000  # act has ~1.5k edge ops (tracker)
    assert 0 < result["ops_on_backend"] <= result["ops_total"]
    document = result["document"]
    assert (document["policy"], document["backend"]) == ("act", "xnnpack")
    assert document["options"]["constant_prop"] is True
    report = api.get(f"/api/sweeps/{sweep_id}/report.md").text
    assert f"| act | {result['ops_on_backend']} / {result['ops_total']} (" in report
    assert report.count("✓") == 1
