"""``coverfarm runner register|start|revoke``: a device runner joining the farm, and signing offline results.

``register`` probes this host, enrols it with a one-time token and keeps the credential it receives in
``$COVERFARM_HOME/runner.json`` (or ``--config``), readable by its owner only; ``start`` serves the
runner's device classes (gpu_runner.agent); ``revoke`` (admin) withdraws a runner's credential.
``run-bundle`` signs its result with that credential when one is configured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coverfarm import backends
from coverfarm.device_classes import backend_of
from coverfarm.errors import UserError
from coverfarm.result import error_line
from coverfarm.settings import Settings, get_settings
from coverfarm_cli import offline
from coverfarm_cli.farm_api import DEFAULT_URL, _request, _token
from coverfarm_cli.processes import start_child
from gpu_runner.timing_options import OPTIONS, add_timing_options, timing_rules

CLI = "import sys; from coverfarm_cli import main; sys.exit(main())"


def add_commands(commands: argparse._SubParsersAction) -> None:
    register = commands.add_parser(
        "register",
        help="probe this host, enrol it with a one-time token, keep the credential (0600)",
        description="Enrol this host as a device runner of the farm at --url.",
    )
    register.add_argument("--url", required=True, help="the orchestrator, e.g. http://farm:8000")
    register.add_argument(
        "--token", required=True, help="a one-time enrolment token (`coverfarm token create`)"
    )
    register.add_argument("--name", default=socket.gethostname(), help="the runner's name (the host name)")
    register.add_argument(
        "--no-baseline",
        action="store_true",
        help="take no eager-PyTorch baseline jobs, even with torch and lerobot installed here",
    )
    _config_option(register)
    register.set_defaults(func=run_register)

    start = commands.add_parser(
        "start",
        help="heartbeat, pass the health check, then take device jobs from the runner's queues",
        description="Serve this runner's device classes until stopped (SIGTERM or Ctrl-C).",
    )
    _config_option(start)
    add_timing_options(start, runner_id=False)
    start.set_defaults(func=run_start)

    revoke = commands.add_parser("revoke", help="withdraw a runner's credential (admin)")
    revoke.add_argument("runner_id", type=int, metavar="ID")
    revoke.add_argument("--url", default=DEFAULT_URL, help=f"the orchestrator ({DEFAULT_URL})")
    revoke.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")
    revoke.set_defaults(func=run_revoke)
    offline.add_runner_command(commands, DEFAULT_URL)


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="the runner credential file (default: $COVERFARM_HOME/runner.json)"
    )


def config_path(args: argparse.Namespace) -> Path:
    path: Path = getattr(args, "config", None) or get_settings().runner_config_path
    return path


def run_register(args: argparse.Namespace) -> int:
    from coverfarm.device_result import EagerBaseline
    from farmrun.signing import new_key_pair
    from gpu_runner.config import RunnerConfig, save
    from gpu_runner.probe import probe

    report = probe()
    if args.no_baseline and report.baseline is not None:
        off = EagerBaseline(status="turned off at registration (--no-baseline)")
        report = report.model_copy(update={"baseline": off})
    if not report.device_classes:
        why = "; ".join(f"{k}: {v}" for k, v in report.not_offered.items()) or "no runtime backend"
        raise UserError(f"this host offers no device class ({why})")
    url = args.url.rstrip("/")
    private_key, public_key = new_key_pair()
    body = {
        "token": args.token,
        "name": args.name,
        "probe": report.model_dump(mode="json"),
        "signing_key": public_key,
    }
    enrolled = _request("POST", f"{url}/api/runners/enrol", json=body).json()
    config = RunnerConfig(
        url=url,
        runner_id=enrolled["runner_id"],
        credential=enrolled["credential"],
        name=args.name,
        device_classes=enrolled["device_classes"],
        broker_url=enrolled["broker_url"],
        heartbeat_interval_s=enrolled["heartbeat_interval_s"],
        device_timeout_s=enrolled["device_timeout_s"],
        baseline=report.baseline is not None and report.baseline.status == "ok",
        signing_key=private_key,
    )
    path = config_path(args)
    save(config, path)
    print(
        f"runner {config.runner_id} ({config.name}) enrolled for {', '.join(config.device_classes)}, "
        f"{enrolled['state']}; credential in {path}",
        file=sys.stderr,
    )
    print(config.runner_id)
    return 0


def run_start(args: argparse.Namespace) -> int:
    import logging

    from gpu_runner.agent import Agent, Timing
    from gpu_runner.config import load

    settings = get_settings()
    rules = timing_rules(args, settings)
    path = config_path(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per heartbeat
    config = load(path)
    timing = Timing(rules, config.runner_id, settings.timing_lock_wait_s)
    agent = Agent(config, path, settings, timing)
    return agent.run()


def run_revoke(args: argparse.Namespace) -> int:
    runner = _request(
        "POST", f"{args.url.rstrip('/')}/api/runners/{args.runner_id}/revoke", _token(args)
    ).json()
    print(f"runner {runner['id']} ({runner['name']}): {runner['state']}")
    return 0


def result_json(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The result document to write: signed with the runner credential when this host has one."""
    from farmrun.signing import sign
    from gpu_runner.config import load_if_present

    config = None if getattr(args, "unsigned", False) else load_if_present(config_path(args))
    if config is not None:
        if config.signing_key is None:
            raise UserError(
                f"{config_path(args)} holds no signing key (enrolled before runners had one): enrol "
                "again, or pass --unsigned"
            )
        result = sign(result, config.runner_id, config.signing_key)
    return json.dumps(result, indent=2)


