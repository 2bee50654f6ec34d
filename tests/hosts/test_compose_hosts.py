"""docker-compose.yml and the host harness (``netfarm``) stay in step: every compose service has a host,
the harness runs each service's own command, and the only settings it adds are the test ones."""

from __future__ import annotations

from netfarm import TEST_SETTINGS, compose, compose_command, compose_environment

from coverfarm.settings import Settings

# compose service -> the harness host that runs it (ComposeFarm)
HOSTS = {"postgres": "db", "redis": "db", "orchestrator": "orch", "worker": "worker1, worker2"}


def test_every_compose_service_has_a_host() -> None:
    assert set(compose()["services"]) == set(HOSTS)


def test_the_harness_runs_each_service_with_its_compose_command() -> None:
    services = compose()["services"]
    for service in ("orchestrator", "worker"):
        command = [str(part) for part in services[service]["command"]]
        assert command[0] == "coverfarm"
        assert compose_command(service)[-len(command) + 1 :] == command[1:]
    # the redis host keeps nothing on disk, as in the compose file
    assert services["redis"]["command"][:5] == ["redis-server", "--save", "", "--appendonly", "no"]


def test_the_environment_is_the_compose_one_with_the_db_host_resolved() -> None:
    env = compose_environment("10.0.0.2")
    assert set(env) == set(compose()["x-coverfarm"]["environment"])
    assert env["COVERFARM_DATABASE_URL"] == "postgresql://coverfarm:coverfarm@10.0.0.2:5432/coverfarm"
    assert env["COVERFARM_BROKER_URL"] == "redis://10.0.0.2:6379/0"
    # what the tests add is a farm setting or the stand-in's own, never one the compose file sets
    assert not set(TEST_SETTINGS) & set(env)
    fields = {f"COVERFARM_{name.upper()}" for name in Settings.model_fields}
    assert {key for key in TEST_SETTINGS if key.startswith("COVERFARM_")} <= fields
