"""The body of each backend's tracker issue from one report (GET /api/sweeps/{id}/report.md), for a sweep
of every backend coverfarm has, against the real migrated Postgres: result documents stored the way the
worker stores them (jobs.start, jobs.finish)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from coverfarm import backends, tracker
from coverfarm.result import (
    Blocker,
    HeavyMacs,
    Ops,
    Options,
    Programs,
    ResultDocument,
    StageResult,
    StageStatus,
    TraceInfo,
)
from coverfarm.settings import Settings
from orchestrator.db import take_outbox
from orchestrator.jobs import service as jobs
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate

ARGMAX = ("aten.argmax.default", "TOSA ARGMAX produces int32 but aten.argmax returns int64.")
# backend -> (ops total, ops on the backend, programs, its blockers): every backend a row of its own.
NUMBERS: dict[str, tuple[int, int, int, list[Blocker]]] = {
    "openvino": (1547, 1547, 1, []),
    "vgf": (1495, 1494, 2, [Blocker(op=ARGMAX[0], reason=ARGMAX[1], count=1, macs=0)]),
    "vulkan": (1553, 1549, 3, []),
    "xnnpack": (1560, 1500, 7, []),
}


def document(policy: str, backend: str) -> ResultDocument:
    ok = StageResult(status=StageStatus.OK)
    total, on_backend, programs, blockers = NUMBERS[backend]
    return ResultDocument(
        policy=policy,
        backend=backend,
        options=Options(),
        trace=ok,
        trace_info=TraceInfo(seed=0),
        partition=ok,
        export=ok,
        ops=Ops(total=total, on_backend=on_backend),
        heavy_macs=HeavyMacs(total=1000, on_backend=1000),
        programs=Programs(count=programs),
        blockers=blockers,
        versions={"executorch": "1.5.1", "tosa-tools": "2026.8.0"},
    )


def stored_sweep(session: Session, settings: Settings, names: list[str]) -> int:
    """A sweep of act on ``names`` (a farm of every backend), each cell's document stored."""
    settings = settings.model_copy(update={"backends": sorted(NUMBERS)})
    sweep = sweeps.create(session, settings, SweepCreate(policies=["act"], backends=names, timeout_s=60))
    take_outbox(session)  # nothing goes to the broker: the documents are stored here as a worker would
    for cell in sweep.cells:
        job = cell.jobs[0]
        assert jobs.start(session, job.id, "w1", settings) is not None
        jobs.finish(session, job.id, 1, document(cell.policy, cell.backend), settings)
    session.flush()
    return sweep.id


def bodies(text: str) -> list[str]:
    """The titles of the report's backend bodies, in order."""
    return [line.removeprefix("## ").split(":")[0] for line in text.splitlines() if line.startswith("## ")]


def row(backend: str) -> str:
    total, on_backend, programs, _ = NUMBERS[backend]
    share = tracker.share_percent(on_backend / total)
    return f"| act | {on_backend} / {total} ({share}) | 100% | {programs} | ✓ |"


@pytest.fixture
def every_backend(session: Session, settings: Settings) -> int:
    assert sorted(backends.names()) == sorted(NUMBERS), "a backend this test does not know"
    return stored_sweep(session, settings, sorted(NUMBERS, reverse=True))


def test_the_report_has_one_body_per_backend_however_many(client: TestClient, every_backend: int) -> None:
    text = client.get(f"/api/sweeps/{every_backend}/report.md").text
    titles = [backends.title(name) for name in sorted(NUMBERS, reverse=True)]
    assert bodies(text) == titles
    assert text.count("### Known issues") == len(NUMBERS)


@pytest.mark.parametrize("backend", sorted(NUMBERS))
def test_each_backend_gets_its_tracker_issues_body(
    client: TestClient, every_backend: int, backend: str
) -> None:
    response = client.get(f"/api/sweeps/{every_backend}/report.md", params={"backend": backend})
    assert response.status_code == 200, response.text
    text = response.text
    title = backends.title(backend)
    assert bodies(text) == [title]
    assert f"| Policy | Ops on {title} | Heavy math on {title} | {title} programs | Exports to .pte |" in text
    assert row(backend) in text
    assert backends.registry()[backend].partitioner in text  # the legend names its partitioner
    others = [row(name) for name in NUMBERS if name != backend and row(name) != row(backend)]
    assert not [line for line in others if line in text]
    if backend == "vgf":
        [known] = [line for line in text.splitlines() if line.startswith(f"| `{ARGMAX[0]}`: ")]
        assert known.startswith(f"| `{ARGMAX[0]}`: {ARGMAX[1]}")
    else:
        assert f"Nothing is left on the CPU by {title} in the stored results." in text


def test_several_backends_come_in_the_order_asked(client: TestClient, every_backend: int) -> None:
    response = client.get(
        f"/api/sweeps/{every_backend}/report.md", params=[("backend", "vgf"), ("backend", "vulkan")]
    )
    assert response.status_code == 200, response.text
    assert bodies(response.text) == ["VGF", "Vulkan"]


def test_a_backend_not_in_the_sweep_or_unknown_is_a_422_naming_it(
    client: TestClient, session: Session, settings: Settings
) -> None:
    sweep_id = stored_sweep(session, settings, ["vulkan", "xnnpack"])
    before = client.get(f"/api/sweeps/{sweep_id}/report.md").text
    for bad in ("vgf", "metal"):
        response = client.get(
            f"/api/sweeps/{sweep_id}/report.md", params=[("backend", "vulkan"), ("backend", bad)]
        )
        assert response.status_code == 422, response.text
        [error] = response.json()["detail"]
        assert error["loc"] == ["query", "backend"]
        assert error["msg"] == f"sweep {sweep_id} has no backend {bad!r}; it has: vulkan, xnnpack"
    assert client.get(f"/api/sweeps/{sweep_id}/report.md").text == before
