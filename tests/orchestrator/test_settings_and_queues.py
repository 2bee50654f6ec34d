"""Settings reject nonsense early; the Celery app is configured for at-least-once, JSON-only delivery."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from farmkit import ROOT
from pydantic import ValidationError

from coverfarm.queues import QUEUES
from coverfarm.settings import DEFAULT_BACKENDS, DEFAULT_POLICIES, Settings
from farmrun.celery_app import make_celery, time_limits, visibility_timeout


@pytest.fixture(autouse=True)
def no_outside_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "BROKER_URL", "ADMIN_TOKEN", "POLICIES", "BACKENDS"):
        monkeypatch.delenv(f"COVERFARM_{name}", raising=False)


def test_embedded_default_lives_in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COVERFARM_HOME", str(tmp_path))
    monkeypatch.setenv("COVERFARM_POLICIES", "act, vqbet")
    settings = Settings()
    assert settings.sqlalchemy_url == f"sqlite:///{tmp_path}/coverfarm.db"
    assert settings.celery_broker_url == "filesystem://localhost/"
    assert settings.policies == ["act", "vqbet"]
    assert settings.read_admin_token() is None
    token = settings.ensure_admin_token()
    assert settings.read_admin_token() == token == Settings().ensure_admin_token()
    assert (tmp_path / "admin-token").stat().st_mode & 0o777 == 0o600


def test_postgres_url_gets_the_installed_driver() -> None:
    settings = Settings(database_url="postgresql://u@h/db")
    assert settings.sqlalchemy_url == "postgresql+psycopg://u@h/db"


@pytest.mark.parametrize(
    "values",
    [
        {"stage_timeout_s": 900, "long_timeout_s": 600},
        {"heartbeat_interval_s": 10, "heartbeat_timeout_s": 15},
        {"policies": []},
        {"backends": ["vulkan", "vulkan"]},
        {"port": 0},
    ],
)
def test_nonsense_is_rejected(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate(values)


def test_celery_is_json_only_late_ack_and_outlives_the_longest_job(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, broker_url="redis://127.0.0.1:6379/13")
    conf = make_celery(settings).conf
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    soft, hard = time_limits(settings.long_timeout_s)
    assert settings.long_timeout_s < soft < hard < conf.broker_transport_options["visibility_timeout"]
    assert visibility_timeout(settings) == conf.broker_transport_options["visibility_timeout"]
    assert QUEUES == ("lower", "lower.long")


def test_embedded_broker_is_a_folder_in_home(tmp_path: Path) -> None:
    conf = make_celery(Settings(home=tmp_path)).conf
    assert conf.broker_url == "filesystem://localhost/"
    assert conf.broker_transport_options["data_folder_in"] == str(tmp_path / "broker")
    assert conf.broker_transport_options["control_folder"] == str(tmp_path / "broker" / "control")
    assert (tmp_path / "broker").is_dir()


def test_default_names_are_what_the_engine_supports() -> None:
    # In a child process: the registry imports torch and LeRobot, which this process never loads.
    code = (
        "import json; from worker.trace.policies.registry import supported;"
        " from worker.lower.backends import all_backends;"
        "print(json.dumps([supported(), sorted(all_backends())]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    policies, backends = json.loads(result.stdout.strip().splitlines()[-1])
    # Every policy with an adapter is offered; the others keep their rows with the cause as a result.
    assert set(policies) <= set(DEFAULT_POLICIES)
    assert sorted(DEFAULT_BACKENDS) == backends


def test_the_embedded_broker_connects_without_kombus_hostname_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The URL names its host, so a connection to it does not log kombu's "No hostname was supplied"."""
    app = make_celery(Settings(home=tmp_path))
    with caplog.at_level(logging.WARNING, logger="kombu.connection"), app.connection_for_write() as conn:
        conn.connect()
        assert conn.info()["hostname"] == "localhost"
    assert not [r for r in caplog.records if "hostname" in r.getMessage()]
