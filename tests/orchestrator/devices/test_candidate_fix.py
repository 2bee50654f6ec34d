"""A runtime built with a candidate upstream fix: the host declares the pull requests applied on top of its
source (``COVERFARM_EXECUTOR_RUNNER_PATCHES``), the runner records them in the result's runtime identity,
and the farm shows them on the run's cells: the grid, the cell's details and the report read
``⚗ with #22786``."""

from __future__ import annotations

from pathlib import Path

import pytest
from devicetools import CLASS, device_result, enrol, lower_with_bundle
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from standin_executor_runner import write_standin

from coverfarm.bundle_manifest import load_manifest
from coverfarm.device_result import Board, ExecutorchInfo, ProbeReport
from coverfarm.digest import bundle_digest
from coverfarm.settings import Settings
from farmrun.signing import new_key_pair, sign
from gpu_runner.bundle_run import run_bundle, runtime_identity
from gpu_runner.declared_source import PATCHES_ENV_VAR, DeclaredSource, upstream_pulls
from gpu_runner.native.binary import describe_binary
from gpu_runner.native.runtime import NativeRuntime

ROOT = Path(__file__).resolve().parents[3]
HEALTH = ROOT / "orchestrator" / "artifacts" / "health" / "xnnpack"
FIX = "pytorch/executorch#22786"


def test_patches_are_upstream_pull_requests() -> None:
    given = "#22786, pytorch/executorch#22786 https://github.com/pytorch/executorch/pull/22790 me/et#7"
    assert upstream_pulls(given) == (FIX, "pytorch/executorch#22790", "me/et#7")
    assert upstream_pulls("  ") == ()
    with pytest.raises(ValueError, match=f"{PATCHES_ENV_VAR}: 'logical_not' is not an upstream pull request"):
        upstream_pulls("#22786,logical_not")


def test_the_runner_records_a_declared_candidate_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = write_standin(tmp_path)
    monkeypatch.setenv(PATCHES_ENV_VAR, "#22786")
    engine = NativeRuntime(binary, declared=None)
    assert engine.declared == DeclaredSource(patches=(FIX,))
    report = ProbeReport(
        board=Board(cores=2, arch="x86_64"), vulkan_status="none", executorch=ExecutorchInfo()
    )
    identity = runtime_identity(engine, report, load_manifest(HEALTH))
    assert identity.patches == [FIX]
    assert identity.note is not None and f"with {FIX} applied (a candidate fix)" in identity.note
    assert describe_binary(binary).declared_patches == [FIX]

    monkeypatch.setenv(PATCHES_ENV_VAR, "the-logical-not-fix")  # a mistake: said, and nothing runs
    assert "'the-logical-not-fix' is not an upstream pull request" in describe_binary(binary).problems[0]
    sha = bundle_digest(HEALTH)
    refused = run_bundle(HEALTH, expected_sha256=sha, runtime="native", executor_runner=binary)
    assert refused.status == "failed" and refused.failure is not None
    assert refused.failure.kind == "runtime_unavailable" and PATCHES_ENV_VAR in refused.failure.cause


