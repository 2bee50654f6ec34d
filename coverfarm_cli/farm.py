"""``coverfarm serve|worker|sweep``: run the farm's processes and talk to its API.

With no configuration, ``serve`` and ``worker`` share the embedded default in ``$COVERFARM_HOME``
(SQLite, a filesystem broker) and ``serve`` writes the admin token there, where the client commands
on the same machine find it. Imports stay light: no torch, and the server and worker modules load
only in the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from coverfarm import catalog, tracker
from coverfarm.device_classes import backend_of
from coverfarm.errors import UserError
from coverfarm.settings import Settings, get_settings
from coverfarm_cli import offline
from coverfarm_cli.farm_api import DEFAULT_URL, _request, _token
from coverfarm_cli.follow import follow
from coverfarm_cli.processes import STOP_GRACE_S, exit_on_signals, start_child, stop_groups

DONE_STATES = ("done", "cancelled")


UP_POLICIES = "act,tdmpc,diffusion,gaussian_actor,vqbet,multi_task_dit"  # coverfarm up's default sweep


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the orchestrator (REST API, events, reconciler)")
    serve.add_argument("--host", help="address to bind (COVERFARM_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (COVERFARM_PORT, 8000)")
    serve.set_defaults(func=run_serve)

    worker = sub.add_parser(
        "worker", help="run a CPU worker on its stack's lower queues and those of the memory it has"
    )
    worker.add_argument(
        "--stack", help="the stack this environment is (COVERFARM_STACK, else the detected one)"
    )
    worker.add_argument(
        "--queues", help="queues to take jobs from (default: the stack's and its memory classes')"
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        help="jobs at once (COVERFARM_WORKER_CONCURRENCY, 1), fewer where each would get under --min-job-gb",
    )
    worker.add_argument(
        "--min-job-gb",
        type=float,
        help="the least memory each job at once keeps, GB (16; coverfarm up gives 6 to a sweep of light "
        "policies)",
    )
    worker.add_argument("--name", default="cpu@%h", help="worker name (Celery's %%h is the host name)")
    worker.add_argument(
        "--quiet", action="store_true", help="no Celery banner at start (coverfarm up's worker runs so)"
    )
    worker.set_defaults(func=run_worker)

    up = sub.add_parser(
        "up", help="serve, start a worker beside it and run a sweep through both (the embedded default)"
    )
    # The jobs start in this order. act first, so the grid has a row within minutes; then the longest
    # lowerings (tdmpc, diffusion), which ended the sweep when they started last; then the quick ones.
    up.add_argument(
        "--policies",
        default=UP_POLICIES,
        help=f"comma-separated, started in this order ({UP_POLICIES}; every policy the engine supports)",
    )
    up.add_argument(
        "--backends", default="vulkan,xnnpack", help=f"comma-separated ({','.join(catalog.BACKENDS)})"
    )
    up.add_argument("--host", help="address to bind (COVERFARM_HOST, 127.0.0.1)")
    up.add_argument("--port", type=int, help="port (COVERFARM_PORT, 8000)")
    up.add_argument("--once", action="store_true", help="stop after printing the report instead of serving")
    up.set_defaults(func=run_up)

    sweep = sub.add_parser("sweep", help="submit a sweep and follow it").add_subparsers(
        dest="sweep_command", required=True, metavar="SWEEP_COMMAND"
    )
    submit = sweep.add_parser("submit", help="submit policies x backends; --wait follows it to the end")
    submit.add_argument("--policies", required=True, help="comma-separated, e.g. act,vqbet")
    submit.add_argument("--backends", required=True, help=f"comma-separated, of {','.join(catalog.BACKENDS)}")
    submit.add_argument(
        "--stacks", help="comma-separated stacks to measure each cell on (default: the default stack)"
    )
    submit.add_argument("--no-constant-prop", dest="constant_prop", action="store_false")
    submit.add_argument("--lowering", choices=["stock", "fast"], default="fast")
    submit.add_argument(
        "--weights",
        choices=["auto", "real", "fake"],
        default="auto",
        help="real or fake (shapes only) weights; auto: fake where the real ones would not fit the worker",
    )
    submit.add_argument(
        "--force-fp16", action="store_true", help="VulkanPartitioner({'force_fp16': True}) for Vulkan cells"
    )
    submit.add_argument(
        "--etrecord",
        action="store_true",
        help="bundles carry their programs' ETRecords (for device profiles)",
    )
    submit.add_argument(
        "--workaround",
        dest="workarounds",
        action="append",
        default=[],
        metavar="NAME",
        help="lower the cells of the backends it is for with this graph rewrite, recorded as changing "
        "what is measured (repeatable; coverfarm.workarounds)",
    )
    submit.add_argument(
        "--timeout", dest="timeout_s", type=float, help="bound of each stage in seconds (the farm's default)"
    )
    submit.add_argument(
        "--fresh", action="store_true", help="lower every cell again, even where a stored result matches"
    )
    submit.add_argument(
        "--reuse-unfinished",
        action="store_true",
        help="let cells reuse stored slow and failed results too (by default only ok ones)",
    )
    submit.add_argument(
        "--reuse-device",
        action="store_true",
        help="let a reused cell take the device runs and baselines stored with its result too, "
        "instead of running its bundle again",
    )
    submit.add_argument("--wait", action="store_true", help="wait until every cell is done, print the report")
    submit.add_argument(
        "--device-classes", default="", help="comma-separated device classes to run bundles on (none)"
    )
    submit.set_defaults(func=run_submit)
    status = sweep.add_parser("status", help="the state of each cell of a sweep")
    status.add_argument("id", type=int)
    status.set_defaults(func=run_status)
    report = sweep.add_parser(
        "report", help="the tracker body per backend: Coverage, Notes, Built on, Known issues with repros"
    )
    report.add_argument("id", type=int)
    report.add_argument(
        "--backend",
        action="append",
        help="only this backend's body, the body of its tracker issue (e.g. vgf); repeat it for several",
    )
    report.set_defaults(func=run_report)
    report.add_argument("--stack", help="only this stack's bodies (a sweep of several stacks has one each)")
    diff = sweep.add_parser(
        "diff",
        help="what changed from sweep A to sweep B: cells, numbers, blockers",
        description="SWEEP[:STACK] each side: `diff 7:et-1.4.1 7:et-1.5.1` compares two stacks of sweep 7; "
        "without a stack, cells pair with the same stack's of the other sweep",
    )
    diff.add_argument("a", metavar="A[:STACK]")
    diff.add_argument("b", metavar="B[:STACK]")
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")
    diff.set_defaults(func=run_diff)
    progress = sweep.add_parser(
        "progress", help="each stack's tracker row per policy and backend, the changes and blocker groups"
    )
    progress.add_argument("id", type=int)
    progress.add_argument("--json", action="store_true", help="print the progress as JSON")
    progress.set_defaults(func=run_progress)
    for parser in (submit, status, report, diff, progress):
        parser.add_argument("--url", default=DEFAULT_URL, help=f"the orchestrator ({DEFAULT_URL})")
    offline.add_sweep_command(sweep, DEFAULT_URL)
    submit.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")


def run_serve(args: argparse.Namespace) -> int:
    from coverfarm_cli.serving import farm_server
    from dashboard.app import create_app

    settings = _prepare(get_settings())
    settings.ensure_admin_token()
    if settings.admin_token is None:
        print(f"coverfarm: admin token in {settings.token_path()}", file=sys.stderr)
    host, port = args.host or settings.host, args.port or settings.port
    # Event streams never end by themselves; past timeout_graceful_shutdown, shutdown closes them.
    farm_server(create_app(settings), settings, host, port, timeout_graceful_shutdown=3).run()
    return 0


def run_up(args: argparse.Namespace) -> int:
    """Serve, start a worker and a local runner, submit the sweep; whatever ends it (the sweep done with
    --once, Ctrl-C, SIGTERM, SIGHUP) stops the worker and the runner with it, SIGKILLed should they not
    stop within ``STOP_GRACE_S``."""
    with exit_on_signals():
        return _up(args)


def up_worker_options(policies: list[str]) -> list[str]:
    """``up``'s worker options: a sweep of light policies lowers one per CPU this process may use (its
    affinity mask and quota) where memory allows (``worker_memory.light_concurrency``), unless
    ``COVERFARM_WORKER_CONCURRENCY`` says how many; otherwise none (one job at a time)."""
    from coverfarm.worker_memory import LIGHT_JOB_MEMORY_GB, light_concurrency, worker_memory_gb
    from farmrun.cpu_share import usable_cpus

    if "COVERFARM_WORKER_CONCURRENCY" in os.environ:
        return []
    try:
        memory_gb = worker_memory_gb()
    except ValueError as error:
        raise UserError(str(error)) from None
    jobs = light_concurrency(policies, usable_cpus(), memory_gb)
    return ["--concurrency", str(jobs), "--min-job-gb", f"{LIGHT_JOB_MEMORY_GB:g}"] if jobs > 1 else []


def _up(args: argparse.Namespace) -> int:
    from coverfarm_cli.serving import farm_server
    from dashboard.app import create_app

    settings = _prepare(get_settings())
    token = settings.ensure_admin_token()
    host, port = args.host or settings.host, args.port or settings.port
    app = create_app(settings)
    server = farm_server(app, settings, host, port, log_level="warning", timeout_graceful_shutdown=3)
    # A daemon: should the server not stop within its bound, this process still exits.
    serving = threading.Thread(target=server.run, name="coverfarm-serve", daemon=True)
    serving.start()
    # Its own process group, stopped as a whole below (and by the kernel should this process be killed).
    worker = start_child(
        [
            sys.executable,
            "-c",
            "import sys; from coverfarm_cli import main; sys.exit(main())",
            "worker",
            "--quiet",
            *up_worker_options(_names(args.policies)),
        ]
    )
    runner: subprocess.Popen[bytes] | None = None
    try:
        while not server.started:
            if not serving.is_alive():
                raise UserError(f"the orchestrator could not start on {host}:{port}")
            time.sleep(0.1)
        url = f"http://{host}:{port}"
        print(f"coverfarm: serving {url}", file=sys.stderr)
        from coverfarm_cli.runner_farm import start_local_runner

        runner, classes = start_local_runner(url, token, settings)
        chosen = set(_names(args.backends))
        classes = [name for name in classes if backend_of(name) in chosen]
        submit = argparse.Namespace(
            url=url, token=token, policies=args.policies, backends=args.backends, constant_prop=True,
            lowering="fast", timeout_s=None, wait=True, device_classes=",".join(classes),
        )  # fmt: skip
        code = run_submit(submit)
        if not args.once:
            print(f"coverfarm: serving {url} until Ctrl-C", file=sys.stderr)
            serving.join()
        return code
    finally:
        # Together, within one bound: a worker finishing its job (Celery's warm shutdown) is SIGKILLed.
        stop_groups([process for process in (runner, worker) if process is not None])
        server.should_exit = True
        serving.join(timeout=STOP_GRACE_S)


def run_worker(args: argparse.Namespace) -> int:
    """A Celery worker of one stack: it takes its stack's queues and those of each memory class its
    jobs' share of memory holds (``coverfarm.routes``), and registers the stack, its versions and that
    memory."""
    from coverfarm.routes import check_stack_name, worker_queues
    from coverfarm.stack_detect import STACK_ENV, detect_stack
    from coverfarm.worker_memory import JOB_MEMORY_FLOOR_GB, MEMORY_ENV, concurrency_for, worker_memory_gb

    if args.concurrency is not None and args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.min_job_gb is not None and not args.min_job_gb > 0:
        raise UserError(f"--min-job-gb must be a positive number of GB, got {args.min_job_gb:g}")
    try:
        stack = check_stack_name(args.stack) if args.stack is not None else detect_stack()
        memory_gb = worker_memory_gb()
    except ValueError as error:
        raise UserError(str(error)) from None
    settings = _prepare(get_settings())
    asked = args.concurrency or settings.worker_concurrency
    floor_gb = args.min_job_gb if args.min_job_gb is not None else JOB_MEMORY_FLOOR_GB
    concurrency = concurrency_for(memory_gb, asked, floor_gb)
    per_job_gb = memory_gb / concurrency
    # The worker's own processes (Celery's, the engine's stage children) read both from here: the stack
    # it registers and checks jobs against, and the memory each job decides its weights by.
    os.environ[STACK_ENV] = stack
    os.environ[MEMORY_ENV] = repr(per_job_gb)
    threads = stage_threads(concurrency)
    if threads is not None:
        os.environ[THREADS_ENV] = str(threads)
    queues = args.queues or ",".join(worker_queues(stack, per_job_gb))
    lowered = f" (asked for {asked}: {memory_gb:.1f} GB holds no more)" if concurrency < asked else ""
    each = f"{per_job_gb:.1f} GB" + (f" and {threads} thread(s)" if threads is not None else "")
    print(
        f"coverfarm: worker of stack {stack}, {concurrency} job(s) at once{lowered}, {each} each, "
        f"on {queues}",
        file=sys.stderr,
    )
    from farmrun.celery_app import quiet_as_root
    from orchestrator.jobs.tasks import app

    quiet_as_root(app)
    app.worker_main(
        [
            *(["--quiet"] if args.quiet else []),  # celery's own option, before its sub-command
            "worker",
            "--queues",
            queues,
            "--concurrency",
            str(concurrency),
            "--pool",
            "prefork",
            "--hostname",
            args.name,
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "INFO",
        ]
    )
    return 0


THREADS_ENV = "OMP_NUM_THREADS"  # PyTorch's intra-op threads in the engine's stage children


def stage_threads(concurrency: int) -> int | None:
    """The threads each of ``concurrency`` jobs' stage children may run where jobs share the CPUs this
    process may use (``farmrun.cpu_share.usable_cpus``), or None: one job at a time, or the user's own
    ``OMP_NUM_THREADS``, leaves PyTorch's default. Two lowerings of two threads each on 2 cores kept a
    load of about 3 and each took twice its time alone; a thread pool larger than its cores collapses."""
    from farmrun.cpu_share import usable_cpus

    if concurrency <= 1 or THREADS_ENV in os.environ:
        return None
    return max(1, usable_cpus() // concurrency)


def _prepare(settings: Settings) -> Settings:
    from orchestrator.db import check_sqlite
    from orchestrator.migrate import upgrade

    settings.ensure_home()
    if settings.is_embedded:
        check_sqlite(settings.sqlite_path)  # a damaged file is refused here, not met as 500s later
    # Alembic is idempotent at head; the embedded default has nobody else to run it.
    upgrade(settings)
    return settings


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


def run_submit(args: argparse.Namespace) -> int:
    """POST the sweep with every option the API takes (``SweepCreate``); ``--wait`` follows it."""
    body: dict[str, Any] = {
        "policies": _names(args.policies),
        "backends": _names(args.backends),
        "options": {
            "constant_prop": args.constant_prop,
            "lowering": args.lowering,
            "weights": getattr(args, "weights", "auto"),
            "force_fp16": getattr(args, "force_fp16", False),
            "etrecord": getattr(args, "etrecord", False),
            "workarounds": getattr(args, "workarounds", []),
        },
    }
    if args.timeout_s is not None:
        body["timeout_s"] = args.timeout_s
    if getattr(args, "fresh", False):
        body["fresh"] = True
    if getattr(args, "reuse_unfinished", False):
        body["reuse_unfinished"] = True
    if getattr(args, "reuse_device", False):
        body["reuse_device"] = True
    if getattr(args, "device_classes", ""):
        body["device_classes"] = _names(args.device_classes)
    if getattr(args, "stacks", None):
        body["stacks"] = _names(args.stacks)
    url = args.url.rstrip("/")
    sweep = _request("POST", f"{url}/api/sweeps", _token(args), json=body).json()
    print(f"sweep {sweep['id']}: {len(sweep['cells'])} cells queued", file=sys.stderr)
    print(f"grid: {url}/sweeps/{sweep['id']}", file=sys.stderr)
    if args.wait:
        follow(url, sweep["id"], _Ending(url, sweep["id"]))
        print(_request("GET", f"{url}/api/sweeps/{sweep['id']}/report.md").text)
    print(sweep["id"])  # alone on the last line, for scripts
    return 0


# A sweep whose every pending cell waits for a worker (of a stack, or a memory class, that no online
# worker serves) is followed this long, then left: nothing in it moves until such a worker comes.
STALL_GRACE_S = 30.0
# A device job's stage as the API shows it (orchestrator.jobs.sending.STAGE_PREFIX): the API carries no
# job kind, so this client tells a device job by its public stage name.
DEVICE_STAGES = ("run:", "baseline:")


class _Ending:
    """``done`` for ``follow``: the sweep's summary says it ended, or, read after the stream was quiet,
    every pending cell has waited ``STALL_GRACE_S`` for a worker that is not there (said on stderr)."""

    def __init__(self, url: str, sweep_id: int) -> None:
        self.url, self.sweep_id = url, sweep_id
        self.stalled_since: float | None = None

    def __call__(self, quiet: bool) -> bool:
        if _state(self.url, self.sweep_id) in DONE_STATES:
            return True
        if not quiet:
            self.stalled_since = None
            return False
        sweep = _request("GET", f"{self.url}/api/sweeps/{self.sweep_id}").json()
        reasons = waits_for_workers(sweep)
        if reasons is None:
            self.stalled_since = None
            return False
        self.stalled_since = self.stalled_since or time.monotonic()
        if time.monotonic() - self.stalled_since < STALL_GRACE_S:
            return False
        print(f"coverfarm: sweep {self.sweep_id} stops here: {'; '.join(reasons)}", file=sys.stderr)
        return True


def waits_for_workers(sweep: dict[str, Any]) -> list[str] | None:
    """Why the running sweep's pending cells wait, when each of them waits for a worker no online one is
    and no device job is pending (None otherwise: something can still move)."""
    pending = [cell for cell in sweep["cells"] if cell["pending"]]
    if sweep["state"] != "running" or not pending or any(not cell.get("waiting") for cell in pending):
        return None
    if any(
        job["stage"].startswith(DEVICE_STAGES) and job["status"] in ("queued", "running")
        for cell in sweep["cells"]
        for job in cell["jobs"]
    ):
        return None
    return sorted({str(cell["waiting"]) for cell in pending})


def _state(url: str, sweep_id: int) -> str:
    """The sweep's state from its summary (counts, no cell), said on stderr."""
    summary = _request("GET", f"{url}/api/sweeps/{sweep_id}/summary").json()
    print(f"sweep {sweep_id}: {summary['state']} {json.dumps(summary['counts'])}", file=sys.stderr)
    return str(summary["state"])


