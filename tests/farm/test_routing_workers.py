"""Routing by stack × memory class through real ``coverfarm worker`` processes (Celery on Redis, the
stand-in engine): each cell runs on a worker of its stack, a stack with no live worker waits and says so,
and a cell measured with fake weights on a small worker is exported with real ones on a big one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from farmkit import StartWorker, sweep_done, wait_for
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.routes import memory_class, worker_queues
from orchestrator.models import JobAttempt, Worker

# Stacks of these tests only: the farm's other workers (of the default stack) take none of their queues.
A, B, NONE = "et-route-a", "et-route-b", "et-route-none"
MEMORY = "et-route-mem"


def cells(api: httpx.Client, sweep_id: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get(f"/api/sweeps/{sweep_id}").json()["cells"]
    return found


def registered(sessions: sessionmaker[Session], prefix: str) -> Worker:
    with sessions() as session:
        return session.scalars(select(Worker).where(Worker.name.startswith(f"{prefix}@"))).one()


def test_each_cell_runs_on_a_worker_of_its_stack_and_a_stack_without_one_waits(
    api: httpx.Client, start_worker: StartWorker, farm_sessions: sessionmaker[Session]
) -> None:
    start_worker("w-stack-a", args=["--stack", A], COVERFARM_WORKER_MEMORY_GB="24")
    start_worker("w-stack-b", COVERFARM_STACK=B, COVERFARM_WORKER_MEMORY_GB="40")  # named by the environment
    body = {
        "policies": ["act", "diffusion"],
        "backends": ["xnnpack"],
        "stacks": [A, B, NONE],
        "timeout_s": 30,
    }
    response = api.post("/api/sweeps", json=body)
    assert response.status_code == 201, response.text
    sweep_id = response.json()["id"]

    def settled() -> list[dict[str, Any]] | None:
        now = cells(api, sweep_id)
        return now if all(cell["state"] == "ok" or cell["waiting"] for cell in now) else None

    settled_cells: list[dict[str, Any]] = wait_for(settled, 60, "the cells of live stacks to finish")
    for cell in settled_cells:
        [job] = cell["jobs"]
        if cell["stack"] == NONE:
            assert (cell["state"], cell["pending"]) == ("queued", True)
            assert cell["waiting"] == f"waiting for a worker of stack {NONE}"
            assert (job["status"], job["worker"], job["queue"]) == ("queued", None, f"lower@{NONE}")
        else:
            assert cell["state"] == "ok" and cell["waiting"] is None
            assert job["queue"] == f"lower@{cell['stack']}"
            assert job["worker"].startswith("w-stack-a@" if cell["stack"] == A else "w-stack-b@")
    assert api.get(f"/api/sweeps/{sweep_id}").json()["state"] == "running"  # the waiting cells are pending

    # Each worker registered its stack, the memory each of its jobs gets, its versions and its queues.
    for prefix, stack, memory in (("w-stack-a", A, 24.0), ("w-stack-b", B, 40.0)):
        worker = registered(farm_sessions, prefix)
        assert (worker.stack, worker.memory_gb) == (stack, memory)
        assert worker.queues == sorted(worker_queues(stack, memory))
        assert worker.versions is not None and "executorch" in worker.versions

    # A worker of the missing stack comes up: the waiting cells' messages were on its queue all along.
    start_worker("w-stack-none", args=["--stack", NONE])
    done: Any = wait_for(lambda: sweep_done(api, sweep_id), 60, "the waiting cells to finish")
    late = [cell for cell in done["cells"] if cell["stack"] == NONE]
    assert [cell["state"] for cell in late] == ["ok", "ok"]
    assert all(cell["jobs"][0]["worker"].startswith("w-stack-none@") for cell in late)


def test_a_cell_too_big_for_its_worker_is_exported_on_one_with_the_memory(
    api: httpx.Client, start_worker: StartWorker, farm_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    needs = {"diffusion": 40, "act": 100}  # the stand-in's real-weight needs (GB)
    standin = {"STANDIN_NEEDS_GB": ",".join(f"{p}={gb}" for p, gb in needs.items())}
    # Asked for two jobs at once, 24 GB holds one: its one job gets all 24 GB.
    start_worker(
        "w-mem-small",
        args=["--stack", MEMORY, "--concurrency", "2"],
        COVERFARM_WORKER_MEMORY_GB="24",
        **standin,
    )
    assert "1 job(s) at once (asked for 2" in (tmp_path / "w-mem-small.log").read_text()
    assert registered(farm_sessions, "w-mem-small").memory_gb == 24.0
    body = {"policies": ["diffusion", "act"], "backends": ["vulkan"], "stacks": [MEMORY], "timeout_s": 30}
    sweep_id = api.post("/api/sweeps", json=body).json()["id"]

    def both_sent_on() -> list[dict[str, Any]] | None:
        now = cells(api, sweep_id)
        return now if all(cell["jobs"][0]["memory_gb"] is not None for cell in now) else None

    # Both were measured with fake weights on the small worker, their coverage stored, and sent on.
    sent: list[dict[str, Any]] = wait_for(both_sent_on, 60, "the fake-weight attempts to be sent on")
    for cell in sent:
        [job] = cell["jobs"]
        size = memory_class(needs[cell["policy"]])
        assert (job["status"], job["memory_gb"]) == ("queued", needs[cell["policy"]])
        assert job["queue"] == f"lower.mem{size}@{MEMORY}"
        assert cell["waiting"] == f"waiting for a ≥ {size} GB worker of stack {MEMORY}"
        document = cell["result"]["document"]
        assert document["weights"]["mode"] == "fake" and document["ops"]["on_backend"] == 90

    start_worker("w-mem-big", args=["--stack", MEMORY], COVERFARM_WORKER_MEMORY_GB="70", **standin)

    def diffusion_done() -> dict[str, Any] | None:
        return next(
            (c for c in cells(api, sweep_id) if c["policy"] == "diffusion" and c["state"] == "ok"), None
        )

    diffusion: Any = wait_for(diffusion_done, 60, "diffusion to run again on the big worker")
    [job] = diffusion["jobs"]
    assert (job["attempt"], job["worker"].split("@")[0]) == (2, "w-mem-big")
    document = diffusion["result"]["document"]
    assert document["weights"]["mode"] == "real" and document["export"]["status"] == "ok"
    fake = document["fake_weight_run"]
    assert (fake["attempt"], fake["worker_memory_gb"], fake["differences"]) == (1, 24.0, [])
    with farm_sessions() as session:
        outcomes = session.scalars(
            select(JobAttempt).where(JobAttempt.job_id == job["id"]).order_by(JobAttempt.attempt)
        )
        assert [(a.worker.split("@")[0], a.outcome) for a in outcomes] == [
            ("w-mem-small", "requeued"),
            ("w-mem-big", "ok"),
        ]

    # act needs more than the big worker has: it keeps waiting, and says for what.
    act = next(c for c in cells(api, sweep_id) if c["policy"] == "act")
    assert act["waiting"] == f"waiting for a ≥ {memory_class(needs['act'])} GB worker of stack {MEMORY}"
    assert act["result"]["document"]["weights"]["mode"] == "fake"
    report = api.get(f"/api/sweeps/{sweep_id}/report.md").text
    assert f"| act | 90 / 100 (90%) | 80% | 3 | needs ≥ {needs['act']} GB worker ⏳ |" in report
    api.post(f"/api/sweeps/{sweep_id}/cancel")
