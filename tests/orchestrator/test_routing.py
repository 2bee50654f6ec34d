"""Routing lower jobs by stack × memory class (``coverfarm.routes``) on the rolled-back Postgres session
and the real Redis broker: sweeps over stacks, cells that wait for a worker and say why, the fake-weight
attempt sent on to a worker with the memory, and the same route for every send."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_jobs_service import document, sent
from test_sweeps_api import counts, queued_messages

from coverfarm.result import HeavyMacs, Ops, Programs, ResultDocument, StageStatus, WeightsInfo
from coverfarm.routes import MEMORY_CLASSES_GB, lower_queue, memory_class, worker_queues
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from coverfarm_cli.farm import waits_for_workers
from orchestrator.db import take_outbox
from orchestrator.jobs import service as jobs
from orchestrator.jobs.reconcile import reconcile
from orchestrator.models import Event, Job, JobAttempt, JobStatus, Result, utcnow
from orchestrator.reports.service import report_markdown
from orchestrator.sweeps import cell_views
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate
from orchestrator.workers import service as workers
from worker.trace.weights import export_not_run

OLD = "et-1.4.1"  # a stack name; no catalogue is consulted


def job_ids_on(broker: redis.Redis, queue: str) -> set[int]:
    return {args[0]["job_id"] for args, _kwargs, _embed in queued_messages(broker, queue)}


def test_a_sweep_over_two_stacks_has_a_cell_per_stack_each_on_its_stack_queue(
    client: TestClient, admin: dict[str, str], broker: redis.Redis, session: Session
) -> None:
    body = {"policies": ["act", "vqbet"], "backends": ["xnnpack"], "stacks": [DEFAULT_STACK, OLD]}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["stacks"] == [DEFAULT_STACK, OLD]
    cells = [(c["policy"], c["backend"], c["stack"]) for c in sweep["cells"]]
    assert cells == [(p, "xnnpack", s) for p in ("act", "vqbet") for s in (DEFAULT_STACK, OLD)]
    by_stack = {s: {c["jobs"][0]["id"] for c in sweep["cells"] if c["stack"] == s} for s in sweep["stacks"]}
    assert {c["jobs"][0]["queue"] for c in sweep["cells"] if c["stack"] == OLD} == {f"lower@{OLD}"}
    assert job_ids_on(broker, "lower") == by_stack[DEFAULT_STACK]
    assert job_ids_on(broker, f"lower@{OLD}") == by_stack[OLD]
    # The stack is in a page's cells and in each job event.
    page = client.get(f"/api/sweeps/{sweep['id']}/cells").json()
    assert [c["stack"] for c in page["cells"]] == [s for _p, _b, s in cells]
    client.post(f"/api/sweeps/{sweep['id']}/cancel", headers=admin)
    events = session.scalars(select(Event).where(Event.sweep_id == sweep["id"], Event.kind == "job")).all()
    stacks = {cell["id"]: cell["stack"] for cell in sweep["cells"]}
    assert len(events) == 4 and all(event.payload["stack"] == stacks[event.cell_id] for event in events)


def test_a_sweep_names_its_stacks_by_default_the_default_one(
    client: TestClient, admin: dict[str, str]
) -> None:
    sweep = client.post(
        "/api/sweeps", json={"policies": ["act"], "backends": ["vulkan"]}, headers=admin
    ).json()
    assert sweep["stacks"] == [DEFAULT_STACK]
    assert [(c["stack"], c["jobs"][0]["queue"]) for c in sweep["cells"]] == [(DEFAULT_STACK, "lower")]


@pytest.mark.parametrize(
    ("stacks", "loc", "says"),
    [
        (["Et-1.5.1"], ["body", "stacks", 0], "is not well formed"),
        ([DEFAULT_STACK, "a/b"], ["body", "stacks", 1], "is not well formed"),
        (["lower@x"], ["body", "stacks", 0], "is not well formed"),
        (["x" * 65], ["body", "stacks", 0], "is not well formed"),
        ([""], ["body", "stacks", 0], "is not well formed"),
        ([7], ["body", "stacks", 0], "valid string"),
        ([], ["body", "stacks"], "at least 1"),
        ([OLD, OLD], ["body", "stacks"], "listed twice"),
        ("et-1.4.1", ["body", "stacks"], "valid list"),
        ([f"s{i}" for i in range(21)], ["body", "stacks"], "at most 20"),
    ],
    ids=["upper", "slash", "at", "long", "empty", "number", "none", "twice", "string", "many"],
)
def test_bad_stacks_are_a_422_naming_the_field_and_store_nothing(
    client: TestClient, admin: dict[str, str], session: Session, stacks: Any, loc: list[Any], says: str
) -> None:
    before = counts(session)
    body = {"policies": ["act"], "backends": ["vulkan"], "stacks": stacks}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == loc and says in error["msg"], error
    assert counts(session) == before


def test_a_cell_waits_for_a_worker_of_its_stack_and_says_so(
    client: TestClient, admin: dict[str, str], session: Session
) -> None:
    body = {"policies": ["act"], "backends": ["xnnpack"], "stacks": [DEFAULT_STACK, OLD]}
    sweep_id = client.post("/api/sweeps", json=body, headers=admin).json()["id"]

    def waiting() -> dict[str, str | None]:
        sweep = client.get(f"/api/sweeps/{sweep_id}").json()
        return {cell["stack"]: cell["waiting"] for cell in sweep["cells"]}

    assert waiting() == {
        DEFAULT_STACK: f"waiting for a worker of stack {DEFAULT_STACK}",
        OLD: f"waiting for a worker of stack {OLD}",
    }
    # `sweep submit --wait` stops following a sweep in which nothing can move without another worker.
    stalled = waits_for_workers(client.get(f"/api/sweeps/{sweep_id}").json())
    assert stalled == sorted(f"waiting for a worker of stack {stack}" for stack in (DEFAULT_STACK, OLD))
    workers.register(session, "cpu@here", worker_queues(DEFAULT_STACK, 24.0), DEFAULT_STACK, {}, 24.0)
    session.flush()
    assert waits_for_workers(client.get(f"/api/sweeps/{sweep_id}").json()) is None
    assert waiting() == {DEFAULT_STACK: None, OLD: f"waiting for a worker of stack {OLD}"}

    # Every renderer shows it from the cell's view: "no worker", and why in the cause.
    report = client.get(f"/api/sweeps/{sweep_id}/report.md").text
    assert "| act | no worker | no worker | no worker | no worker |" in report
    assert f"waiting for a worker of stack {OLD}" in report
    cell_id = next(
        c["id"] for c in client.get(f"/api/sweeps/{sweep_id}").json()["cells"] if c["stack"] == OLD
    )
    assert client.get(f"/api/cells/{cell_id}").json()["waiting"] == f"waiting for a worker of stack {OLD}"
    assert f"waiting for a worker of stack {OLD}" in client.get(f"/cells/{cell_id}").text

    workers.register(session, "cpu@old", worker_queues(OLD, 24.0), OLD, {}, 24.0)
    workers.stopped(session, "cpu@here")  # offline workers take nothing
    session.flush()
    assert waiting() == {DEFAULT_STACK: f"waiting for a worker of stack {DEFAULT_STACK}", OLD: None}


def fake_document(policy: str, need: int, worker_gb: float = 24.0) -> ResultDocument:
    doc = document(policy)
    weights = WeightsInfo(
        mode="fake", requested="auto", reason="too big", worker_memory_gb=worker_gb, needs_worker_gb=need
    )
    doc.weights = weights
    doc.export = export_not_run(weights)
    doc.heavy_macs = HeavyMacs(total=1000, on_backend=800)
    doc.programs = Programs(count=3, connected_groups=4)
    return doc


def real_document(policy: str, need: int) -> ResultDocument:
    doc = document(policy, on_backend=91)
    doc.weights = WeightsInfo(mode="real", requested="auto", reason="fits", needs_worker_gb=need)
    doc.heavy_macs = HeavyMacs(total=1000, on_backend=800)
    doc.programs = Programs(count=3, connected_groups=4, delegates=3)
    return doc


def lower_job(session: Session, settings: Settings, stack: str = DEFAULT_STACK) -> Job:
    body = SweepCreate(policies=["act"], backends=["vulkan"], timeout_s=60, stacks=[stack])
    return sent(session, sweeps.create(session, settings, body).cells[0].jobs[0])


def attempts(session: Session, job: Job) -> list[tuple[int, str, str | None]]:
    rows = session.scalars(select(JobAttempt).where(JobAttempt.job_id == job.id).order_by(JobAttempt.attempt))
    return [(row.attempt, row.worker, row.outcome) for row in rows]


def test_a_fake_weight_attempt_sends_its_job_to_a_worker_with_the_memory(
    session: Session, settings: Settings
) -> None:
    need = MEMORY_CLASSES_GB[0] + 8  # more than the smallest class holds
    size = memory_class(need)
    job = lower_job(session, settings)
    assert (
        jobs.start(session, job.id, "small", settings, worker_stack=DEFAULT_STACK, worker_memory_gb=24)
        is not None
    )
    jobs.finish(session, job.id, 1, fake_document("act", need), settings)

    assert job.status is JobStatus.QUEUED and job.memory_gb == need
    assert job.queue == lower_queue(DEFAULT_STACK, memory_gb=size) == f"lower.mem{size}"
    assert job.status_reason == (
        f"attempt 1 measured fake weights; real ones need {need} GB: to a ≥ {size} GB worker"
    )
    assert [(item.queue, item.message.job_id) for item in take_outbox(session)] == [(job.queue, job.id)]
    assert attempts(session, job) == [(1, "small", jobs.REQUEUED)]

    # Until the real-weight result comes, the cell shows what fake weights measured, its re-run pending.
    cell = job.cell
    session.refresh(cell)
    workers.register(session, "small", worker_queues(DEFAULT_STACK, 24.0), DEFAULT_STACK, {}, 24.0)
    view = cell_views.view_of(cell, live=workers.live(session))
    assert view.measured and view.pending and view.ops.share is not None and view.ops.share.part == 90
    assert view.waiting == f"waiting for a ≥ {size} GB worker of stack {DEFAULT_STACK}"
    report = report_markdown(sweeps.get(session, cell.sweep_id))
    assert f"needs ≥ {need} GB worker ⏳" in report

    # A worker with less memory than the need does not run it; one with enough does, with real weights.
    assert jobs.start(session, job.id, "small", settings, worker_memory_gb=need - 1) is None
    assert job.status is JobStatus.QUEUED
    started = jobs.start(session, job.id, "big", settings, worker_stack=DEFAULT_STACK, worker_memory_gb=size)
    assert started is not None and started.attempt == 2
    jobs.finish(session, job.id, 2, real_document("act", need), settings)
    assert job.status is JobStatus.OK
    assert session.scalar(select(func.count()).select_from(Result).where(Result.job_id == job.id)) == 1
    stored = ResultDocument.model_validate(
        session.scalars(select(Result).where(Result.job_id == job.id)).one().document
    )
    assert stored.weights is not None and stored.weights.mode == "real"
    fake = stored.fake_weight_run
    assert fake is not None and (fake.job_id, fake.attempt, fake.worker_memory_gb) == (job.id, 1, 24.0)
    assert fake.ops == Ops(total=100, on_backend=90)
    assert fake.differences == ["ops.on_backend: 90 with fake weights, 91 with real"]
    assert attempts(session, job) == [(1, "small", jobs.REQUEUED), (2, "big", "ok")]


def test_a_job_is_sent_to_a_bigger_worker_once_only(session: Session, settings: Settings) -> None:
    job = lower_job(session, settings, OLD)
    jobs.start(session, job.id, "small", settings)
    jobs.finish(session, job.id, 1, fake_document("act", 40), settings)
    assert job.queue == f"lower.mem64@{OLD}"
    take_outbox(session)
    jobs.start(session, job.id, "big", settings)
    jobs.finish(session, job.id, 2, fake_document("act", 40, worker_gb=64.0), settings)  # fake again
    assert job.status is JobStatus.FAILED and take_outbox(session) == []


def test_a_need_past_the_largest_class_leaves_the_fake_weight_result(
    session: Session, settings: Settings
) -> None:
    job = lower_job(session, settings)
    jobs.start(session, job.id, "small", settings)
    jobs.finish(session, job.id, 1, fake_document("act", MEMORY_CLASSES_GB[-1] + 1), settings)
    assert job.status is JobStatus.FAILED and job.memory_gb is None and take_outbox(session) == []


def test_every_send_takes_the_route_of_what_the_job_needs(session: Session, settings: Settings) -> None:
    job = lower_job(session, settings, OLD)
    jobs.start(session, job.id, "small", settings)
    jobs.finish(session, job.id, 1, fake_document("act", 40), settings)
    take_outbox(session)
    # The broker lost the message: the reconciler sends it on the same route.
    job.sent_at = utcnow() - timedelta(seconds=settings.resend_after_s + 1)
    session.flush()
    assert reconcile(session, settings) == [job.id]
    assert [(item.queue, item.message.job_id) for item in take_outbox(session)] == [
        (f"lower.mem64@{OLD}", job.id)
    ]
    # A slow real-weight run is re-run once with the longer bound, on a worker of the same class.
    job.sent_at = utcnow()
    jobs.start(session, job.id, "big", settings)
    slow = real_document("act", 40)
    slow.export = document("act", StageStatus.SLOW).export
    jobs.finish(session, job.id, 2, slow, settings)
    cell = job.cell
    session.refresh(cell)
    rerun = cell.jobs[-1]
    assert (rerun.stage, rerun.memory_gb, rerun.queue) == ("lower.long", 40, f"lower.long.mem64@{OLD}")


def test_a_worker_of_another_stack_runs_nothing_and_a_stale_route_is_corrected(
    session: Session, settings: Settings
) -> None:
    job = lower_job(session, settings, OLD)
    assert jobs.start(session, job.id, "w", settings, worker_stack=DEFAULT_STACK) is None
    assert (
        job.status is JobStatus.QUEUED and take_outbox(session) == []
    )  # its own queue: left for the reconciler
    job.queue = "lower"  # stored under a route that is no longer the job's
    session.flush()
    assert jobs.start(session, job.id, "w", settings, worker_stack=DEFAULT_STACK) is None
    assert [(item.queue, item.message.job_id) for item in take_outbox(session)] == [(f"lower@{OLD}", job.id)]
    assert job.queue == f"lower@{OLD}"
    assert jobs.start(session, job.id, "w", settings, worker_stack=OLD) is not None
