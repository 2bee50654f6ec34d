"""A host that cannot reach the farm, end to end, with real processes: an admin enrols it offline and
writes its credential file, `sweep bundles` writes the bundles its class should run, `runner run-bundle`
over that directory signs a result per bundle, and `results import` verifies and stores them all or
none. The farm keeps only the runner's public key, so its database cannot forge a result."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
from farmkit import sweep_done, wait_for
from runnertools import run_cli
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from farmrun.signing import public_key_of, sign
from orchestrator.models import Cell, DeviceRun, Event, Runner

CLASS = f"cpu-{os.uname().machine}-xnnpack"


def device_runs(sessions: sessionmaker[Session], sweep_id: int) -> int:
    """Device runs stored for the sweep's cells (the farm's database is shared by the session's tests)."""
    with sessions() as session:
        cells = select(Cell.id).where(Cell.sweep_id == sweep_id)
        return (
            session.scalar(select(func.count()).select_from(DeviceRun).where(DeviceRun.cell_id.in_(cells)))
            or 0
        )


def test_offline_host_runs_a_sweeps_bundles_and_its_signed_results_are_imported(
    api: httpx.Client, cpu_worker: None, farm_env: dict[str, str], farm_sessions: sessionmaker[Session],
    tmp_path: Path,
) -> None:  # fmt: skip
    response = api.post("/api/sweeps", json={"policies": ["act", "vqbet"], "backends": ["xnnpack"]})
    assert response.status_code == 201, response.text
    sweep_id = int(response.json()["id"])
    wait_for(lambda: sweep_done(api, sweep_id), 300, "the sweep's lowering")

    url = str(api.base_url).rstrip("/")
    credential = tmp_path / "host.json"
    enrolled = run_cli(farm_env, "runner", "enrol-offline", "--name", "air-gapped", "--classes", CLASS,
                       "--out", str(credential), "--url", url)  # fmt: skip
    assert enrolled.returncode == 0, enrolled.stderr
    assert stat.S_IMODE(credential.stat().st_mode) == 0o600
    config = json.loads(credential.read_text())
    runner_id = config["runner_id"]
    again = run_cli(farm_env, "runner", "enrol-offline", "--name", "x", "--classes", CLASS,
                    "--out", str(credential), "--url", url)  # fmt: skip
    assert again.returncode == 2 and "exists" in again.stderr
    with farm_sessions() as session:
        runner = session.get(Runner, runner_id)
        assert runner is not None and runner.state == "offline" and runner.device_classes == [CLASS]
        # The farm holds the public half only.
        assert runner.signing_key == public_key_of(config["signing_key"]) != config["signing_key"]

    bundles = tmp_path / "bundles"
    written = run_cli(
        farm_env, "sweep", "bundles", str(sweep_id), "--class", CLASS, "--out", str(bundles), "--url", url
    )
    assert written.returncode == 0, written.stderr
    listed = json.loads((bundles / "bundles.json").read_text())
    assert listed["device_class"] == CLASS and {b["policy"] for b in listed["bundles"]} == {"act", "vqbet"}
    foreign = run_cli(farm_env, "sweep", "bundles", str(sweep_id), "--class", "mali-g610-vulkan",
                      "--out", str(tmp_path / "none"), "--url", url)  # fmt: skip
    assert foreign.returncode == 2 and "no bundle for mali-g610-vulkan" in foreign.stderr

    results = tmp_path / "results"
    ran = run_cli(farm_env, "runner", "run-bundle", str(bundles), "--out", str(results), "--config",
                  str(credential), "--runtime", "python", "--min-chunks", "3", "--min-seconds", "0",
                  "--replicas", "1")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    files = sorted(results.glob("*.json"))
    assert len(files) == 2
    assert all(json.loads(f.read_text())["signature"]["runner_id"] == runner_id for f in files)

    # One tampered result refuses the whole directory, and nothing is written.
    tampered_dir = tmp_path / "tampered"
    tampered_dir.mkdir()
    for f in files:
        (tampered_dir / f.name).write_text(f.read_text())
    doc = json.loads(files[1].read_text())
    doc["status"] = "failed" if doc["status"] == "ok" else "ok"
    (tampered_dir / files[1].name).write_text(json.dumps(doc))
    refused = run_cli(farm_env, "results", "import", str(tampered_dir), "--url", url)
    assert refused.returncode == 2 and "result 2 of 2" in refused.stderr and "bad signature" in refused.stderr
    assert device_runs(farm_sessions, sweep_id) == 0

    # A result for a class the signer does not serve is refused, though correctly signed.
    other = json.loads(files[0].read_text())
    other.pop("signature")
    other["device_class"] = "cpu-riscv64-xnnpack"
    (tmp_path / "foreign.json").write_text(json.dumps(sign(other, runner_id, config["signing_key"])))
    foreign_result = run_cli(farm_env, "results", "import", str(tmp_path / "foreign.json"), "--url", url)
    assert foreign_result.returncode == 2 and "does not serve" in foreign_result.stderr
    # And one for a bundle no cell produced.
    unknown = json.loads(files[0].read_text())
    unknown.pop("signature")
    unknown["bundle_sha256"] = "0" * 64
    (tmp_path / "unknown.json").write_text(json.dumps(sign(unknown, runner_id, config["signing_key"])))
    unknown_result = run_cli(farm_env, "results", "import", str(tmp_path / "unknown.json"), "--url", url)
    assert unknown_result.returncode == 2 and "not one the farm knows" in unknown_result.stderr
    assert device_runs(farm_sessions, sweep_id) == 0

    with farm_sessions() as session:
        events_before = session.scalar(select(func.max(Event.id))) or 0
    stored = run_cli(farm_env, "results", "import", str(results), "--url", url)
    assert stored.returncode == 0, stored.stderr
    assert "stored 2 results" in stored.stdout
    assert device_runs(farm_sessions, sweep_id) == 2
    with farm_sessions() as session:
        cells = select(Cell.id).where(Cell.sweep_id == sweep_id)
        runs = session.scalars(select(DeviceRun).where(DeviceRun.cell_id.in_(cells))).all()
        assert {(r.device_class, r.source, r.runner_id) for r in runs} == {(CLASS, "import", runner_id)}
        # this sweep's events: the session's farm serves other tests' sweeps and runners meanwhile
        kinds = session.scalars(
            select(Event.kind).where(Event.id > events_before, Event.sweep_id == sweep_id)
        ).all()
        assert kinds.count("device") == 2  # one per stored cell, for an open grid
    cells = api.get(f"/api/sweeps/{sweep_id}").json()["cells"]
    assert len(cells) == 2
