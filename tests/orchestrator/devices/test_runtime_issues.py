"""A device runtime's refusal reaches the report: the cell reads the runtime's own check in a short form,
"Built on" says which runtime ran against which export, and Known issues gets the runtime section with
the op, the message, the policies and device classes hit, and the one-op repro. The messages are the
ones the H200's executor_runner printed (tests/gpu_runner/recorded/)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

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
from coverfarm.device_words import MORE
from coverfarm.result import Bundle, Options
from coverfarm.settings import Settings
from farmrun.signing import new_key_pair, sign
from gpu_runner.native.failures import classify_exit
from orchestrator.models import Sweep

RECORDED = Path(__file__).resolve().parents[2] / "gpu_runner" / "recorded"


def text_of(page: str) -> str:
    """A page's text, tags dropped and white space collapsed."""
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", page).split()))


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

    # The grid's cell keeps the check that failed, its tooltip the runtime's whole sentence.
    grid = client.get(f"/sweeps/{sweep['id']}").text
    assert f"❌ refused at load: forward: IndexTensor.cpp:76 {MORE}" in text_of(grid)
    assert f'refused at load: forward: {where}">' in html.unescape(grid)  # the tooltip ends with it

    # The cell's page shows the failure in the runtime's own words, and the run that passed in full.
    vqbet = next(cell["id"] for cell in state["cells"] if cell["policy"] == "vqbet")
    page = client.get(f"/cells/{vqbet}").text
    assert f"refused at load: forward: {where}" in text_of(page)
    assert "Speed-up</strong>: none: the device run failed" in page
    assert "The runtime's own words (forward)" in page
    assert failure.message is not None and failure.message in text_of(page)
    assert "Its last lines (signal 6)" in page or "Its last lines (exit status" in page


def offline_act(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path, device_classes: list[str],
) -> tuple[int, str, dict[str, Any], Bundle, dict[str, Any]]:  # fmt: skip
    """An offline runner of CLASS (its id and private key), a sweep of act on XNNPACK asking for
    ``device_classes``, its lowered bundle, and an eager baseline document of 70 ms from that host."""
    private_key, public_key = new_key_pair()
    body = {"name": "air-gapped", "device_classes": [CLASS], "signing_key": public_key}
    runner_id = client.post("/api/runners/offline", headers=admin, json=body).json()["runner_id"]
    asked = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": device_classes}
    sweep = client.post("/api/sweeps", headers=admin, json=asked).json()
    bundle = lower_with_bundle(sessions, settings, sweep["cells"][0]["jobs"][0]["id"], "act", tmp_path)
    eager = BaselineResult(
        policy="act", options=Options(), frames=16, torch_version="2.11.0", threads=16, status="ok",
        latency=LatencyStats.model_validate(trusted_latency(70.0)), host_id=HOST,
    ).model_dump(mode="json")  # fmt: skip
    return runner_id, private_key, sweep, bundle, eager


def test_an_offline_hosts_signed_baseline_gives_its_run_a_speedup(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The eager baseline a host that cannot reach the farm timed comes back signed like its results,
    pairs with that runner's device runs of the policy, and gives the cell its speed-up when both sides
    are trusted measurements of that runner on that host."""
    runner_id, private_key, sweep, bundle, eager = offline_act(
        client, admin, sessions, settings, tmp_path, [CLASS]
    )

    early = client.post("/api/results/import", headers=admin, json=sign(eager, runner_id, private_key))
    assert early.status_code == 422 and "no device run of act" in early.json()["detail"][0]["msg"]
    run = {**device_result(bundle.sha256, 25.0), "latency": trusted_latency(25.0), "host_id": HOST}
    load = {"cores": 16, "window_s": 2.5, "loadavg_1m_start": 0.1, "loadavg_1m_end": 0.2, "busy_cores": 1.0,
            "own_cores": 0.96, "other_cores": 0.04}  # fmt: skip
    run["latency"]["replicas"][0]["host_load"] = load
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
        assert grid_device_texts(session, stored_sweep)[("act", "xnnpack")] == {
            CLASS: "✓ 25 ms (2.8×, 2.7–2.9)"
        }

    # The cell's page: both sides' figures, intervals, replicas, jitter and host load, and the speed-up.
    page = text_of(client.get(f"/cells/{sweep['cells'][0]['id']}").text)
    assert "Speed-up : 2.8× (2.7–2.9), known within ±10% (eager figure over device figure)" in page
    assert "Device run ok Figure 25 ms per chunk (median of the replica medians)" in page
    assert "Interval 24.75–25.25 ms (2 replicas, 50% coverage), known within ±10%" in page
    assert "Eager baseline ok Figure 70 ms per chunk" in page and "Interval 69.3–70.7 ms" in page
    assert "PyTorch 2.11.0 on 16 torch threads" in page
    assert "1 24.75 " in page and "2 25.25 " in page  # each replica's median
    assert "Jitter per-sample CV 0.007" in page
    assert "other processes 0.04 of 16 cores over 2.5 s, load average 0.10→0.20" in page

    # The bundle is a link to the store, which also serves one file of a bundle (a lowered program).
    raw = client.get(f"/cells/{sweep['cells'][0]['id']}").text
    assert f'href="/api/artifacts/{bundle.sha256}" download' in raw and "/farm/" not in raw
    program = next((Path(bundle.path) / "programs").glob("*.pte"))
    address = f"/api/artifacts/{bundle.sha256}/programs/{program.name}"
    served = client.get(address, headers=admin)
    assert served.status_code == 200 and served.content == program.read_bytes()
    assert client.get(address).status_code == 401  # a credential, as for the whole bundle
    assert client.get(f"/api/artifacts/{bundle.sha256}/programs/none.pte", headers=admin).status_code == 404
    assert client.get(f"/api/artifacts/{bundle.sha256}/programs//x.pte", headers=admin).status_code == 422
    assert client.get(f"/api/artifacts/{'0' * 64}/manifest.json", headers=admin).status_code == 404


def test_a_batch_pairs_its_baseline_with_runs_that_come_after_it(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    tmp_path: Path,
) -> None:  # fmt: skip
    """An offline host's directory is imported in its files' order, and ``baseline-act.json`` sorts
    before most sha256 names: the baseline still pairs with every device run of the batch. The sweep
    asked for no device class (``sweep bundles --class`` needs none): its grid, cell page and report
    show the imported class's column all the same."""
    runner_id, private_key, sweep, bundle, eager = offline_act(
        client, admin, sessions, settings, tmp_path, []
    )
    run = {**device_result(bundle.sha256, 25.0), "latency": trusted_latency(25.0), "host_id": HOST}
    batch = [sign(eager, runner_id, private_key), sign(run, runner_id, private_key)]
    stored = client.post("/api/results/import-batch", headers=admin, json={"results": batch})
    assert stored.status_code == 201, stored.text
    kinds = [(item["kind"], item["cells"]) for item in stored.json()["imported"]]
    assert kinds == [("baseline", [sweep["cells"][0]["id"]]), ("device_result", [sweep["cells"][0]["id"]])]
    with sessions() as session:
        stored_sweep = session.get(Sweep, sweep["id"])
        assert stored_sweep is not None
        assert grid_device_texts(session, stored_sweep)[("act", "xnnpack")] == {
            CLASS: "✓ 25 ms (2.8×, 2.7–2.9)"
        }
    assert CLASS in client.get(f"/sweeps/{sweep['id']}").text  # the device column's heading
    assert "2.8×" in text_of(client.get(f"/cells/{sweep['cells'][0]['id']}").text)
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert CLASS in report and "✓ 25 ms (2.8×, 2.7–2.9)" in report
