"""Measure reading a big sweep: the API and the grid at --cells cells, on Postgres.

One sweep of --cells cells is stored through the jobs service as a worker stores it (start, then finish
with a result document), but for the first --events cells, left queued. Then it prints:

1. Latency (p50/p99 over --requests, after a warm-up) of GET /api/sweeps (the light list),
   GET /api/sweeps/{id}/summary, a page of 100 cells from the middle of GET /api/sweeps/{id}/cells
   (plain, and filtered by backend and state), the grid page GET /sweeps/{id} (the sweep's summary and
   its first rows), the next rows it loads (GET /sweeps/{id}/rows), what the page asks on an event
   (GET /sweeps/{id}/live.json?cells=ID) and the full view GET /api/sweeps/{id} (every cell with its
   jobs and document; --requests / 10 of them).
2. With Chromium (tests/dashboard/browsertools.py's, when installed): the grid's first paint
   (first-contentful-paint of a fresh load) p50/p99 over --paints loads, and, for each of the --events
   queued cells of its first rows, started and finished through the jobs service while the page is
   open, the delay from the finish's commit to the cell's new numbers on the page.
3. The delay from a result committed to its event on the SSE stream: median and max over --events.

With --baseline CHECKOUT (another checkout of coverfarm, e.g. main's), a second farm serves the same
sweep with that checkout's code, on a copy of the database taken before any event and migrated down to
that code's head revision, and each figure is measured for both, request by request in turn, so that
the machine's load weighs on both alike. The machine's load average is printed with each part.

    python benchmarks/farm_api.py [--cells 10000] [--requests 100] [--baseline /work/main]

Per-job farm overhead with stand-in workers is benchmarks/farm_overhead.py.
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from alembic import command
from celery import Celery
from farmbench import Farm, document, head_revision, load, percentile

from coverfarm.queues import QUEUE_LOWER
from coverfarm.result import Options
from orchestrator.db import take_outbox, unit_of_work
from orchestrator.jobs import sending
from orchestrator.jobs import service as jobs
from orchestrator.migrate import alembic_config, upgrade
from orchestrator.models import Cell, Sweep

BATCH = 500
BACKENDS = ["vulkan", "xnnpack"]
# No broker traffic from this process: jobs stored here are never sent (the outbox is dropped), and
# a start or finish transition sends nothing.
NO_BROKER = Celery(broker="memory://")


def seed_sweep(farm: Farm, cells: int, queued: int) -> int:
    """One sweep of ``cells`` cells, each job started and finished with a result through the service,
    but for the first ``queued`` cells' jobs."""
    policies = [f"policy{index:05d}" for index in range((cells + len(BACKENDS) - 1) // len(BACKENDS))]
    with unit_of_work(farm.sessions, NO_BROKER) as session:
        sweep = Sweep(
            constant_prop=True, lowering="stock", timeout_s=900.0, policies=policies, backends=BACKENDS
        )
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    options = Options(timeout_s=900.0).model_dump(mode="json")
    job_ids: list[tuple[int, str, str]] = []
    for start in range(0, cells, BATCH):
        with unit_of_work(farm.sessions, NO_BROKER) as session:
            sweep = session.get_one(Sweep, sweep_id)
            for index in range(start, min(cells, start + BATCH)):
                policy, backend = policies[index // len(BACKENDS)], BACKENDS[index % len(BACKENDS)]
                cell = Cell(sweep=sweep, policy=policy, backend=backend, options=options)
                session.add(cell)
                job = sending.create(session, cell, sending.STAGE_LOWER, QUEUE_LOWER, 900.0)
                job_ids.append((job.id, policy, backend))
            take_outbox(session)  # never sent: nobody consumes this sweep
    for start in range(queued, len(job_ids), BATCH):
        with unit_of_work(farm.sessions, NO_BROKER) as session:
            for job_id, policy, backend in job_ids[start : start + BATCH]:
                started = jobs.start(session, job_id, "bench@seed", farm.settings)
                assert started is not None
                jobs.finish(session, job_id, started.attempt, document(policy, backend), farm.settings)
    return sweep_id


# Start and finish a queued job in one transaction, with the code of the farm's checkout; prints the
# wall-clock time of the commit.
FINISH = """
import sys, time
from celery import Celery
from coverfarm.result import ResultDocument
from coverfarm.settings import get_settings
from orchestrator.db import make_engine, make_sessionmaker, unit_of_work
from orchestrator.jobs import service as jobs

settings = get_settings()
job_id, doc = JOB, ResultDocument.model_validate_json(sys.stdin.read())
with unit_of_work(make_sessionmaker(make_engine(settings)), Celery(broker="memory://")) as session:
    started = jobs.start(session, job_id, "bench@events", settings)
    jobs.finish(session, job_id, started.attempt, doc, settings)
print(time.time())
"""


def finish_one(farm: Farm, job_id: int) -> float:
    """Start and finish a queued job through the farm's own jobs service (this checkout's or the
    baseline's); the wall-clock time of its commit."""
    code = FINISH.replace("JOB", str(job_id))
    return float(farm.python(code, document("policy", "vulkan").model_dump_json()))


Row = tuple[str, int, list[float], list[float]]  # request, bytes, this checkout's seconds, the baseline's


def timed(client: httpx.Client, path: str) -> tuple[float, int]:
    began = time.perf_counter()
    response = client.get(path)
    seconds = time.perf_counter() - began
    response.raise_for_status()
    return seconds, len(response.content)


def api_latency(urls: list[str], sweep_id: int, cell_id: int, requests: int, slow: int) -> list[Row]:
    """Each request ``requests`` times (``slow`` times for the whole sweep's), taking turns between the
    farms of ``urls`` (this checkout's first)."""
    paths = [
        ("/api/sweeps", requests, True),
        (f"/api/sweeps/{sweep_id}/summary", requests, True),
        (f"/api/sweeps/{sweep_id}/cells?limit=100&offset=5000", requests, True),
        (f"/api/sweeps/{sweep_id}/cells?limit=100&backend=vulkan&state=ok", requests, True),
        (f"/sweeps/{sweep_id}", requests, False),
        (f"/sweeps/{sweep_id}/rows?offset=2500", requests, False),
        (f"/sweeps/{sweep_id}/live.json?cells={cell_id}", requests, False),
        (f"/api/sweeps/{sweep_id}", slow, True),
    ]
    clients = [httpx.Client(base_url=url, timeout=300) for url in urls]
    rows: list[Row] = []
    try:
        for path, count, both in paths:
            # The baseline may not have the page's newer requests; what it renders instead is timed
            # whole, fewer times when it is the whole sweep.
            turns = [(0, count)] + [(i, count if both else slow) for i in range(1, len(clients))]
            seconds: list[list[float]] = [[] for _ in clients]
            size = 0
            for index, _ in turns:
                if clients[index].get(path).status_code == 404 and index:
                    turns = [turn for turn in turns if turn[0] != index]
            for step in range(max(n for _, n in turns)):
                for index, n in turns:
                    if step < n:
                        took, length = timed(clients[index], path)
                        seconds[index].append(took)
                        size = length if index == 0 else size
            rows.append(
                (
                    path.replace(f"/{sweep_id}", "/{id}"),
                    size,
                    seconds[0],
                    seconds[1] if len(seconds) > 1 else [],
                )
            )
    finally:
        for client in clients:
            client.close()
    return rows


def ms(values: list[float], share: float) -> str:
    return f"{1000 * percentile(values, share):9.1f}" if values else f"{'-':>9}"


def print_rows(rows: list[Row], baseline: bool) -> None:
    head = f"   {'request':<58} {'bytes':>9} {'n':>4} {'p50':>9} {'p99':>9}"
    if baseline:
        head += f" | {'n':>4} {'before p50':>10} {'p99':>9} {'p50 ratio':>9}"
    print(head)
    for name, size, after, before in rows:
        line = f"   {'GET ' + name:<58} {size:>9} {len(after):>4} {ms(after, 0.5)} {ms(after, 0.99)}"
        if baseline:
            ratio = f"{percentile(before, 0.5) / percentile(after, 0.5):8.1f}×" if before else f"{'-':>9}"
            line += f" | {len(before):>4} {ms(before, 0.5):>10} {ms(before, 0.99)} {ratio}"
        print(line)


# --- the grid in Chromium ---------------------------------------------------------------------------


def chromium() -> Any:
    """Headless Chromium as the browser tests drive it, or None when it is not installed."""
    tests = Path(__file__).resolve().parents[1] / "tests"
    sys.path[:0] = [str(tests / "dashboard"), str(tests)]  # browsertools, and the farmkit it imports
    try:
        import browsertools
        import selenium  # noqa: F401
    except ImportError:
        return None
    import shutil

    if not (shutil.which(browsertools.CHROMIUM) and shutil.which(browsertools.CHROMEDRIVER)):
        return None
    driver = browsertools.chromium(javascript=True)
    driver.set_page_load_timeout(600)
    return driver


FIRST_PAINT = (
    "var p = performance.getEntriesByName('first-contentful-paint')[0];return p ? p.startTime : null;"
)
WATCH = """
var ids = arguments[0];
var cellText = function (id) {
  var td = document.querySelector('td[data-cell="' + id + '"]');
  return td ? td.textContent : null;
};
window.__shown = {};
var before = {};
ids.forEach(function (id) { before[id] = cellText(id); });
new MutationObserver(function () {
  ids.forEach(function (id) {
    var text = cellText(id);
    // shown: the cell's text has changed since the watch began and is no longer pending
    var done = text !== null && text !== before[id] && text.indexOf('⏳') < 0;
    if (done && window.__shown[id] === undefined) window.__shown[id] = Date.now();
  });
}).observe(document.getElementById('grid'), {childList: true, subtree: true, characterData: true});
"""


def first_paints(driver: Any, url: str, loads: int) -> list[float]:
    """Seconds from navigation to the first contentful paint of fresh loads of ``url``."""
    paints = []
    for _ in range(loads):
        driver.get("about:blank")
        driver.get(url)
        deadline = time.monotonic() + 600
        while (paint := driver.execute_script(FIRST_PAINT)) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        paints.append(paint / 1000)
    return paints


def event_to_page(driver: Any, farm: Farm, sweep_id: int, cells: list[tuple[int, int]]) -> list[float]:
    """Per (cell, job) of the page's first rows: seconds from its result's commit to its numbers on the
    open page."""
    driver.get(f"{farm.url}/sweeps/{sweep_id}")
    deadline = time.monotonic() + 600
    while driver.execute_script("return document.getElementById('sweep').dataset.synced") is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the grid never synced")
        time.sleep(0.05)
    driver.execute_script(WATCH, [cell for cell, _ in cells])
    delays = []
    for cell, job in cells:
        committed = finish_one(farm, job)
        deadline = time.monotonic() + 600
        while (shown := driver.execute_script(f"return window.__shown[{cell}]")) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cell {cell} never showed its result")
            time.sleep(0.01)
        delays.append(shown / 1000 - committed)
    return delays


# --- the event stream -------------------------------------------------------------------------------


@contextmanager
def event_stream(url: str, sweep_id: int) -> Iterator[queue.Queue[tuple[float, dict[str, Any]]]]:
    received: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    opened = threading.Event()
    client = httpx.Client(timeout=httpx.Timeout(10, read=None))

    def read() -> None:
        try:
            with client.stream("GET", f"{url}/api/events", params={"sweep": sweep_id}) as response:
                for line in response.iter_lines():
                    opened.set()
                    if line.startswith("data:"):
                        received.put((time.perf_counter(), json.loads(line.removeprefix("data:"))))
        except httpx.HTTPError:
            pass  # closed below

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not opened.wait(10):
        raise RuntimeError("the event stream did not open")
    try:
        yield received
    finally:
        client.close()
        reader.join(timeout=5)


def event_delay(farm: Farm, results: int) -> list[float]:
    """Seconds from a result's commit to its job's "ok" event arriving on the stream."""
    with unit_of_work(farm.sessions, NO_BROKER) as session:
        policies = [f"e{i}" for i in range(results)]
        sweep = Sweep(
            constant_prop=True, lowering="stock", timeout_s=900.0, policies=policies, backends=["vulkan"]
        )
        session.add(sweep)
        options = Options(timeout_s=900.0).model_dump(mode="json")
        cells = [Cell(sweep=sweep, policy=policy, backend="vulkan", options=options) for policy in policies]
        session.add_all(cells)
        job_ids = [
            sending.create(session, cell, sending.STAGE_LOWER, QUEUE_LOWER, 900.0).id for cell in cells
        ]
        for job_id in job_ids:
            assert jobs.start(session, job_id, "bench@events", farm.settings) is not None
        take_outbox(session)
        sweep_id = sweep.id
    delays = []
    with event_stream(farm.url, sweep_id) as received:
        for job_id in job_ids:
            with unit_of_work(farm.sessions, NO_BROKER) as session:
                jobs.finish(session, job_id, 1, document("e", "vulkan"), farm.settings)
            committed = time.perf_counter()
            while True:
                arrived, event = received.get(timeout=10)
                if event["job_id"] == job_id and event["payload"].get("status") == "ok":
                    delays.append(arrived - committed)
                    break
            time.sleep(0.02)  # one result at a time, as a worker stores them
    return delays


def queued_cells(farm: Farm, sweep_id: int) -> list[tuple[int, int]]:
    """(cell, job) of the sweep's cells whose job is still queued, in cell order."""
    with farm.sessions() as session:
        sweep = session.get_one(Sweep, sweep_id)
        return [(cell.id, cell.jobs[0].id) for cell in sweep.cells if cell.pending]


def stats(values: list[float]) -> str:
    if not values:
        return "-"
    return (
        f"n={len(values)} p50 {1000 * percentile(values, 0.5):.1f} p99 {1000 * percentile(values, 0.99):.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--slow-requests", type=int, default=5, help="of what reads the whole sweep")
    parser.add_argument("--paints", type=int, default=20, help="grid loads timed in Chromium")
    parser.add_argument("--events", type=int, default=20, help="cells left queued for the event delays")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure side by side")
    parser.add_argument("--api-only", action="store_true", help="only the latency of part 1")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="coverfarm-bench-") as folder:
        farms: list[Farm] = []
        try:
            farm = Farm(Path(folder), "after", {})
            farms.append(farm)
            upgrade(farm.settings)
            began = time.perf_counter()
            sweep_id = seed_sweep(farm, args.cells, args.events)
            print(f"seeded one sweep of {args.cells} cells through the jobs service in "
                  f"{time.perf_counter() - began:.1f} s ({args.events} left queued)")  # fmt: skip
            if args.baseline is not None:
                revision = head_revision(args.baseline)
                farm.engine.dispose()  # a database is copied only while nobody is connected to it
                before = Farm(Path(folder), "before", {}, root=args.baseline, template=farm.database)
                farms.append(before)
                command.downgrade(alembic_config(before.settings), revision)
                print(f"baseline: {args.baseline} at revision {revision}, on a copy of the same database")
            for each in farms:
                each.serve()
            queued = queued_cells(farm, sweep_id)
            slow = args.slow_requests

            print(f"\n1. Latency at {args.cells} cells (ms; {load()})")
            rows = api_latency([each.url for each in farms], sweep_id, queued[-1][0], args.requests, slow)
            print_rows(rows, len(farms) > 1)
            print(f"   ({load()})")
            if args.api_only:
                return 0

            driver = chromium()
            if driver is None:
                print("\n2. The grid in Chromium: skipped (Chromium, chromedriver or selenium missing)")
            else:
                try:
                    print(f"\n2. The grid in Chromium at {args.cells} cells ({load()})")
                    # The same queued cells for both: the baseline's database is a copy taken before.
                    runs: list[tuple[str, Farm, int, list[tuple[int, int]]]] = [
                        ("this checkout", farm, args.paints, queued)
                    ]
                    if len(farms) > 1:
                        runs.append(("baseline", farms[1], min(args.paints, slow), queued[:slow]))
                    for label, each, loads, cells in runs:
                        paints = first_paints(driver, f"{each.url}/sweeps/{sweep_id}", loads)
                        delays = event_to_page(driver, each, sweep_id, cells)
                        print(f"   {label:<14} first paint {stats(paints)} ms · result → its cell "
                              f"on the page {stats(delays)} ms, max {1000 * max(delays):.1f}")  # fmt: skip
                        # Each load's figure in order, so that one slow load (the first, say) shows as such.
                        print(f"   {'':<14} each load's first paint, ms: "
                              + " ".join(f"{1000 * paint:.0f}" for paint in paints))  # fmt: skip
                    print(f"   ({load()})")
                finally:
                    driver.quit()

            delays = event_delay(farm, args.events)
            print(f"\n3. Result committed -> its event on the SSE stream (ms; {load()})")
            print(f"   n={len(delays)} median {1000 * statistics.median(delays):.1f} "
                  f"p90 {1000 * percentile(delays, 0.9):.1f} max {1000 * max(delays):.1f}")  # fmt: skip
        finally:
            for each in reversed(farms):
                each.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
