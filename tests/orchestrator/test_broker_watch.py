"""``BrokerWatch`` against real redis-servers: since when the broker holds the farm's messages, moved on
by a restart and by another server answering at the same address (a failover)."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

from farmkit import free_port, start_redis, stop

from coverfarm.settings import Settings
from farmrun.celery_app import make_celery
from orchestrator.broker import BrokerWatch
from orchestrator.models import utcnow


def watch_of(url: str | None, home: Path) -> BrokerWatch:
    return BrokerWatch(make_celery(Settings(home=home, broker_url=url)))


def test_a_restarted_broker_holds_messages_since_it_came_back(tmp_path: Path) -> None:
    port = free_port()
    server = start_redis(port, tmp_path)
    watch = watch_of(f"redis://127.0.0.1:{port}/0", tmp_path / "home")
    try:
        first = watch.holds_since()
        assert first is not None and utcnow() - first < timedelta(seconds=10)
        server.send_signal(signal.SIGKILL)
        server.wait()
        assert watch.holds_since() is None  # not answering: nothing said
        time.sleep(1.5)
        server = start_redis(port, tmp_path)
        restarted = watch.holds_since()
        assert restarted is not None and restarted > first + timedelta(seconds=1)
        again = watch.holds_since()  # stays put while the same server answers (to its uptime's second)
        assert again is not None and abs(again - restarted) < timedelta(seconds=1.5)
    finally:
        watch.close()
        stop(server)


def test_the_filesystem_broker_and_an_absent_one_say_nothing(tmp_path: Path) -> None:
    assert watch_of(None, tmp_path / "home").holds_since() is None
    assert watch_of(f"redis://127.0.0.1:{free_port()}/0", tmp_path / "home").holds_since() is None