def test_a_candidate_fix_runtime_is_shown_on_its_cells(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, signing_key=public_key)
    body = {"policies": ["act", "vqbet"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    cells = {cell["policy"]: cell for cell in sweep["cells"]}
    patched = lower_with_bundle(sessions, settings, cells["act"]["jobs"][0]["id"], "act", tmp_path / "a")
    plain = lower_with_bundle(sessions, settings, cells["vqbet"]["jobs"][0]["id"], "vqbet", tmp_path / "v")
    identity = {"kind": "native", "version": "1.5.1", "commit": "3b60683923", "export_version": "1.5.1"}
    note = (
        f"runtime native executor_runner built from 3b60683923 (1.5.1) with {FIX} applied (a candidate fix)"
    )
    board = Board(cpu_model="AMD EPYC", cpu_features=["avx", "avx2", "fma", "f16c"], cores=2, arch="x86_64")
    host = ProbeReport(board=board, vulkan_status="none", executorch=ExecutorchInfo(version="1.5.1"))
    with_fix = {
        **device_result(patched.sha256, 25.0),
        "runtime_identity": {**identity, "patches": [FIX], "note": note},
        "probe": host.model_dump(mode="json"),
    }
    without = {**device_result(plain.sha256, 30.0), "policy": "vqbet", "runtime_identity": identity}
    for document in (with_fix, without):
        stored = client.post(
            "/api/results/import", headers=admin, json=sign(document, runner_id, private_key)
        )
        assert stored.status_code == 201, stored.text

    grid = client.get(f"/sweeps/{sweep['id']}").text
    assert "25 ms ⚗ with #22786" in grid and "30 ms ⚗" not in grid
    assert "with #N</b>: that device run's runtime was built with upstream pull request #N applied" in grid
    details = client.get(f"/cells/{cells['act']['id']}").text
    assert "⚗ with #22786" in details and f"runtime built with {FIX} applied (a candidate fix" in details
    assert "AMD EPYC (avx, avx2, fma, f16c), 2 cores" in details  # the host's CPU and its extensions
    assert "⚗" not in client.get(f"/cells/{cells['vqbet']['id']}").text
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    # one replica each: no interval, hence ~ (docs/metrics.md, "device cell")
    assert "~25 ms ⚗ with #22786 |" in report and "~30 ms |" in report
    assert '"⚗ with #N" after a device cell' in report and note in report  # the legend and Built on
    assert f"{CLASS}: AMD EPYC (avx, avx2, fma, f16c);" in report


def test_a_candidate_fix_run_stands_beside_the_release_runtime_s_run(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    """One bundle, one class, two runtimes: the release's and one with #22786 applied. Both runs are
    kept (a cell keeps one run per class and runtime patches); the grid shows the release runtime's,
    the cell's details and the report show the candidate fix's beside it."""
    from orchestrator.models import DeviceRun

    private_key, public_key = new_key_pair()
    runner_id, _ = enrol(client, admin, signing_key=public_key)
    body = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": [CLASS]}
    sweep = client.post("/api/sweeps", headers=admin, json=body).json()
    (cell,) = sweep["cells"]
    bundle = lower_with_bundle(sessions, settings, cell["jobs"][0]["id"], "act", tmp_path / "a")
    identity = {"kind": "native", "version": "1.5.1", "commit": "3b60683923", "export_version": "1.5.1"}
    stock = {**device_result(bundle.sha256, 30.0), "runtime_identity": identity}
    fixed = {**device_result(bundle.sha256, 25.0), "runtime_identity": {**identity, "patches": [FIX]}}
    for document in (stock, fixed, {**fixed, "finished_at": "2026-12-06T12:00:00Z"}):  # the fix's, twice
        signed = sign(document, runner_id, private_key)
        assert client.post("/api/results/import", headers=admin, json=signed).status_code == 201
    with sessions() as session:
        rows = session.query(DeviceRun).filter(DeviceRun.cell_id == cell["id"]).all()
        assert sorted((row.device_class, row.runtime_patches, row.median_ms) for row in rows) == [
            (CLASS, "", 30.0), (CLASS, FIX, 25.0),
        ]  # fmt: skip

    grid = client.get(f"/sweeps/{sweep['id']}").text
    assert "30 ms" in grid and "⚗ with #22786" not in grid.split("<table", 1)[-1].split("</table>", 1)[0]
    details = client.get(f"/cells/{cell['id']}").text
    assert f"On {CLASS}</h3>" in details
    assert f"On {CLASS}, with a candidate fix (beside the run above)</h3>" in details
    assert details.index("30 ms") < details.index("25 ms ⚗ with #22786")
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "#### What a candidate fix changes on the device" in report
    assert f"| act | {CLASS} | ~30 ms | ~25 ms ⚗ with #22786 |" in report
