"""The grid in headless Chromium, against a real ``coverfarm serve`` and a real ``coverfarm worker``
(running the gated stand-in engine, tests/dashboard/gated_engine.py)."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from browsertools import (
    BIG_SWEEP,
    LAPTOP,
    Gates,
    Orchestrator,
    cell_texts,
    chromium,
    save_screenshot,
    wait_until,
)
from dashtools import (
    export_failed,
    export_slow,
    fail,
    finished,
    partition_slow,
    start,
    store,
    worker_online,
)
from farmkit import wait_for
from sqlalchemy.orm import Session, sessionmaker

from coverfarm import catalog
from coverfarm.queues import QUEUE_LOWER
from coverfarm.result import Blocker
from coverfarm.settings import Settings
from farmrun.celery_app import make_celery
from orchestrator.db import unit_of_work
from orchestrator.jobs import sending
from orchestrator.models import Cell, Sweep

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

ACT_ROW = ["90 / 100 (90%)", "80%", "3", "✓", "no device"]


def submit(api: httpx.Client, policies: list[str], backends: list[str]) -> Any:
    response = api.post("/api/sweeps", json={"policies": policies, "backends": backends})
    assert response.status_code == 201, response.text
    return response.json()


def cell_id(sweep: dict[str, Any], policy: str, backend: str) -> int:
    return next(c["id"] for c in sweep["cells"] if (c["policy"], c["backend"]) == (policy, backend))


def state_of(driver: WebDriver, cell: int) -> str | None:
    state: str | None = driver.execute_script(
        "var td = document.querySelector('td[data-cell=\"' + arguments[0] + '\"]');"
        "return td && td.dataset.state;",
        cell,
    )
    return state


def watch_cell(driver: WebDriver, cell: int) -> None:
    """Record (in the page) when the cell's first column first shows something other than ⏳."""
    driver.execute_script(
        """
        var id = arguments[0];
        window.__reloaded = false;
        window.__changedAt = null;
        new MutationObserver(function () {
          var td = document.querySelector('td[data-cell="' + id + '"]');
          var done = td && td.textContent.indexOf('⏳') < 0;
          if (done && window.__changedAt === null) window.__changedAt = Date.now();
        }).observe(document.getElementById('grid'), {childList: true, subtree: true});
        """,
        cell,
    )


