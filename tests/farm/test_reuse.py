"""Result reuse through real `coverfarm worker` processes and the stand-in engine: an unchanged cell
takes the stored result at once; a changed option, version or engine digest, and --fresh, lower again."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import pytest
from farmkit import TOKEN, StartWorker, stop, sweep_done, wait_for

from coverfarm_cli import main

# Long enough that a stand-in run cannot pass for a reuse (which finishes within a second).
RUN_S = 3.0


def _worker(
    start_worker: StartWorker, name: str, digest: str, versions: str = "v1"
) -> subprocess.Popen[bytes]:
    return start_worker(
        name,
        STANDIN_REUSE="1",
        STANDIN_SECONDS=str(RUN_S),
        STANDIN_ENGINE_DIGEST=digest,
        STANDIN_VERSIONS=versions,
    )


def _run(api: httpx.Client, **body: Any) -> dict[str, Any]:
    body = {"policies": ["act", "diffusion"], "backends": ["xnnpack"], "timeout_s": 30} | body
    response = api.post("/api/sweeps", json=body)
    assert response.status_code == 201, response.text
    sweep: dict[str, Any] = wait_for(lambda: sweep_done(api, response.json()["id"]), 90, "the sweep")
    return sweep


def _reused(sweep: dict[str, Any]) -> dict[str, Any]:
    """Policy -> the reused_from of its latest result (None: lowered)."""
    return {cell["policy"]: cell["result"]["document"]["reused_from"] for cell in sweep["cells"]}


@pytest.fixture
def digest() -> str:
    """An engine digest of this test's own: no other test's stored result can have its keys."""
    return f"stand-in {uuid.uuid4().hex}"


def test_unchanged_cells_reuse_changed_ones_lower_again(
    api: httpx.Client, start_worker: StartWorker, digest: str
) -> None:
    worker = _worker(start_worker, "w-reuse", digest)
    first = _run(api)
    assert _reused(first) == {"act": None, "diffusion": None}
    assert {cell["state"] for cell in first["cells"]} == {"ok"}

    second = _run(api)
    by_policy = {cell["policy"]: cell for cell in first["cells"]}
    for cell in second["cells"]:
        source = by_policy[cell["policy"]]
        document = cell["result"]["document"]
        assert document["reused_from"] == {"job_id": source["result"]["job_id"], "sweep_id": first["id"]}
        assert cell["state"] == "ok"
        # The same document (bundle included), marked reused.
        assert {**document, "reused_from": None} == source["result"]["document"]
        (job,) = cell["jobs"]
        assert "reused the result of job" in job["status_reason"]
        took = datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["started_at"])
        assert took.total_seconds() < 1.0 < RUN_S
    third = _run(api)  # a reuse of a reuse names the result that was measured
    assert _reused(third) == _reused(second)

    assert _reused(_run(api, options={"lowering": "stock"})) == {"act": None, "diffusion": None}
    assert _reused(_run(api, fresh=True)) == {"act": None, "diffusion": None}
    assert _run(api, fresh=True)["fresh"] is True

    stop(worker)
    worker = _worker(start_worker, "w-reuse-v2", digest, versions="v2")
    assert _reused(_run(api)) == {"act": None, "diffusion": None}
    stop(worker)
    _worker(start_worker, "w-reuse-d2", f"{digest} changed", versions="v2")
    assert _reused(_run(api)) == {"act": None, "diffusion": None}


def test_slow_results_are_reused_only_when_asked(
    api: httpx.Client, start_worker: StartWorker, digest: str
) -> None:
    _worker(start_worker, "w-reuse-slow", digest)
    first = _run(api, policies=["vqbet"])  # slow on its 30 s bound, then ok on the long re-run
    lower, long = first["cells"][0]["jobs"]
    assert (lower["status"], long["status"]) == ("slow", "ok")

    def reused(sweep: dict[str, Any]) -> list[bool]:
        return ["reused the result" in job["status_reason"] for job in sweep["cells"][0]["jobs"]]

    # The slow lower result is not taken by default: it lowers again, and its long re-run is reused.
    assert reused(_run(api, policies=["vqbet"])) == [False, True]
    assert reused(_run(api, policies=["vqbet"], reuse_unfinished=True)) == [True, True]


def test_cli_fresh_lowers_again(
    server: str,
    api: httpx.Client,
    start_worker: StartWorker,
    digest: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _worker(start_worker, "w-reuse-cli", digest)
    submit = ["sweep", "submit", "--url", server, "--token", TOKEN, "--policies", "act", "--backends",
              "xnnpack", "--timeout", "30", "--wait"]  # fmt: skip
    last: Callable[[], int] = lambda: int(capsys.readouterr().out.strip().rsplit("\n", 1)[1])  # noqa: E731
    assert main(submit) == 0
    first = last()
    assert main(submit) == 0
    reused = api.get(f"/api/sweeps/{last()}").json()
    assert _reused(reused)["act"]["sweep_id"] == first
    assert main([*submit, "--fresh"]) == 0
    fresh = api.get(f"/api/sweeps/{last()}").json()
    assert fresh["fresh"] is True and _reused(fresh) == {"act": None}
