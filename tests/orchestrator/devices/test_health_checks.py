"""Each class's health check runs the shipped bundle of that class's backend (a real Postgres).

The runner's own ``health_check`` runs here against the app in-process: it fetches the bundle, runs it
in a real ``run-bundle`` process and reports. This host's runtime (the pip wheel) has no
``VulkanBackend``, so a Vulkan-only runner's check fails to load and the runner stays quarantined with
that reason, which is what a Vulkan host whose runtime is broken would see; a passing Vulkan run is
reported as a result document, as for XNNPACK (devicetools.make_healthy).
"""

from __future__ import annotations

from pathlib import Path

from devicetools import CLASS, device_result, enrol
from fastapi.testclient import TestClient

from coverfarm.digest import bundle_digest
from gpu_runner.agent import HEALTH_RULES, Timing, health_check
from gpu_runner.client import FarmClient
from gpu_runner.config import RunnerConfig
from orchestrator.artifacts.health import SHIPPED

VULKAN_CLASS = "h200-vulkan"


def checks(client: TestClient, credential: dict[str, str]) -> dict[str, str]:
    response = client.get("/api/runners/me/health-check", headers=credential)
    assert response.status_code == 200, response.text
    return {check["device_class"]: check["sha256"] for check in response.json()}


def test_a_vulkan_only_runner_gets_the_vulkan_bundle_and_stays_quarantined_when_it_cannot_run_it(
    client: TestClient, admin: dict[str, str], tmp_path: Path
) -> None:
    runner_id, credential = enrol(client, admin, "h200", classes=[VULKAN_CLASS])
    assert checks(client, credential) == {VULKAN_CLASS: bundle_digest(SHIPPED / "vulkan")}

    config = RunnerConfig(
        url=str(client.base_url), runner_id=runner_id, name="h200", device_classes=[VULKAN_CLASS],
        credential=credential["Authorization"].removeprefix("Bearer "),
    )  # fmt: skip
    status = health_check(FarmClient(config, http=client), Timing(HEALTH_RULES), tmp_path)

    assert status["state"] == "quarantined"
    reason = status["state_reason"]
    assert reason.startswith(f"health check on {VULKAN_CLASS} failed: program health failed to load")
    assert "VulkanBackend is not registered in this ExecuTorch runtime" in reason
    (listed,) = [r for r in client.get("/api/runners", headers=admin).json() if r["id"] == runner_id]
    assert (listed["state"], listed["state_reason"]) == ("quarantined", reason)


def test_each_class_is_checked_with_its_own_backends_bundle(
    client: TestClient, admin: dict[str, str]
) -> None:
    _, credential = enrol(client, admin, "both", classes=[CLASS, VULKAN_CLASS])
    shas = checks(client, credential)
    assert shas == {
        CLASS: bundle_digest(SHIPPED / "xnnpack"),
        VULKAN_CLASS: bundle_digest(SHIPPED / "vulkan"),
    }

    # The XNNPACK bundle does not pass for the Vulkan class.
    wrong = {"device_class": VULKAN_CLASS, "sha256": shas[CLASS], "result": device_result(shas[CLASS])}
    refused = client.post("/api/runners/me/health-check", headers=credential, json=wrong)
    assert refused.status_code == 403
    assert f"is not the health-check bundle of {VULKAN_CLASS}" in refused.json()["detail"]

    sha = shas[VULKAN_CLASS]
    right = {"device_class": VULKAN_CLASS, "sha256": sha, "result": device_result(sha, 0.2)}
    passed = client.post("/api/runners/me/health-check", headers=credential, json=right).json()
    assert (passed["state"], passed["state_reason"]) == (
        "healthy",
        f"health check on {VULKAN_CLASS} passed (0.2 ms per chunk)",
    )
