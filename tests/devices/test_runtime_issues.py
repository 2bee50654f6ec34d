"""A device runtime's refusal reaches the report: the cell reads the runtime's own check in a short form,
"Built on" says which runtime ran against which export, and Known issues gets the runtime section with
the op, the message, the policies and device classes hit, and the one-op repro. The messages are the
ones the H200's executor_runner printed (tests/gpu_runner/recorded/)."""

from __future__ import annotations

from pathlib import Path

from devicetools import (
    CLASS,
    HOST,
    device_result,
    enrol,
    grid_device_texts,
    lower_with_bundle,
    trusted_latency,
)
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.baseline import BaselineResult
from coverfarm.device_result import LatencyStats, RuntimeIdentity
from coverfarm.result import Options
from coverfarm.settings import Settings
from coverfarm.signing import new_key_pair, sign
from gpu_runner.native_runtime import classify_exit
from orchestrator.models import Sweep

RECORDED = Path(__file__).resolve().parents[1] / "gpu_runner" / "recorded"


def test_a_refusal_is_a_short_cell_a_built_on_line_and_a_runtime_known_issue(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, signing_key=public_key)
    body = {"policies": ["act", "vqbet"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    jobs = {cell["policy"]: cell["jobs"][0]["id"] for cell in sweep["cells"]}
    refused = lower_with_bundle(sessions, settings, jobs["vqbet"], "vqbet", tmp_path / "v")
    ok = lower_with_bundle(sessions, settings, jobs["act"], "act", tmp_path / "a")

    lines = (RECORDED / "vqbet-index-tensor-refused.log").read_text().splitlines()
    failure = classify_exit("refused_at_load", "forward", -6, lines, "refused at load")
    identity = RuntimeIdentity(
        kind="native", version="1.5.0", commit="cff6f4dd32a3", export_version="1.5.1", matches_export=False,
        note="runtime native executor_runner built from cff6f4dd32 (1.5.0); export executorch 1.5.1: "
        "runtime and export differ",
    )  # fmt: skip
    failed = device_result(refused.sha256, status="failed")
    failed.update(
        policy="vqbet", error=failure.cause, failure=failure.model_dump(mode="json"),
        runtime_identity=identity.model_dump(mode="json"),
    )  # fmt: skip
    passed = device_result(ok.sha256, 25.0)
    passed["runtime_identity"] = identity.model_dump(mode="json")
    for document in (failed, passed):
        stored = client.post(
            "/api/results/import", headers=admin, json=sign(document, runner_id, private_key)
        )
        assert stored.status_code == 201, stored.text

    # The bundle runs still queued for the class have their results: withdrawn, so the sweep ends.
    state = client.get(f"/api/sweeps/{sweep['id']}").json()
    assert state["state"] == "done", state["state"]
    runs = [job for cell in state["cells"] for job in cell["jobs"] if job["stage"] == f"run:{CLASS}"]
    assert [job["status"] for job in runs] == ["cancelled", "cancelled"]

    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    where = (
        "IndexTensor.cpp:76: (indices_list->size() == 1) is false! "
        "index.Tensor: only one index tensor is supported"
    )
    assert f"| ❌ refused at load: forward: {where} |" in report
    assert "runtime native executor_runner built from cff6f4dd32 (1.5.0); export executorch 1.5.1: " in report
    assert "runtime and export differ" in report
    section = report.split("#### On the device", 1)[1]
    assert (
        f"| `aten.index.Tensor` | refused at load: `{where}` | vqbet | {CLASS} | index_tensor_none_first "
        "(reproduces: refused at load with the same message on h200-vulkan" in section
    )
    assert "act" not in section.split("|---|", 1)[1]  # act ran: not a runtime issue


def test_an_offline_hosts_signed_baseline_gives_its_run_a_speedup(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The eager baseline a host that cannot reach the farm timed comes back signed like its results,
    pairs with that runner's device runs of the policy, and gives the cell its speed-up when both sides
    are trusted measurements of that runner on that host."""
    private_key, public_key = new_key_pair()
    body = {"name": "air-gapped", "device_classes": [CLASS], "signing_key": public_key}
    runner_id = client.post("/api/runners/offline", headers=admin, json=body).json()["runner_id"]
    asked = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=asked).json()
    bundle = lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp_path)
    eager = BaselineResult(
        policy="act", options=Options(), frames=16, torch_version="2.11.0", threads=16, status="ok",
        latency=LatencyStats.model_validate(trusted_latency(70.0)), host_id=HOST,
    ).model_dump(mode="json")  # fmt: skip

    early = client.post("/api/results/import", headers=admin, json=sign(eager, runner_id, private_key))
    assert early.status_code == 422 and "no device run of act" in early.json()["detail"][0]["msg"]
    run = {**device_result(bundle.sha256, 25.0), "latency": trusted_latency(25.0), "host_id": HOST}
    stored = client.post("/api/results/import", headers=admin, json=sign(run, runner_id, private_key))
    assert stored.status_code == 201, stored.text
    tampered = {**sign(eager, runner_id, private_key), "threads": 2}
    refused = client.post("/api/results/import", headers=admin, json=tampered)
    assert refused.status_code == 403
    paired = client.post("/api/results/import", headers=admin, json=sign(eager, runner_id, private_key))
    assert paired.status_code == 201, paired.text
    assert paired.json()["kind"] == "baseline" and paired.json()["cells"] == [sweep["cells"][0]["id"]]
    with sessions() as session:
        stored_sweep = session.get(Sweep, sweep["id"])
        assert stored_sweep is not None
        assert grid_device_texts(session, stored_sweep)[("act", "xnnpack")] == {CLASS: "✓ 25 ms (2.8×)"}