def run_status(args: argparse.Namespace) -> int:
    sweep = _request("GET", f"{args.url.rstrip('/')}/api/sweeps/{args.id}").json()
    print(f"sweep {sweep['id']}: {sweep['state']} {json.dumps(sweep['counts'])}")
    stacks = len(sweep.get("stacks", [])) > 1
    for cell in sweep["cells"]:
        job = cell["jobs"][-1] if cell["jobs"] else {}
        marker = f" {tracker.PENDING}" if cell["pending"] else ""
        why = cell.get("waiting") or job.get("status_reason")
        reason = f"  ({why})" if why else ""
        stack = f" {cell['stack']:<12}" if stacks else ""
        print(f"  {cell['policy']:<16} {cell['backend']:<10}{stack} {cell['state']}{marker}{reason}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    params = {name: value for name in ("backend", "stack") if (value := getattr(args, name, None))}
    print(_request("GET", f"{args.url.rstrip('/')}/api/sweeps/{args.id}/report.md", params=params).text)
    return 0


def _side(text: str) -> tuple[int, str | None]:
    """``SWEEP[:STACK]``: a sweep id and, perhaps, one of its stacks."""
    sweep, colon, stack = text.partition(":")
    if not sweep.isdigit() or int(sweep) < 1 or (colon and not stack):
        raise UserError(f"{text!r} is not SWEEP[:STACK] (a sweep id, then perhaps ':' and a stack's name)")
    return int(sweep), stack or None


def run_diff(args: argparse.Namespace) -> int:
    (a, stack_a), (b, stack_b) = _side(args.a), _side(args.b)
    url = f"{args.url.rstrip('/')}/api/sweeps/{a}/diff/{b}"
    params = {name: value for name, value in (("stack_a", stack_a), ("stack_b", stack_b)) if value}
    if args.json:
        print(json.dumps(_request("GET", url, params=params).json(), indent=2))
    else:
        print(_request("GET", f"{url}.md", params=params).text, end="")
    return 0


def run_progress(args: argparse.Namespace) -> int:
    url = f"{args.url.rstrip('/')}/api/sweeps/{args.id}/progress"
    if args.json:
        print(json.dumps(_request("GET", url).json(), indent=2))
    else:
        print(_request("GET", f"{url}.md").text, end="")
    return 0
