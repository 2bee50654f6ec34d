"""End to end with the real engine: act on Vulkan and XNNPACK, submitted through the API, run by a real
worker, reported as the tracker's Markdown with the engine's numbers."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from farmtools import StartWorker, sweep_done, wait_for

from coverfarm.tracker import backend_title

REAL_ENGINE = "worker.engine:analyze"


@pytest.mark.real_policy
@pytest.mark.timeout(2400)
def test_act_on_vulkan_and_xnnpack_through_the_farm(api: httpx.Client, start_worker: StartWorker) -> None:
    # The worker (and the stage processes it starts) share the session's trace cache (tests/conftest.py),
    # so act is traced once for both backends and for any other test that already traced it.
    assert os.environ.get("COVERFARM_TRACE_CACHE")
    start_worker("w-real", COVERFARM_ENGINE=REAL_ENGINE)
    response = api.post(
        "/api/sweeps",
        json={
            "policies": ["act"],
            "backends": ["vulkan", "xnnpack"],
            # Stock Vulkan lowering of act rebuilds its pattern graphs per partition (minutes);
            # "fast" caches them and lowers to the byte-identical program (worker.lowering.pattern_cache).
            "options": {"lowering": "fast"},
            "timeout_s": 900,
        },
    )
    assert response.status_code == 201, response.text
    sweep_id = response.json()["id"]
    sweep: dict[str, Any] = wait_for(lambda: sweep_done(api, sweep_id), 2100, "act on both backends")
    cells = {cell["backend"]: cell for cell in sweep["cells"]}
    assert set(cells) == {"vulkan", "xnnpack"}
    for backend, cell in cells.items():
        assert cell["state"] == "ok", cell["jobs"]
        result = cell["result"]
        assert result["export_status"] == "ok"
        assert result["ops_total"] > 1000  # act has ~1.5k edge ops (tracker)
        assert 0 < result["ops_on_backend"] <= result["ops_total"]
        document = result["document"]
        assert (document["policy"], document["backend"]) == ("act", backend)
        assert document["options"]["constant_prop"] is True
        assert document["options"]["lowering"] == "fast"
        # The row of this backend's tracker body carries the engine's own numbers and its export ✓.
        report = api.get(f"/api/sweeps/{sweep_id}/report.md", params={"backend": backend}).text
        assert f"## {backend_title(backend)}: " in report
        rows = [line for line in report.splitlines() if line.startswith("| act |")]
        assert len(rows) == 1, report
        assert f"| act | {result['ops_on_backend']} / {result['ops_total']} (" in rows[0]
        assert [part.strip() for part in rows[0].split("|")][5] == "✓", rows[0]
