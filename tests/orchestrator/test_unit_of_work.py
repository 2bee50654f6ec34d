"""Jobs are sent only after the transaction that created them commits; a failed one sends nothing."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.queues import make_celery
from coverfarm.settings import Settings
from orchestrator.db import unit_of_work
from orchestrator.models import Sweep
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
