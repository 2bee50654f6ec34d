"""The farm across real host boundaries: each part on a host of its own, built from Linux network
namespaces on this machine, and started with the commands and settings of ``docker-compose.yml``.

A ``Network`` is a bridge in the test's own namespace with one veth pair per ``Host``: each host has its
own network stack, address and hostname (a UTS namespace, so Celery's ``%h`` names the host), and the
only way between two of them is the bridge. ``Host.cut`` takes a host's link down (its open TCP
connections hang, as behind a cut cable, rather than being reset), ``Host.mend`` brings it back.

``ComposeFarm`` lays ``docker-compose.yml`` onto hosts: Postgres and Redis on ``db``, the orchestrator on
``orchestrator`` and each worker on a host of its own. Every command and setting comes from the compose
file (its ``command``, its shared ``environment`` with the service names ``postgres`` and ``redis``
resolved to the ``db`` host's address); the tests add only the stand-in engine and shorter heartbeats
(``TEST_SETTINGS``), so the file and the harness cannot drift apart unnoticed
(``tests/hosts/test_compose_hosts.py``).

Needs root, iproute2 and PostgreSQL 15's server binaries; elsewhere the tests are skipped with that
reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml
from farmkit import ROOT, TOKEN, child_env, coverfarm_command, wait_for

COMPOSE = ROOT / "docker-compose.yml"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
API_PORT = 8000  # the orchestrator's port in docker-compose.yml

# What the tests set on top of the compose file: the stand-in engine, and heartbeats short enough
# that a lost host's job comes back within seconds.
TEST_SETTINGS = {
    "COVERFARM_ENGINE": "standin_engine:analyze",
    "COVERFARM_POLICIES": "act,diffusion,vqbet",
    "COVERFARM_BACKENDS": "vulkan,xnnpack",
    "COVERFARM_HEARTBEAT_INTERVAL_S": "1",
    "COVERFARM_HEARTBEAT_TIMEOUT_S": "8",
    "COVERFARM_RECONCILE_INTERVAL_S": "0.5",
    "STANDIN_SECONDS": "2",
}


def missing_requirements() -> str | None:
    """Why hosts cannot be built here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2's ip and util-linux's unshare"
    if not (PG_BIN / "initdb").is_file():
        return f"needs PostgreSQL 15's server binaries in {PG_BIN}"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Host:
    """One host: a network namespace with an address on the bridge and a hostname of its own."""

    name: str
    namespace: str
    address: str
    link: str  # the veth end on the bridge's side
    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, command: Sequence[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        """``command`` on this host, in its own process group, output to ``folder/log``."""
        wrapped = [
            "ip", "netns", "exec", self.namespace, "unshare", "--uts", "sh", "-c",
            f'hostname {self.name} && exec "$@"', "sh", *command,
        ]  # fmt: skip
        with (self.folder / log).open("ab") as out:
            process = subprocess.Popen(
                wrapped, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)
        return process

    def run(self, command: Sequence[str], user: str | None = None) -> None:
        """``command`` on this host, to its end."""
        prefix = ["runuser", "-u", user, "--"] if user else []
        subprocess.run(
            ["ip", "netns", "exec", self.namespace, *prefix, *command],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def mend(self) -> None:
        _ip("link", "set", self.link, "up")


class Network:
    """A bridge with hosts on it; ``close`` removes every namespace, link and process it made."""

    def __init__(self, folder: Path) -> None:
        tag = f"{os.getpid() % 10000:04d}{int(time.monotonic() * 1000) % 100:02d}"
        self.tag = tag
        self.bridge = f"cfb{tag}"
        self.subnet = f"10.{200 + int(tag[:2]) % 50}.{int(tag[2:]) % 250}"
        self.folder = folder
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    def host(self, name: str) -> Host:
        index = len(self.hosts) + 2
        namespace, link, inner = f"cf{self.tag}{name}", f"cfv{self.tag}{index}", f"cfi{self.tag}{index}"
        address = f"{self.subnet}.{index}"
        _ip("netns", "add", namespace)
        _ip("link", "add", link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        _ip("link", "set", link, "master", self.bridge)
        _ip("link", "set", link, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inner)
        _ip("-n", namespace, "link", "set", inner, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", namespace, "route", "add", "default", "via", self.gateway)
        folder = self.folder / name
        folder.mkdir(parents=True, exist_ok=True)
        host = Host(name, namespace, address, link, folder)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        """Every process the hosts ran is killed outright (the hosts go with them), then the links."""
        for host in self.hosts.values():
            for process in host.processes:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(30)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", host.link], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def compose_environment(db_address: str) -> dict[str, str]:
    """The compose file's shared environment, its service names resolved to the ``db`` host."""
    env: dict[str, str] = {}
    for key, value in compose()["x-coverfarm"]["environment"].items():
        text = str(value)
        if text.startswith("${COVERFARM_ADMIN_TOKEN"):
            text = TOKEN
        env[key] = text.replace("@postgres:", f"@{db_address}:").replace("//redis:", f"//{db_address}:")
    return env


def compose_command(service: str) -> list[str]:
    """The service's compose ``command``, its ``coverfarm`` run by this interpreter."""
    command = [str(part) for part in compose()["services"][service]["command"]]
    return coverfarm_command(*command[1:]) if command[0] == "coverfarm" else command


class ComposeFarm:
    """docker-compose.yml's services on hosts of their own: ``db`` (Postgres and Redis),
    ``orchestrator``, and one host per worker."""

    def __init__(
        self,
        folder: Path,
        workers: Sequence[str] = ("worker1", "worker2"),
        path: Sequence[Path] = (),
        **settings: str,
    ) -> None:
        """``path``: directories the farm's processes import a stand-in engine from; ``settings``: more
        test settings over ``TEST_SETTINGS``."""
        self.network = Network(folder)
        self.folder = folder
        self.path = list(path)
        try:
            self.db = self.network.host("db")
            self.orchestrator = self.network.host("orch")
            self.workers = {name: self.network.host(name) for name in workers}
            self.artifacts = folder / "artifacts"  # the compose file's shared "artifacts" volume
            self.artifacts.mkdir()
            self._pg_folder = Path(tempfile.mkdtemp(prefix="coverfarm-hosts-pg-"))
            shutil.chown(self._pg_folder, "postgres", "postgres")
            self.env = compose_environment(self.db.address) | TEST_SETTINGS | settings
            self.env["COVERFARM_ARTIFACT_DIR"] = str(self.artifacts)
            self.url = f"http://{self.orchestrator.address}:{API_PORT}"
            self._init_postgres()
            self.start_redis()
            self.start_orchestrator()
            for name in self.workers:
                self.start_worker(name)
        except BaseException:
            self.close()
            raise

    # --- the db host: Postgres and Redis --------------------------------------------------------

    def _init_postgres(self) -> None:
        service = compose()["services"]["postgres"]["environment"]
        data = self._pg_folder / "data"
        self.db.run([str(PG_BIN / "initdb"), "-D", str(data), "-U", service["POSTGRES_USER"], "-A", "trust",
                     "--no-sync"], user="postgres")  # fmt: skip
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.network.subnet}.0/24 trust\n")
        self.start_postgres()
        create = f'CREATE DATABASE "{service["POSTGRES_DB"]}"'
        self.db.run([str(PG_BIN / "psql"), "-h", str(self._pg_folder), "-U", service["POSTGRES_USER"],
                     "-d", "postgres", "-c", create], user="postgres")  # fmt: skip

    def start_postgres(self) -> None:
        options = f"-p 5432 -k {self._pg_folder} -c listen_addresses={self.db.address} -c fsync=off"
        self.db.run([str(PG_BIN / "pg_ctl"), "-D", str(self._pg_folder / "data"), "-o", options,
                     "-l", str(self._pg_folder / "log"), "-w", "start"], user="postgres")  # fmt: skip

    def crash_postgres(self) -> None:
        self.db.run([str(PG_BIN / "pg_ctl"), "-D", str(self._pg_folder / "data"), "-m", "immediate", "-w",
                     "stop"], user="postgres")  # fmt: skip

    def start_redis(self) -> None:
        command = [str(part) for part in compose()["services"]["redis"]["command"]]
        # The official redis image is built with protected mode off; a plain redis-server needs the flag
        # to answer the other hosts.
        command += ["--bind", self.db.address, "--port", "6379", "--protected-mode", "no",
                    "--dir", str(self.db.folder)]  # fmt: skip
        self.redis = self.db.start(command, dict(os.environ), "redis.log")
        wait_for(lambda: self._redis_answers(), 15, "redis on the db host")

    def _redis_answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(host=self.db.address, port=6379, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def kill_redis(self) -> None:
        self.redis.kill()
        self.redis.wait(10)

    # --- the orchestrator and the workers -------------------------------------------------------

    def start_orchestrator(self) -> None:
        env = child_env(self.env, self.path, COVERFARM_HOME=str(self.orchestrator.folder / "home"))
        self.server = self.orchestrator.start(compose_command("orchestrator"), env, "serve.log")
        wait_for(self._api_answers, 60, "the orchestrator host to answer")

    def _api_answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/sweeps", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        host = self.workers[name]
        env = child_env(self.env, self.path, COVERFARM_HOME=str(host.folder / "home"))
        log = host.folder / "worker.log"
        process = host.start(compose_command("worker"), env, "worker.log")
        wait_for(lambda: b" ready." in log.read_bytes() or process.poll() is not None, 60, f"{name} ready")
        assert process.poll() is None, log.read_text()
        return process

    def cli(self, host: Host, *args: str) -> str:
        """A ``coverfarm`` command on ``host``, to its end; its standard output."""
        env = child_env(self.env, self.path, COVERFARM_HOME=str(host.folder / "home"))
        done = subprocess.run(
            ["ip", "netns", "exec", host.namespace, *coverfarm_command(*args)],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def database(self) -> psycopg.Connection[Any]:
        service = compose()["services"]["postgres"]["environment"]
        return psycopg.connect(
            host=self.db.address, user=service["POSTGRES_USER"], dbname=service["POSTGRES_DB"],
            connect_timeout=5,
        )  # fmt: skip

    def close(self) -> None:
        self.network.close()
        folder: Path | None = getattr(self, "_pg_folder", None)
        if folder is not None:
            stop_cluster = [str(PG_BIN / "pg_ctl"), "-D", str(folder / "data"), "-m", "immediate", "stop"]
            as_postgres = ["runuser", "-u", "postgres", "--", *stop_cluster]
            subprocess.run(as_postgres, capture_output=True, timeout=60)
            shutil.rmtree(folder, ignore_errors=True)
