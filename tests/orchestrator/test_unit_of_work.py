"""Jobs are sent only after the transaction that created them commits; a failed one sends nothing; a send
that fails after the commit is tried again at once, then by the reconciler's next pass."""

from __future__ import annotations

import errno
from typing import Any

import pytest
import redis
from celery import Celery
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.settings import Settings
from farmrun.celery_app import make_celery
from orchestrator.db import unit_of_work
from orchestrator.models import Job, Sweep
from orchestrator.reconciler import reconcile_once
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate

BODY = SweepCreate(policies=["act", "vqbet"], backends=["vulkan"])


def test_commit_then_send(sessions: sessionmaker[Session], settings: Settings, broker: redis.Redis) -> None:
    celery = make_celery(settings)
    with unit_of_work(sessions, celery) as session:
        sweeps.create(session, settings, BODY)
        session.flush()
        assert broker.llen("lower") == 0  # nothing leaves before the commit
    assert broker.llen("lower") == 2


def test_rolled_back_transaction_sends_nothing(
    sessions: sessionmaker[Session], session: Session, settings: Settings, broker: redis.Redis
) -> None:
    before = session.scalar(select(func.count()).select_from(Sweep))
    with pytest.raises(RuntimeError), unit_of_work(sessions, make_celery(settings)) as work:
        sweeps.create(work, settings, BODY)
        raise RuntimeError("the request failed after creating jobs")
    assert broker.llen("lower") == 0
    assert session.scalar(select(func.count()).select_from(Sweep)) == before


class FailingSends(Celery):
    """The real broker (Redis) behind a send that fails its first ``failures`` calls the way a full disk
    fails kombu's filesystem transport (an injected fault: this machine has no small disk to fill)."""

    def __init__(self, settings: Settings, failures: int) -> None:
        real = make_celery(settings)
        super().__init__("coverfarm", broker=real.conf.broker_url, set_as_current=False)
        self.conf.update(real.conf)
        self.failures = failures

    def send_task(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().send_task(*args, **kwargs)


def sent_at(sessions: sessionmaker[Session]) -> list[object]:
    with sessions() as session:
        return list(session.scalars(select(Job.sent_at).order_by(Job.id)))


def test_a_send_that_fails_once_is_retried_at_once(
    sessions: sessionmaker[Session], settings: Settings, broker: redis.Redis
) -> None:
    with unit_of_work(sessions, FailingSends(settings, failures=1)) as session:
        sweeps.create(session, settings, SweepCreate(policies=["act"], backends=["vulkan"]))
    assert broker.llen("lower") == 1
    assert all(stamp is not None for stamp in sent_at(sessions))


def test_a_job_whose_send_failed_is_sent_by_the_next_reconciler_pass(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings,
    broker: redis.Redis,
) -> None:  # fmt: skip
    client.app.state.celery = FailingSends(settings, failures=2)  # type: ignore[attr-defined]
    response = client.post("/api/sweeps", headers=admin, json={"policies": ["act"], "backends": ["vulkan"]})
    assert response.status_code == 201, response.text  # what was stored is the client's
    assert broker.llen("lower") == 0
    assert sent_at(sessions) == [None]  # owed a send
    # The reconciler's passes (every reconcile_interval_s, seconds; not resend_after_s, an hour) send
    # it: the first sees it unsent, the next sends it (one pass of grace for a sender still at work).
    assert settings.reconcile_interval_s <= 10 < settings.resend_after_s
    unsent: set[int] = set()
    assert reconcile_once(sessions, make_celery(settings), settings, unsent) == []
    assert broker.llen("lower") == 0
    resent = reconcile_once(sessions, make_celery(settings), settings, unsent)
    assert resent == [response.json()["cells"][0]["jobs"][0]["id"]]
    assert broker.llen("lower") == 1
    assert all(stamp is not None for stamp in sent_at(sessions))
    assert reconcile_once(sessions, make_celery(settings), settings, unsent) == []  # sent: nothing more