def enrolled_runner_id(args: argparse.Namespace) -> int | None:
    """The id of the runner enrolled on this host (its credential file), None when there is none."""
    from gpu_runner.config import load_if_present

    try:
        config = load_if_present(config_path(args))
    except UserError:
        return None
    return config.runner_id if config is not None else None


def add_signing_options(run: argparse.ArgumentParser) -> None:
    _config_option(run)
    run.add_argument(
        "--unsigned", action="store_true", help="do not sign the result even when a runner is enrolled here"
    )


def start_local_runner(
    url: str, token: str, settings: Settings
) -> tuple[subprocess.Popen[bytes] | None, list[str]]:
    """For ``coverfarm up``: enrol this host as a CPU device runner of the local farm and start it.

    Returns the runner process (its own process group) and the host's CPU device classes for the
    sweep; (None, []) with one line on stderr when the host offers none. The previous local runner's
    credential, if any, is revoked first, so a host keeps one live runner however often it runs ``up``.
    """
    from gpu_runner.config import load_if_present

    path = settings.runner_config_path
    try:
        previous = load_if_present(path)
    except UserError:
        previous = None
    if previous is not None:
        # A 404 means another farm's runner (a database started afresh): nothing to revoke here.
        with contextlib.suppress(UserError):
            _request("POST", f"{url}/api/runners/{previous.runner_id}/revoke", token)
    issued = _request("POST", f"{url}/api/enrolment-tokens", token, json={}).json()["token"]
    name = f"local@{socket.gethostname()}"
    baseline, why = local_baseline(settings)
    enrolled = subprocess.run(
        [sys.executable, "-c", CLI, "runner", "register", "--url", url, "--token", issued, "--name", name,
         "--config", str(path), *([] if baseline else ["--no-baseline"])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if enrolled.returncode != 0:
        reason = error_line(enrolled.stderr) or "unknown"
        print(f"coverfarm: no local device runner ({reason})", file=sys.stderr)
        return None, []
    from gpu_runner.config import load

    cpu = {name for name, info in backends.registry().items() if info.cpu_class}
    classes = [name for name in load(path).device_classes if backend_of(name) in cpu]
    runner = start_child(
        [sys.executable, "-c", CLI, "runner", "start", "--config", str(path), *local_timing(os.environ)],
        env=local_runner_env(os.environ, baseline),
    )
    print(f"coverfarm: local device runner for {', '.join(classes) or 'no class'}; {why}", file=sys.stderr)
    return runner, classes


# What `coverfarm up`'s own runner times when no COVERFARM_TIMING__ setting says otherwise: every bundle's
# outputs are checked in full (test case, frames, every timed chunk), its latency from two replicas (the
# fewest with an interval) of a short window. It shares the host with the lowering: a figure there says
# how the bundle runs on this host, not what a quiet one would give.
LOCAL_TIMING = {"replicas": "2", "warmup": "1", "min_chunks": "3", "min_s": "0.5", "max_s": "20"}


# Where up's runner gives no speed-up, how long its timing waits for the lowering's stages to end before
# it times beside them. A timing that waits holds back every stage that would start (farmrun.hostlock): on
# 2 cores, act's brief timing waited 7 min for tdmpc's XNNPACK export, and the other lowering 6 min with it.
LOCAL_LOCK_WAIT_S = 60


def local_runner_env(environ: Mapping[str, str], baseline: bool) -> dict[str, str]:
    """``up``'s runner's environment: without eager baselines (so without speed-ups), its timings wait at
    most ``LOCAL_LOCK_WAIT_S`` for the CPU stages running, then time beside them, which the cell's page
    says ("not held, timed beside a CPU stage"), unless ``COVERFARM_TIMING_LOCK_WAIT_S`` is set."""
    env = dict(environ)
    if not baseline and "COVERFARM_TIMING_LOCK_WAIT_S" not in env:
        env["COVERFARM_TIMING_LOCK_WAIT_S"] = str(LOCAL_LOCK_WAIT_S)
    return env


def local_timing(environ: Mapping[str, str]) -> list[str]:
    """``runner start``'s timing options for ``up``'s runner, for each rule the environment leaves unset."""
    option_of = {field: option for option, (field, _, _) in OPTIONS.items()}
    return [
        arg
        for field, value in LOCAL_TIMING.items()
        if f"COVERFARM_TIMING__{field.upper()}" not in environ
        for arg in (option_of[field], value)
    ]


def local_baseline(settings: Settings) -> tuple[bool, str]:
    """Whether ``up``'s runner takes eager-baseline jobs, and the words that say why (printed by ``up``)."""
    from farmrun.cpu_share import usable_cpus

    # The host's bound, not what is busy at this moment: the sweep has not started yet, and the
    # baseline measures its own busy CPUs when it runs.
    cpus = usable_cpus()
    if cpus >= settings.up_baseline_min_cpus:
        return True, f"eager PyTorch timed beside it on up to {cpus} CPUs for the speed-ups"
    return False, (
        f"outputs checked and timed briefly (waiting at most {LOCAL_LOCK_WAIT_S} s for the lowering to "
        f"give the CPUs up), no eager baseline: this process may use {cpus} "
        f"CPU{'' if cpus == 1 else 's'}, fewer than the {settings.up_baseline_min_cpus} a known speed-up "
        "needs here (COVERFARM_UP_BASELINE_MIN_CPUS); a runner host of its own gives one"
    )
