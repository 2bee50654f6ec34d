"""A device result's profile reaches the report and the cell's details as "where the time goes": the
split per delegate, CPU-left ops, runtime and hand-over, and the top ops, each CPU-left op with its
blocker group; the cell's latency stays the timed runs'. The profile is a recorded one
(tests/orchestrator/devices/recorded/README.md: recorded with the stand-in profiler, the executorch wheel's
pybindings, on the tiny XNNPACK bundle)."""

from __future__ import annotations

import json
from pathlib import Path

from devicetools import CLASS, device_result, enrol, lower_with_bundle
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.profile import ProfileRun
from coverfarm.result import Blocker
from coverfarm.settings import Settings
from coverfarm.tracker import milliseconds, share_percent
from farmrun.signing import new_key_pair, sign

RECORDED = Path(__file__).resolve().parent / "recorded" / "tiny-xnnpack-wheel-etdump.profile.json"
REASON = "no operator implementation"


def test_the_report_and_the_cells_details_say_where_the_time_goes_from_a_recorded_profile(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    recorded = json.loads(RECORDED.read_text())
    run = ProfileRun.model_validate(recorded)
    summary = run.summary
    assert summary is not None and run.chunk_ms is not None
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, signing_key=public_key)
    body = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    (cell,) = sweep["cells"]
    blocker = Blocker(op="aten.cumsum.default", reason=REASON, count=1, macs=0)
    bundle = lower_with_bundle(
        sessions, settings, cell["jobs"][0]["id"], "act", tmp_path / "a", blockers=[blocker]
    )
    before = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "Where the time goes" not in before

    document = device_result(bundle.sha256, 25.0)
    document["profile"] = recorded
    stored = client.post("/api/results/import", headers=admin, json=sign(document, runner_id, private_key))
    assert stored.status_code == 201, stored.text

    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    # the latency is the timed runs' (one replica: no interval, hence ~), whatever the profile took
    assert "| ~25 ms |" in report
    section = report.split("#### Where the time goes", 1)[1]
    assert f"**act** on {CLASS}, profiled by {run.runtime}:" in section
    assert run.runtime.startswith("stand-in: the executorch wheel's pybindings with enable_etdump")
    (delegate,) = summary.delegates
    chunk = run.chunk_ms
    cpu = share_percent(summary.cpu_ops_ms / chunk)
    assert f"{cpu} of the chunk on the CPU: XnnpackBackend {milliseconds(delegate.ms)}, " in section
    assert f"| XnnpackBackend (3 calls) | {milliseconds(delegate.ms)} |" in section
    assert f"| CPU-left ops | {milliseconds(summary.cpu_ops_ms)} | {cpu} |" in section
    assert f"| hand-over between programs | {milliseconds(chunk - summary.execute_ms)} |" in section
    assert f"| chunk | {milliseconds(chunk)} | 100% |" in section
    (cumsum,) = [op for op in summary.top_ops if op.where == "cpu"]
    assert f"| `aten.cumsum.default` | cpu | {milliseconds(cumsum.ms)} | 1 | {REASON} (no repro) |" in section
    gemm = next(op for op in summary.top_ops if op.name.startswith("Fully Connected"))
    assert f"| `{gemm.name}` | XnnpackBackend | {milliseconds(gemm.ms)} | {gemm.calls} | - |" in section

    page = client.get(f"/cells/{cell['id']}").text
    details = page.split("Where the time goes", 1)[1]
    assert CLASS in details and "Profiled by stand-in: the executorch wheel" in details
    assert "<code>aten.cumsum.default</code></td><td>cpu</td>" in details
    assert f"{REASON} (no repro)" in details
    assert "not the cell&#39;s latency" in details or "not the cell's latency" in details