def test_cell_goes_from_pending_to_its_numbers_without_a_reload(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    worker: subprocess.Popen[bytes],
    gates: Gates,
) -> None:
    sweep = submit(api, ["act", "pi05"], ["vulkan"])
    act = cell_id(sweep, "act", "vulkan")
    browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
    wait_until(browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream")
    # The worker takes the first cell and waits at its gate: the grid shows it running, with its clock.
    wait_for(lambda: state_of(browser, act) == "running", 15, "the act cell to show running")
    first = cell_texts(browser, act)[0]
    assert first.startswith("⏳ running ") and first.endswith("s"), first
    time.sleep(1.2)
    assert cell_texts(browser, act)[0] != first, "the ⏳ clock does not count"
    save_screenshot(browser, "grid-live-running")

    watch_cell(browser, act)
    gates.open("act", "vulkan")
    wait_until(browser, "return window.__changedAt !== null", 15, "the act cell to show its numbers")
    assert cell_texts(browser, act) == ACT_ROW
    assert browser.execute_script("return window.__reloaded") is False  # the same page, not a reload

    # Within a second of its result being stored (the job's finish is stamped in the same transaction).
    cell = api.get(f"/api/cells/{act}").json()
    stored = datetime.fromisoformat(cell["jobs"][0]["finished_at"]).timestamp()
    shown = browser.execute_script("return window.__changedAt") / 1000
    print(f"cell shown {shown - stored:.3f} s after its result was stored")
    assert shown - stored < 1.0, f"the cell took {shown - stored:.2f} s to show"

    # pi05's engine raises: ❌ everywhere, without a reload either.
    gates.open("pi05", "vulkan")
    pi05 = cell_id(sweep, "pi05", "vulkan")
    wait_for(lambda: state_of(browser, pi05) == "failed", 15, "pi05 to show failed")
    assert cell_texts(browser, pi05) == ["❌", "❌", "❌", "❌", "-"]
    assert browser.execute_script("return window.__reloaded") is False


def test_details_open_from_the_keyboard_and_show_the_blockers(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    worker: subprocess.Popen[bytes],
    gates: Gates,
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    gates.open_all()
    sweep = submit(api, ["act", "diffusion"], ["vulkan"])
    diffusion = cell_id(sweep, "diffusion", "vulkan")
    wait_for(lambda: api.get(f"/api/sweeps/{sweep['id']}").json()["state"] == "done", 20, "the sweep")
    browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")

    # Tab stops are the cells' first columns; arrow keys move between cells; Enter opens the details.
    browser.execute_script("document.querySelector('#grid a.cell').focus()")
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    focused = browser.execute_script("return document.activeElement.dataset.cellLink")
    assert focused == str(diffusion)
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    wait_until(browser, "return document.querySelector('#panel-body .blockers') !== null", 10, "the details")
    panel = browser.execute_script("return document.getElementById('panel-body').innerText")
    assert "LEFT ON THE CPU" in panel.upper()
    assert "aten.convolution.default\top args not supported\t2\t150\t15%" in panel
    assert "aten.elu.default\tno operator implementation\t8\t0\t0%" in panel
    assert "predict_action_chunk" in panel
    assert browser.execute_script("return document.activeElement.id") == "panel"
    save_screenshot(browser, "grid-details-panel")
    ActionChains(browser).send_keys(Keys.ESCAPE).perform()
    assert browser.execute_script("return document.getElementById('panel').hidden") is True
    assert browser.execute_script("return document.activeElement.dataset.cellLink") == str(diffusion)


def test_stream_reconnects_and_resyncs_after_the_orchestrator_restarts(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    worker: subprocess.Popen[bytes],
    gates: Gates,
    live_sessions: sessionmaker[Session],
) -> None:
    sweep = submit(api, ["diffusion"], ["xnnpack"])
    cell = cell_id(sweep, "diffusion", "xnnpack")
    browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
    wait_for(lambda: state_of(browser, cell) == "running", 15, "the cell to show running")
    wait_until(browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream")
    browser.execute_script("window.__reloaded = false")

    orchestrator.stop()
    wait_until(
        browser, "return document.getElementById('live').dataset.state === 'reconnecting'", 15, "the drop"
    )
    # The result is stored while no orchestrator runs: no event reaches the page, only the resync can.
    gates.open("diffusion", "xnnpack")
    wait_for(lambda: _job_status(live_sessions, sweep) == "ok", 20, "the worker to store the result")
    assert state_of(browser, cell) == "running"

    orchestrator.start()
    wait_for(lambda: state_of(browser, cell) == "ok", 20, "the grid to resync after the restart")
    assert cell_texts(browser, cell) == ACT_ROW
    assert browser.execute_script("return window.__reloaded") is False
    wait_until(browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream")
    assert "1 done" in browser.execute_script("return document.getElementById('progress').innerText")


def _job_status(sessions: sessionmaker[Session], sweep: dict[str, Any]) -> str:
    from orchestrator.models import Job

    with sessions() as session:
        job = session.get(Job, sweep["cells"][0]["jobs"][0]["id"])
        return job.status.value if job is not None else "gone"


def _tracker_like_sweep(api: httpx.Client, sessions: sessionmaker[Session], settings: Settings) -> Any:
    """25 policies × 2 backends mid-sweep, its numbers taken from the tracker issue's Vulkan table."""
    sweep = submit(api, list(catalog.POLICIES), ["vulkan", "xnnpack"])
    jobs = {(c["policy"], c["backend"]): c["jobs"][0]["id"] for c in sweep["cells"]}
    convs = [
        Blocker(op="aten.convolution.default", reason="op args not supported", count=6, macs=770),
        Blocker(op="aten.native_group_norm.default", reason="no operator implementation", count=4, macs=0),
    ]
    rows: dict[str, Any] = {
        "act": finished("act", "vulkan", (1556, 1561), (1000, 1000), 3),
        "diffusion": finished("diffusion", "vulkan", (534, 619), (940, 1000), 50),
        "evo1": export_slow("evo1", "vulkan", (13904, 16601), (260, 1000), 61),
        "fineart_vla": export_slow("fineart_vla", "vulkan", (21670, 21704), (1000, 1000), 6),
        "gaussian_actor": finished("gaussian_actor", "vulkan", (114, 127), (1000, 1000), 5),
        "lawam": partition_slow("lawam", "vulkan", (15409, 18124), (440, 1000), 198),
        "multi_task_dit": finished("multi_task_dit", "vulkan", (1460, 1463), (1000, 1000), 5),
        "pi0": finished("pi0", "vulkan", (5624, 5654), (1000, 1000), 17),
        "pi05": export_failed("pi05", "vulkan"),
        "pi0_fast": finished("pi0_fast", "vulkan", (9059, 9082), (1000, 1000), 11),
        "smolvla": finished("smolvla", "vulkan", (2933, 7163), (160, 1000), 209),
        "tdmpc": finished("tdmpc", "vulkan", (5477, 5895), (1000, 1000), 140),
        "vla_jepa": export_slow("vla_jepa", "vulkan", (7049, 10817), (60, 1000), 191),
        "vqbet": finished("vqbet", "vulkan", (567, 594), (230, 1000), 22, convs),
        "xvla": export_slow("xvla", "vulkan", (16565, 16643), (990, 1000), 61),
    }
    for policy, doc in rows.items():
        store(sessions, settings, jobs[policy, "vulkan"], doc)
    for policy in ("act", "diffusion", "gaussian_actor", "tdmpc", "vqbet", "multi_task_dit"):
        doc = finished(policy, "xnnpack", (600, 610), (995, 1000), 4)
        store(sessions, settings, jobs[policy, "xnnpack"], doc)
    fail(sessions, settings, jobs["groot", "vulkan"], "Traceback (most recent call last):\nMemoryError")
    for key in (("dm05", "vulkan"), ("eo1", "vulkan"), ("pi0", "xnnpack")):
        start(sessions, settings, jobs[key])
    return sweep


def test_grid_of_25_policies_fits_a_laptop_with_screenshots(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    live_sessions: sessionmaker[Session],
    live_settings: Settings,
) -> None:
    # No worker: this test plays the worker itself, so the cells it leaves ⏳ stay that way.
    sweep = _tracker_like_sweep(api, live_sessions, live_settings)
    try:
        browser.get(f"{orchestrator.url}/")
        assert f"#{sweep['id']}" in browser.find_element("css selector", "table.sweeps").text
        save_screenshot(browser, "index")

        browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
        wait_until(
            browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream"
        )
        wait_until(browser, "return document.getElementById('sweep').dataset.synced", 10, "the first resync")
        time.sleep(1.3)  # let the flash of the first sync fade out of the picture
        box = browser.execute_script(
            "var t = document.getElementById('grid').getBoundingClientRect();"
            "var r = document.querySelector('#grid tbody tr:last-child').getBoundingClientRect();"
            "var h = document.querySelector('.heatmap').getBoundingClientRect();"
            "return [Math.max(t.right, h.right), r.bottom];"
        )
        assert box[0] <= LAPTOP[0], f"the grid and heatmap end at {box[0]:.0f} px"
        viewport = browser.execute_script("return [window.innerWidth, window.innerHeight]")
        assert box[1] <= viewport[1], f"the last row ends at {box[1]:.0f} px of {viewport[1]}"
        save_screenshot(browser, "grid-mid-sweep")
        # No polling loop: with no event on the stream, the page asks the server for nothing.
        fetches = "return performance.getEntriesByType('resource').filter(e => /live/.test(e.name)).length"
        before = browser.execute_script(fetches)
        time.sleep(2.5)
        assert browser.execute_script(fetches) == before
        texts = cell_texts(browser, cell_id(sweep, "act", "vulkan"))
        assert texts == ["1556 / 1561 (100%)", "100%", "3", "✓", "no device"]
        assert cell_texts(browser, cell_id(sweep, "lawam", "vulkan"))[2] == "? (198 groups)"

        vqbet = cell_id(sweep, "vqbet", "vulkan")
        browser.find_element("css selector", f'a.cell[data-cell-link="{vqbet}"]').click()
        wait_until(
            browser, "return document.querySelector('#panel-body .blockers') !== null", 10, "the panel"
        )
        save_screenshot(browser, "grid-cell-details")
        browser.get(f"{orchestrator.url}/cells/{vqbet}")
        assert "aten.convolution.default" in browser.find_element("css selector", "table.blockers").text
        save_screenshot(browser, "cell-details-page", full_height=True)
        browser.get(f"{orchestrator.url}/cells/{cell_id(sweep, 'pi05', 'vulkan')}")
        assert "trace: KeyError" in browser.find_element("css selector", ".cause").text
        save_screenshot(browser, "cell-details-failed")
    finally:
        api.post(f"/api/sweeps/{sweep['id']}/cancel")


def static_texts(driver: WebDriver, cell: int) -> list[str]:
    return [
        " ".join(td.text.split()) for td in driver.find_elements("css selector", f'td[data-cell="{cell}"]')
    ]


def test_page_is_a_static_snapshot_with_javascript_off(
    orchestrator: Orchestrator,
    api: httpx.Client,
    live_sessions: sessionmaker[Session],
    live_settings: Settings,
    tmp_path: Path,
) -> None:
    worker_online(live_sessions, live_settings)  # vqbet's job waits its turn, not for a worker
    sweep = submit(api, ["act", "vqbet"], ["vulkan"])
    act = cell_id(sweep, "act", "vulkan")
    store(live_sessions, live_settings, sweep["cells"][0]["jobs"][0]["id"], finished("act", "vulkan"))
    driver = chromium(javascript=False)
    try:
        driver.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
        # The page's script never ran: it would have marked the document and opened the stream.
        assert "js" not in (driver.find_element("tag name", "html").get_attribute("class") or "")
        assert static_texts(driver, act) == ACT_ROW
        assert static_texts(driver, cell_id(sweep, "vqbet", "vulkan"))[0] == "⏳ queued"
        assert "static snapshot" in driver.find_element("id", "live").text
        assert driver.find_element("css selector", "#heatmap svg").is_displayed()
        save_screenshot(driver, "grid-javascript-off")
        # Without the script, a cell is a plain link to its details page.
        driver.find_element("css selector", f'a.cell[data-cell-link="{act}"]').click()
        assert driver.current_url.endswith(f"/cells/{act}")
        assert "aten.elu.default" in driver.find_element("css selector", "table.blockers").text
    finally:
        driver.quit()
        api.post(f"/api/sweeps/{sweep['id']}/cancel")


def test_an_imported_device_result_appears_in_an_open_grid(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    live_sessions: sessionmaker[Session],
    live_settings: Settings,
) -> None:
    """An offline host's signed result, imported while the grid is open, shows in its device column
    without a reload (the import emits a ``device`` event, which the grid follows)."""
    from coverfarm.device_result import DeviceResult, LatencyStats
    from coverfarm.result import Bundle
    from farmrun.signing import new_key_pair, sign

    device_class = "h200-vulkan"
    body = {"policies": ["act"], "backends": ["vulkan"], "device_classes": [device_class]}
    response = api.post("/api/sweeps", json=body)
    assert response.status_code == 201, response.text
    sweep = response.json()
    act = cell_id(sweep, "act", "vulkan")
    doc = finished("act", "vulkan")
    doc.bundle = Bundle(sha256="ab" * 32, path="/nowhere")
    store(live_sessions, live_settings, sweep["cells"][0]["jobs"][0]["id"], doc)
    private_key, public_key = new_key_pair()
    enrolled = api.post(
        "/api/runners/offline",
        json={"name": "air-gapped", "device_classes": [device_class], "signing_key": public_key},
    )
    assert enrolled.status_code == 201, enrolled.text

    browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
    wait_until(browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream")
    assert not cell_texts(browser, act)[-1].startswith("✓")
    watch_cell(browser, act)
    samples = [25.0, 25.1, 24.9, 25.0]
    latency = LatencyStats(
        warmup=1, iterations=4, samples_ms=samples, median_ms=25.0, p90_ms=25.1, min_ms=24.9,
        mean_ms=25.0, cv=0.003, stable=True, load_ms=500.0,
    )  # fmt: skip
    result = DeviceResult(
        bundle_sha256="ab" * 32, policy="act", backend="vulkan", device_class=device_class, status="ok",
        latency=latency,
    ).model_dump(mode="json")  # fmt: skip
    signed = sign(result, enrolled.json()["runner_id"], private_key)
    assert api.post("/api/results/import", json=signed).status_code == 201
    # One replica's samples (no replicas recorded): no interval, so the figure reads "about".
    wait_for(lambda: cell_texts(browser, act)[-1] == "~25 ms", 10, "the imported cell to show")
    assert browser.execute_script("return window.__reloaded") is False
    save_screenshot(browser, "grid-imported-device-cell")


def _add_stack(
    sessions: sessionmaker[Session], settings: Settings, sweep_id: int, stack: str
) -> dict[str, int]:
    """Cells of ``stack`` beside the sweep's, as a sweep of two stacks stores them, the sweep's own stack
    named first (POST /api/sweeps names the requested stacks in the order given). Policy -> the new
    cell's lower job."""
    created = {}
    with unit_of_work(sessions, make_celery(settings)) as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None
        for cell in list(sweep.cells):
            added = Cell(
                sweep=sweep, policy=cell.policy, backend=cell.backend, stack=stack, options=cell.options
            )
            session.add(added)
            created[cell.policy] = sending.create(
                session, added, sending.STAGE_LOWER, QUEUE_LOWER, sweep.timeout_s
            ).id
        sweep.stacks = [*sweep.stacks, stack]
    return created


def test_stacks_one_at_a_time_side_by_side_live_and_their_progress(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    live_sessions: sessionmaker[Session],
    live_settings: Settings,
) -> None:
    """The grid of a sweep over two stacks shows its first stack, a link per stack and one to compare
    them; side by side, a policy's stacks are consecutive rows the arrow keys move between, and a cell of
    the second stack fills in without a reload; the progress page draws the change."""
    sweep = submit(api, ["act", "vqbet"], ["vulkan"])
    older = _add_stack(live_sessions, live_settings, sweep["id"], "et-1.4.1")
    newer = {c["policy"]: c["jobs"][0]["id"] for c in sweep["cells"]}
    new_act = finished("act", "vulkan", (1549, 1553), (1000, 1000), 3, [])
    new_act.versions = {"executorch": "1.5.1", "torch": "2.14.1"}
    store(live_sessions, live_settings, newer["act"], new_act)
    old_act = finished("act", "vulkan", (1540, 1553), (990, 1000), 3)
    old_act.versions = {"executorch": "1.4.1", "torch": "2.13.0"}
    store(live_sessions, live_settings, older["act"], old_act)
    try:
        browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
        links = browser.find_elements("css selector", "nav.stacks a")
        assert [link.text for link in links] == ["et-1.4.1", "et-1.5.1", "compare side by side"]
        current = browser.find_element("css selector", "nav.stacks a[aria-current]")
        assert current.text == "et-1.5.1"  # the sweep's first stack
        act = cell_id(sweep, "act", "vulkan")
        assert cell_texts(browser, act)[0] == "1549 / 1553 (100%)"

        links[-1].click()
        wait_until(
            browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream"
        )
        stacks = browser.execute_script(
            "return Array.from(document.querySelectorAll('#grid tbody th.stack')).map(th => th.textContent)"
        )
        assert stacks == ["et-1.4.1", "et-1.5.1", "et-1.4.1", "et-1.5.1"]  # oldest release first
        browser.execute_script("document.querySelector('#grid a.cell').focus()")
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
        assert browser.execute_script("return document.activeElement.dataset.cellLink") == str(act)

        # vqbet's older cell waits (no worker of et-1.4.1 runs): its result arrives while the page is open.
        browser.execute_script("window.__reloaded = false")
        row = "Array.from(document.querySelectorAll('#grid tbody tr'))[2]"
        assert "no worker" in browser.execute_script(f"return {row}.textContent")
        vqbet = finished("vqbet", "vulkan", (500, 594), (200, 1000), 30)
        vqbet.versions = old_act.versions
        store(live_sessions, live_settings, older["vqbet"], vqbet)
        wait_for(
            lambda: "500 / 594 (84%)" in browser.execute_script(f"return {row}.textContent"), 10,
            "the older stack's vqbet cell to fill in",
        )  # fmt: skip
        assert browser.execute_script("return window.__reloaded") is False
        save_screenshot(browser, "grid-stacks-side-by-side")

        browser.find_element("link text", "progress over stacks").click()
        change = browser.find_element("css selector", ".progress-table tr.change td.delta.better")
        assert change.text == "+9"
        assert browser.find_elements("css selector", ".progress-plot svg polyline")
        save_screenshot(browser, "progress", full_height=True)
    finally:
        api.post(f"/api/sweeps/{sweep['id']}/cancel")


def loaded_rows(driver: WebDriver) -> int:
    rows: int = driver.execute_script("return document.getElementById('rows').rows.length")
    return rows


def test_a_big_grid_loads_rows_as_they_come_into_view_and_each_event_asks_for_its_cell(
    browser: WebDriver,
    orchestrator: Orchestrator,
    api: httpx.Client,
    live_sessions: sessionmaker[Session],
    live_settings: Settings,
) -> None:
    """120 policies: the page renders the first 50 rows, and the next ones arrive as the end of the grid
    comes into view, until the last. A result stored for a cell of the last rows loaded reaches it within
    a second, and the page asks for that cell alone, not for the whole sweep."""
    # No worker: this test stores the results itself.
    sweep = submit(api, BIG_SWEEP, ["vulkan"])
    try:
        page = api.get(f"/sweeps/{sweep['id']}").text
        assert page.count('<th scope="row"') == 50 and "70 more policies" in page
        browser.get(f"{orchestrator.url}/sweeps/{sweep['id']}")
        wait_until(
            browser, "return document.getElementById('live').dataset.state === 'live'", 10, "the stream"
        )
        # The first page, and the next one if the end of the first is near enough to the viewport. Read in
        # one script: a load that lands in between replaces the link, and a handle to it would go stale.
        rows, more_shown = browser.execute_script(
            "const more = document.getElementById('more-rows');"
            "return [document.getElementById('rows').rows.length,"
            " more !== null && more.getClientRects().length > 0];"
        )
        assert rows in (50, 100) and more_shown, (rows, more_shown)

        def scrolled_to_the_end() -> bool:
            browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
            return loaded_rows(browser) == 120

        # Each load renders 50 rows on the server; under a loaded test machine that can take seconds.
        wait_for(scrolled_to_the_end, 45, "every row to load")
        assert browser.execute_script("return document.getElementById('more-rows')") is None
        loads = (
            "return performance.getEntriesByType('resource').map(e => e.name)"
            ".filter(n => n.includes('/rows?'))"
        )
        assert [url.rsplit("/", 1)[1] for url in browser.execute_script(loads)] == [
            "rows?offset=50",
            "rows?offset=100",
        ]
        names = browser.execute_script(
            "return Array.from(document.querySelectorAll('#rows th.policy')).map(th => th.textContent)"
        )
        assert names == BIG_SWEEP  # each row once, in the sweep's order
        save_screenshot(browser, "grid-big-sweep-rows-loaded")

        last = cell_id(sweep, BIG_SWEEP[-1], "vulkan")
        fetches = (
            "return performance.getEntriesByType('resource').map(e => e.name).filter(n => /live/.test(n))"
        )
        before = len(browser.execute_script(fetches))
        watch_cell(browser, last)
        job = next(c["jobs"][0]["id"] for c in sweep["cells"] if c["id"] == last)
        store(live_sessions, live_settings, job, finished(BIG_SWEEP[-1], "vulkan"))
        wait_until(
            browser, "return window.__changedAt !== null", 10, "the last row's cell to show its numbers"
        )
        # The job's start and its result are two events, and the page's first change may be the start
        # (each fetch reads one snapshot: the job running, or the result stored), so the row is read
        # once it has settled.
        wait_for(lambda: cell_texts(browser, last) == ACT_ROW, 10, "the last row to read as stored")
        stored = datetime.fromisoformat(api.get(f"/api/cells/{last}").json()["jobs"][0]["finished_at"])
        shown = browser.execute_script("return window.__changedAt") / 1000
        print(f"a loaded row's cell shown {shown - stored.timestamp():.3f} s after its result was stored")
        assert shown - stored.timestamp() < 1.0
        asked = browser.execute_script(fetches)[before:]
        assert asked, "no live.json fetch after the event"
        assert all(f"cells={last}" in url or "rows=0" in url for url in asked), asked
        assert "1 done" in browser.execute_script("return document.getElementById('progress').innerText")
    finally:
        api.post(f"/api/sweeps/{sweep['id']}/cancel")
