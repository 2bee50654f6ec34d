"""A device result's numerics run reaches the report and the cell's details as "which op goes wrong": the
first op whose output departs from eager with its error, how the error grows, and a runtime Known-issues
row naming the op with its one-op repro; the cell's latency stays the timed runs'. The numerics run is a
recorded one (tests/orchestrator/devices/recorded/README.md: the stand-in, the executorch wheel's
pybindings with a debug buffer, on the tiny XNNPACK bundle whose ``obs`` computes its linear layer with
altered weights)."""

from __future__ import annotations

import json
from pathlib import Path

from devicetools import CLASS, device_result, enrol, lower_with_bundle
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from test_runtime_issues import text_of

from coverfarm.numerics import NumericsRun
from coverfarm.settings import Settings
from farmrun.signing import new_key_pair, sign

SPAN = "(2 ops linear … relu in one XnnpackBackend call)"
RECORDED = Path(__file__).resolve().parent / "recorded" / "tiny-xnnpack-altered-wheel-etdump.numerics.json"


def test_the_report_and_the_cells_details_say_which_op_goes_wrong_from_a_recorded_numerics_run(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    recorded = json.loads(RECORDED.read_text())
    run = NumericsRun.model_validate(recorded)
    summary = run.summary
    assert summary is not None and summary.first is not None
    first = summary.first
    assert (first.program, first.op, first.where, first.span) == (
        "obs",
        "aten.relu.default",
        "XnnpackBackend",
        2,
    )
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, signing_key=public_key)
    body = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    (cell,) = sweep["cells"]
    bundle = lower_with_bundle(sessions, settings, cell["jobs"][0]["id"], "act", tmp_path / "a")
    before = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "Which op goes wrong" not in before and "departs from eager" not in before

    document = device_result(bundle.sha256, 25.0)
    document["numerics"] = recorded
    stored = client.post("/api/results/import", headers=admin, json=sign(document, runner_id, private_key))
    assert stored.status_code == 201, stored.text

    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "| ~25 ms |" in report  # the latency is the timed runs'
    error = f"{first.max_abs_error:.3g}"
    # the runtime Known-issues row: the op, its error, the policy and class, the one-op repro
    on_device = report.split("#### On the device", 1)[1].split("####", 1)[0]
    (row,) = [line for line in on_device.splitlines() if line.startswith("| `aten.relu.default`")]
    assert "output departs from eager first at `obs: aten.relu.default (2 ops linear … relu in one " in row
    assert f"max abs error {error}, may be {first.bound:.3g}" in row
    assert f"| act | {CLASS} |" in row and "python -m worker.repros.numerics RESULT.json OUT" in row

    section = report.split("#### Which op goes wrong", 1)[1]
    assert f"**act** on {CLASS}, numerics run (its output was wrong) by {run.runtime}:" in section
    assert (
        "first departs from eager: `aten.relu.default` (2 ops linear … relu in one XnnpackBackend call) "
        in section
    )
    assert (
        f"of obs on XnnpackBackend, max abs error {error} (may be {first.bound:.3g}: atol 0.001, rtol 0.001)"
        in section
    )
    assert (
        "Captured: per op for ops on the runtime's CPU (portable) kernels; one output per delegate call"
        in section
    )
    # the growth: the delegate's output, then the CPU-left cumsum it feeds; step's error is none
    cumsum = next(op for op in summary.ops if op.op == "aten.cumsum.default")
    assert f"| obs | `aten.relu.default` {SPAN} | XnnpackBackend | {error} |" in section
    assert f"| obs | `aten.cumsum.default` (cumsum) | cpu | {cumsum.max_abs_error:.3g} |" in section

    page = text_of(client.get(f"/cells/{cell['id']}").text)
    details = page.split("Which op goes wrong", 1)[1]
    assert f"A numerics run (its output was wrong) by {run.runtime}." in details
    assert "first departs from eager: aten.relu.default (2 ops linear … relu" in details
    assert f"max abs error {error}" in details
    assert f"aten.cumsum.default (cumsum) cpu {cumsum.max_abs_error:.3g}" in details, details[:1500]

    # A run the Inspector could not pair, paired by debug handle: the report and the page say so, and
    # the delegate call's entry says where its departure was seen.
    handled = json.loads(RECORDED.read_text())
    handled["summary"]["pairing"] = "by debug handle, for obs (IndexError: list index out of range)"
    handled["summary"]["first"]["seen_at"] = "cumsum"
    document["numerics"] = handled
    stored = client.post("/api/results/import", headers=admin, json=sign(document, runner_id, private_key))
    assert stored.status_code == 201, stored.text
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    section = report.split("#### Which op goes wrong", 1)[1]
    assert "Paired by debug handle, for obs (IndexError: list index out of range)." in section
    assert "in one XnnpackBackend call, seen at cumsum, which reads it)" in section
    page = text_of(client.get(f"/cells/{cell['id']}").text)
    assert "Paired by debug handle, for obs (IndexError: list index out of range)." in page
