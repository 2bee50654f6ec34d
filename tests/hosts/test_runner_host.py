"""A device runner on a host of its own, cut off from the farm while it holds a device job.

The runner host loses its link in the middle of a timed run. Past the heartbeat timeout the farm marks
the attempt lost and queues the job again; the link comes back, the runner finishes its first run and
reports it, and takes the re-queued job. Whatever the late report does, the cell ends with exactly one
device run, and the job's attempts say the first was lost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farmkit import TESTS, child_env, coverfarm_command, sweep_done, wait_for
from netfarm import ComposeFarm, Host, missing_requirements

pytestmark = pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements()))

CLASS = f"cpu-{os.uname().machine}-xnnpack"
# One short replica: the link is cut a second after the job starts, in the middle of its run.
TIMING = ("--replicas", "1", "--min-seconds", "2", "--max-seconds", "2")


@pytest.fixture
def farm(tmp_path: Path) -> Iterator[ComposeFarm]:
    built = ComposeFarm(
        tmp_path,
        workers=("worker1",),
        path=[TESTS / "orchestrator" / "devices"],
        COVERFARM_ENGINE="bundle_engine:analyze",
        COVERFARM_DEVICE_TIMEOUT_S="120",
    )
    try:
        yield built
    finally:
        built.close()


def runner_state(farm: ComposeFarm, name: str) -> str | None:
    with farm.api() as api:
        states = [r["state"] for r in api.get("/api/runners").json() if r["name"] == name]
    return states[-1] if states else None


def enrol(farm: ComposeFarm, host: Host, name: str) -> Path:
    token = farm.cli(host, "token", "create", "--url", farm.url, "--token", farm.env["COVERFARM_ADMIN_TOKEN"])
    config = host.folder / f"{name}.json"
    farm.cli(host, "runner", "register", "--url", farm.url, "--token", token.strip(), "--name", name,
             "--config", str(config), "--no-baseline")  # fmt: skip
    return config


def test_a_runner_host_cut_off_while_it_holds_a_device_job_runs_it_once(farm: ComposeFarm) -> None:
    host = farm.network.host("runner")
    config = enrol(farm, host, "board-cut")
    env = child_env(farm.env, farm.path, COVERFARM_HOME=str(host.folder / "home"))
    host.start(coverfarm_command("runner", "start", "--config", str(config), *TIMING), env, "runner.log")
    wait_for(lambda: runner_state(farm, "board-cut") == "healthy", 240, "the runner's health check")
    with farm.api() as api:
        body = {"policies": ["act"], "backends": ["xnnpack"], "device_classes": [CLASS]}
        response = api.post("/api/sweeps", json=body)
        assert response.status_code == 201, response.text
        sweep_id = response.json()["id"]

    def device_job_running() -> int | None:
        with farm.database() as conn:
            row = conn.execute(
                "SELECT j.id FROM jobs j JOIN cells c ON c.id = j.cell_id WHERE c.sweep_id = %s "
                "AND j.kind = 'device_run' AND j.status = 'running'",
                (sweep_id,),
            ).fetchone()
        return row[0] if row else None

    job_id = wait_for(device_job_running, 120, "the device job to start")
    time.sleep(1)
    host.cut()
    time.sleep(12)  # past the heartbeat timeout (8 s): the attempt is lost and the job queued again
    host.mend()
    mended = time.monotonic()
    with farm.api() as api:
        # The runner reports its first run late (refused: the attempt was lost), passes its health check
        # again (a runner whose heartbeats resume is checked before it takes work), and runs the job.
        wait_for(lambda: sweep_done(api, sweep_id), 300, "the device job to finish once")
    print(f"\na runner host cut off for 12 s: settled {time.monotonic() - mended:.1f} s after")
    with farm.database() as conn:
        runs = conn.execute("SELECT status FROM device_runs WHERE job_id = %s", (job_id,)).fetchall()
        attempts = conn.execute(
            "SELECT attempt, outcome FROM job_attempts WHERE job_id = %s ORDER BY attempt", (job_id,)
        ).fetchall()
    assert runs == [("ok",)]
    assert attempts[0] == (1, "lost") and attempts[-1][1] == "ok", attempts
