"""A cell lowered with a workaround (coverfarm.workarounds): its device run reads ``⚒ NAME`` on the grid,
the cell's page says the cell is not the stock lowering and why, and the report lists the workaround
with its cells; the sweep's other backend has none."""

from __future__ import annotations

from pathlib import Path

from devicetools import CLASS, device_result, enrol, lower_with_bundle
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from farmrun.signing import new_key_pair, sign

GPU_CLASS = "h200-vulkan"


def test_a_workaround_cell_says_so_wherever_its_device_run_shows(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, classes=[GPU_CLASS, CLASS], signing_key=public_key)
    body = {
        "policies": ["act"], "backends": ["vulkan", "xnnpack"], "device_classes": [GPU_CLASS, CLASS],
        "options": {"workarounds": ["group_norm_4d"]},
    }  # fmt: skip
    created = client.post("/api/sweeps", headers=admin, json=body)
    assert created.status_code == 201, created.text
    sweep = created.json()
    cells = {cell["backend"]: cell for cell in sweep["cells"]}
    for backend, device_class in (("vulkan", GPU_CLASS), ("xnnpack", CLASS)):
        job = cells[backend]["jobs"][0]["id"]
        bundle = lower_with_bundle(sessions, settings, job, "act", tmp_path / backend)
        run = {**device_result(bundle.sha256, 25.0), "policy": "act", "backend": backend}
        signed = sign({**run, "device_class": device_class}, runner_id, private_key)
        assert client.post("/api/results/import", headers=admin, json=signed).status_code == 201

    grid = client.get(f"/sweeps/{sweep['id']}").text
    # The Vulkan cell's device run says it; XNNPACK's cell of the same sweep has no workaround.
    assert grid.count(">~25 ms ⚒ group_norm_4d</a>") == 1 and grid.count(">~25 ms</a>") == 1
    assert "<b>⚒ NAME</b>: that device run's bundle was lowered with workaround NAME" in grid  # the legend
    details = client.get(f"/cells/{cells['vulkan']['id']}").text
    assert "⚒ group_norm_4d" in details
    assert "<b>Workaround</b> group_norm_4d: each 3-D (N, C, L) native_group_norm" in details
    assert "not the stock lowering" in details and "writes zeros for a 3-D input" in details
    assert "⚒" not in client.get(f"/cells/{cells['xnnpack']['id']}").text
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "~25 ms ⚒ group_norm_4d |" in report and '"⚒ NAME" after a device cell' in report
    assert "⚒ Lowered with workaround group_norm_4d: each 3-D" in report and "for act/vulkan:" in report


def test_a_failed_run_names_the_workaround_that_avoids_its_finding(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    """multi_task_dit's stock Vulkan refusal, in the runtime's words, on a cell lowered without
    workarounds: its page names ``logical_not_as_bitwise_not`` and how to lower with it; a refusal no
    workaround is for names none."""
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, classes=[GPU_CLASS], signing_key=public_key)
    body = {"policies": ["act", "vqbet"], "backends": ["vulkan"], "device_classes": [GPU_CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    cells = {cell["policy"]: cell for cell in sweep["cells"]}
    said = {
        "act": "In function build_graph(), assert failed (VK_HAS_OP(op_name)): Missing operator: "
        "aten.logical_not.default",
        "vqbet": "IndexTensor.cpp:76: (indices_list->size() == 1) is false!",
    }
    for policy, message in said.items():
        bundle = lower_with_bundle(
            sessions, settings, cells[policy]["jobs"][0]["id"], policy, tmp_path / policy
        )
        failure = {
            "kind": "refused_at_load", "program": "observation", "message": message,
            "cause": f"program observation refused at load: {message}",
        }  # fmt: skip
        run = {**device_result(bundle.sha256, status="failed"), "policy": policy, "backend": "vulkan"}
        run |= {"device_class": GPU_CLASS, "failure": failure, "error": failure["cause"]}
        assert client.post(
            "/api/results/import", headers=admin, json=sign(run, runner_id, private_key)
        ).is_success

    refused = client.get(f"/cells/{cells['act']['id']}").text
    assert "A recorded workaround avoids this finding</b>: <code>logical_not_as_bitwise_not</code>" in refused
    assert "Lower again with <code>--workaround logical_not_as_bitwise_not</code>" in refused
    assert "layer_norm_affine" not in refused and "group_norm_4d" not in refused
    assert "A recorded workaround avoids" not in client.get(f"/cells/{cells['vqbet']['id']}").text
