"""GET /api/events: a change committed by another process reaches the stream within a second."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from farmrun.celery_app import make_celery
from orchestrator.db import unit_of_work
from orchestrator.jobs import service as jobs


@contextmanager
def event_stream(url: str, sweep_id: int) -> Iterator[queue.Queue[tuple[float, dict[str, Any]]]]:
    received: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    opened = threading.Event()
    client = httpx.Client(timeout=httpx.Timeout(5, read=None))

    def read() -> None:
        try:
            with client.stream("GET", f"{url}/api/events", params={"sweep": sweep_id}) as response:
                for line in response.iter_lines():
                    opened.set()
                    if line.startswith("data:"):
                        received.put((time.monotonic(), json.loads(line.removeprefix("data:"))))
        except httpx.HTTPError:
            pass  # closed by the test

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert opened.wait(10), "the event stream did not open"
    try:
        yield received
    finally:
        client.close()
        reader.join(timeout=5)


def test_change_stored_by_another_process_is_streamed_within_a_second(
    server: str, api: httpx.Client, farm_sessions: sessionmaker[Session], farm_settings: Settings
) -> None:
    mine = api.post("/api/sweeps", json={"policies": ["act"], "backends": ["vulkan"]}).json()
    other = api.post("/api/sweeps", json={"policies": ["act"], "backends": ["xnnpack"]}).json()
    try:
        with event_stream(server, mine["id"]) as received:
            # This test process plays the worker: it stores a transition the way
            # orchestrator.jobs.tasks does.
            celery = make_celery(farm_settings)  # the farm's Redis (a start transition sends nothing)
            for sweep in (other, mine):
                with unit_of_work(farm_sessions, celery) as session:
                    started = jobs.start(
                        session, sweep["cells"][0]["jobs"][0]["id"], "test@events", farm_settings
                    )
                    assert started is not None
            committed = time.monotonic()
            arrived, event = received.get(timeout=5)
            assert arrived - committed < 1.0, f"event took {arrived - committed:.2f} s"
            assert event["kind"] == "job"
            assert event["sweep_id"] == mine["id"]  # the other sweep's event was filtered out
            assert event["job_id"] == mine["cells"][0]["jobs"][0]["id"]
            assert event["payload"]["status"] == "running"
            assert received.empty()
    finally:
        for sweep in (mine, other):
            api.post(f"/api/sweeps/{sweep['id']}/cancel")


def test_last_event_id_replays_what_was_missed(server: str, api: httpx.Client) -> None:
    sweep = api.post("/api/sweeps", json={"policies": ["vqbet"], "backends": ["vulkan"]}).json()
    api.post(f"/api/sweeps/{sweep['id']}/cancel")
    with httpx.stream(
        "GET",
        f"{server}/api/events",
        params={"sweep": sweep["id"]},
        headers={"Last-Event-ID": "0"},
        timeout=5,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        kinds = []
        for line in response.iter_lines():
            if line.startswith("event:"):
                kinds.append(line.removeprefix("event: "))
            if len(kinds) == 3:
                break
    # Created, cancelled, then its job cancelled: in the order they were stored.
    assert kinds == ["sweep", "sweep", "job"]
