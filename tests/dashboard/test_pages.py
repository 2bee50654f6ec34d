"""The grid's pages rendered from stored results, against a real migrated Postgres."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from dashtools import (
    export_failed,
    export_slow,
    fail,
    finished,
    grid_cell_attrs,
    grid_cells,
    partition_slow,
    start,
    store,
    text_of,
    worker_online,
)
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from coverfarm import tracker
from coverfarm.result import Blocker, ReusedFrom
from coverfarm.settings import Settings
from dashboard import endpoints

ACT_ROW = ["90 / 100 (90%)", "80%", "3", "✓", "no device"]


def submit(client: TestClient, admin: dict[str, str], policies: list[str], backends: list[str]) -> Any:
    response = client.post("/api/sweeps", json={"policies": policies, "backends": backends}, headers=admin)
    assert response.status_code == 201, response.text
    return response.json()


def cell_of(sweep: dict[str, Any], policy: str, backend: str) -> dict[str, Any]:
    return next(c for c in sweep["cells"] if (c["policy"], c["backend"]) == (policy, backend))


def job_of(sweep: dict[str, Any], policy: str, backend: str) -> int:
    job_id: int = cell_of(sweep, policy, backend)["jobs"][0]["id"]
    return job_id


def test_grid_shows_the_trackers_cells_for_every_state(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    policies = ["act", "tdmpc", "evo1", "pi05", "vqbet", "smolvla", "diffusion"]
    worker_online(sessions, settings)
    sweep = submit(client, admin, policies, ["vulkan", "xnnpack"])
    for doc in (
        finished("act", "vulkan", (1556, 1561), (999, 1000), 3),
        partition_slow("tdmpc", "vulkan", (5477, 5895), (100, 100), 41),
        export_slow("evo1", "vulkan", (13904, 16601), (26, 100), 61),
        export_failed("pi05", "vulkan"),
    ):
        store(sessions, settings, job_of(sweep, doc.policy, "vulkan"), doc)
    fail(sessions, settings, job_of(sweep, "vqbet", "vulkan"), "Traceback ...\nRuntimeError: engine crashed")
    start(sessions, settings, job_of(sweep, "smolvla", "vulkan"))

    response = client.get(f"/sweeps/{sweep['id']}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    cells = grid_cells(response.text)
    by = {(c["policy"], c["backend"]): cells[c["id"]] for c in sweep["cells"]}

    assert by["act", "vulkan"] == ["1556 / 1561 (100%)", "100%", "3", "✓", "no device"]
    # Partitioning ran out of time: bounds and groups, never a partition count.
    assert by["tdmpc", "vulkan"] == ["≤ 5477 / 5895 (93%)", "≤ 100%", "? (41 groups)", "slow ⏳", "-"]
    # Export ran out of its bound, and its longer re-run is queued: the numbers stand, ⏳ on the export.
    assert by["evo1", "vulkan"] == ["13904 / 16601 (84%)", "26%", "61", "slow ⏳", "-"]
    assert by["pi05", "vulkan"] == ["❌", "❌", "❌", "❌", "-"]
    assert by["vqbet", "vulkan"] == ["❌", "❌", "❌", "❌", "-"]
    running = by["smolvla", "vulkan"]
    assert running[0].startswith("⏳ running ") and running[0].endswith("s")
    assert running[1:] == ["⏳", "⏳", "⏳", "⏳"]
    assert by["diffusion", "xnnpack"] == ["⏳ queued", "⏳", "⏳", "⏳", "⏳"]

    # The texts are the tracker's own formats, taken from the same documents.
    report = client.get(f"/api/sweeps/{sweep['id']}/report.md").text
    assert "| act | 1556 / 1561 (100%) | 100% | 3 | ✓ |" in report
    assert "| evo1 | 13904 / 16601 (84%) | 26% | 61 | slow ⏳ |" in report

    attrs = grid_cell_attrs(response.text)
    vqbet = attrs[cell_of(sweep, "vqbet", "vulkan")["id"]]
    assert vqbet[0]["data-state"] == "failed"
    assert 'title="RuntimeError: engine crashed"' in response.text
    # A running cell carries the clock the page counts up from; the state drives the colour class.
    smolvla = cell_of(sweep, "smolvla", "vulkan")
    assert attrs[smolvla["id"]][0]["data-state"] == "running"
    assert "data-since=" in response.text
    assert "c ok" in (attrs[cell_of(sweep, "act", "vulkan")["id"]][3]["class"] or "")

    page = text_of(response.text)
    assert "1 done 1 running 8 queued 2 slow 2 failed" in page
    for column in (
        "Ops on Vulkan",
        "Heavy math on Vulkan",
        "Vulkan programs",
        "Exports to .pte",
        "Device runs",
    ):
        assert column in page
    assert "Ops on XNNPACK" in page
    # One tab stop per cell (its first column), every column a link to the details page.
    first_links = response.text.count('class="cell" href="/cells/')
    assert first_links == len(sweep["cells"])
    assert response.text.count('tabindex="-1" aria-hidden="true"') == 4 * len(sweep["cells"])
    assert '<script src="/dashboard/static/grid.js" defer></script>' in response.text


def test_live_json_renders_the_same_cells_and_follows_changes(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    sweep = submit(client, admin, ["act", "vqbet"], ["vulkan"])
    page = client.get(f"/sweeps/{sweep['id']}").text
    live = client.get(f"/sweeps/{sweep['id']}/live.json").json()
    assert live["state"] == "running"
    assert set(live["cells"]) == {str(c["id"]) for c in sweep["cells"]}
    for html in live["cells"].values():
        assert html in page  # the page and the live update are one rendering
    assert set(live["squares"]) == set(live["cells"])
    for square in live["squares"].values():
        assert square in page  # each cell's heatmap square too
    assert "2 queued" in text_of(live["progress"])

    act = cell_of(sweep, "act", "vulkan")
    store(sessions, settings, act["jobs"][0]["id"], finished("act", "vulkan"))
    after = client.get(f"/sweeps/{sweep['id']}/live.json").json()
    assert grid_cells(after["cells"][str(act["id"])])[act["id"]] == ACT_ROW
    assert "1 done" in text_of(after["progress"])
    assert (
        after["cells"][str(cell_of(sweep, "vqbet", "vulkan")["id"])]
        == live["cells"][str(cell_of(sweep, "vqbet", "vulkan")["id"])]
    )


def test_index_lists_every_sweep_with_progress_and_links(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    first = submit(client, admin, ["act", "pi05"], ["vulkan", "xnnpack"])
    second = submit(client, admin, ["diffusion"], ["xnnpack"])
    store(sessions, settings, job_of(first, "act", "vulkan"), finished("act", "vulkan"))
    store(sessions, settings, job_of(first, "pi05", "vulkan"), export_failed("pi05", "vulkan"))
    start(sessions, settings, job_of(first, "act", "xnnpack"))
    response = client.get("/")
    assert response.status_code == 200
    html = response.text
    assert html.index(f'href="/sweeps/{second["id"]}"') < html.index(f'href="/sweeps/{first["id"]}"')
    page = text_of(html)
    assert f"#{first['id']}" in page and "2 × 2 act, pi05 × Vulkan, XNNPACK" in page
    assert "1 done 1 running 1 queued 0 slow 1 failed" in page
    assert "1 × 1 diffusion × XNNPACK" in page and "0 done 0 running 1 queued" in page
    assert f'href="/api/sweeps/{first["id"]}/report.md"' in html
    assert "constant propagation on · fast lowering · 900 s bound" in page


def test_details_show_blockers_programs_timings_attempts_and_artifacts(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    sweep = submit(client, admin, ["vqbet", "pi05"], ["vulkan"])
    blockers = [
        Blocker(op="aten.convolution.default", reason="op args not supported", count=4, macs=770),
        Blocker(op="aten.elu.default", reason="no operator implementation", count=181, macs=0),
        Blocker(op="aten.addmm.default", reason="dtype not supported", count=2, macs=3),
    ]
    doc = finished("vqbet", "vulkan", (567, 594), (230, 1000), 22, blockers)
    vqbet = cell_of(sweep, "vqbet", "vulkan")
    store(sessions, settings, vqbet["jobs"][0]["id"], doc)

    response = client.get(f"/cells/{vqbet['id']}")
    assert response.status_code == 200
    page = text_of(response.text)
    assert "vqbet on Vulkan ok" in page
    # Each op the partitioner left on the CPU, with its reason and its share of the heavy math.
    assert "aten.convolution.default op args not supported 4 770 77%" in page
    assert "aten.elu.default no operator implementation 181 0 0%" in page
    assert "aten.addmm.default dtype not supported 2 3 <1%" in page
    assert "observation 1 141 / 148 100 1 1 1 denoise_step 10 426 / 446 90 21 - -" in page
    # Artifacts are links to the store, never a worker's paths; traced programs are named only.
    sha = "ab" * 32
    assert f'href="/api/artifacts/{sha}" download' in response.text
    assert f'href="/api/artifacts/{sha}/programs/denoise_step.pte" download' in response.text
    assert "observation.pt2, denoise_step.pt2 (kept by the worker that traced them" in page
    assert "/farm/" not in response.text
    assert "trace ok 1.5 partition ok 1.5 export ok 1.5" in page
    assert "partition.observation_s 3.25" in page
    assert f"lower #{vqbet['jobs'][0]['id']} lower ok 1 dashboard-test@here" in page
    assert "coverfarm analyze --policy vqbet --backend vulkan --timeout 900 --lowering fast --json" in page
    assert "567 / 594 (95%) 23% 22 ✓ no device" in page
    assert response.text.startswith("<!doctype html>")

    # The grid's panel gets the same details without the page around them.
    partial = client.get(f"/cells/{vqbet['id']}", params={"partial": 1}).text
    assert "<html" not in partial and "aten.convolution.default" in partial

    pi05 = cell_of(sweep, "pi05", "vulkan")
    store(sessions, settings, pi05["jobs"][0]["id"], export_failed("pi05", "vulkan"))
    failed = client.get(f"/cells/{pi05['id']}").text
    assert "trace: KeyError: model.paligemma_with_expert" in text_of(failed)
    assert "trace traceback" in text_of(failed) and "File &#34;trace.py&#34;" in failed


def test_details_of_an_engine_crash_and_of_a_pending_cell(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    sweep = submit(client, admin, ["act", "diffusion"], ["xnnpack"])
    act = cell_of(sweep, "act", "xnnpack")
    fail(
        sessions, settings, act["jobs"][0]["id"], "Traceback (most recent call last):\nOSError: out of memory"
    )
    page = text_of(client.get(f"/cells/{act['id']}").text)
    assert "Error OSError: out of memory" in page
    assert "what the worker reported Traceback (most recent call last): OSError: out of memory" in page
    pending = text_of(client.get(f"/cells/{cell_of(sweep, 'diffusion', 'xnnpack')['id']}").text)
    assert "No result yet: the cell is being measured" in pending


def test_heatmap_is_svg_with_a_square_per_cell_coloured_by_heavy_math(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    sweep = submit(client, admin, ["act", "vqbet", "pi05"], ["vulkan", "xnnpack"])
    store(
        sessions, settings, job_of(sweep, "act", "vulkan"), finished("act", "vulkan", (10, 10), (1000, 1000))
    )
    store(
        sessions, settings, job_of(sweep, "vqbet", "vulkan"), finished("vqbet", "vulkan", (5, 10), (0, 1000))
    )
    store(sessions, settings, job_of(sweep, "pi05", "vulkan"), export_failed("pi05", "vulkan"))
    response = client.get(f"/sweeps/{sweep['id']}/heatmap.svg")
    assert response.headers["content-type"] == "image/svg+xml"
    svg = ET.fromstring(response.content)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    squares = {
        link.attrib["href"]: (
            link.find("svg:rect", ns),
            link.find("svg:text", ns),
            link.find("svg:title", ns),
        )
        for link in svg.iter("{http://www.w3.org/2000/svg}a")
    }
    assert len(squares) == 6
    act_rect, act_text, act_title = squares[f"/cells/{cell_of(sweep, 'act', 'vulkan')['id']}"]
    assert act_rect is not None and act_rect.attrib["fill"] == "hsl(120 62% 78%)"  # all of it: green
    assert act_text is not None and act_text.text == "100%"
    assert act_title is not None and "act on Vulkan" in (act_title.text or "")
    vqbet_rect, vqbet_text, _ = squares[f"/cells/{cell_of(sweep, 'vqbet', 'vulkan')['id']}"]
    assert vqbet_rect is not None and vqbet_rect.attrib["fill"] == "hsl(0 62% 78%)"  # none of it: red
    assert vqbet_text is not None and vqbet_text.text == "0%"
    _, pi05_text, _ = squares[f"/cells/{cell_of(sweep, 'pi05', 'vulkan')['id']}"]
    assert pi05_text is not None and pi05_text.text == tracker.FAILED
    queued_text = squares[f"/cells/{cell_of(sweep, 'act', 'xnnpack')['id']}"][1]
    assert queued_text is not None and queued_text.text == tracker.PENDING
    # The grid page carries the same SVG inline, so it shows without script.
    assert "Share of heavy math on the backend" in client.get(f"/sweeps/{sweep['id']}").text


def test_static_files_and_missing_things(client: TestClient) -> None:
    script = client.get("/dashboard/static/grid.js")
    assert script.status_code == 200 and "EventSource" in script.text
    assert script.headers["content-type"].startswith("text/javascript")
    assert client.get("/dashboard/static/style.css").headers["content-type"].startswith("text/css")
    assert client.get("/dashboard/static/../endpoints.py").status_code == 404
    assert client.get("/dashboard/static/nope.js").status_code == 404
    assert client.get("/sweeps/999999").status_code == 404
    assert client.get("/cells/999999").status_code == 404
    # Every test's sweeps are rolled back: this one sees none.
    index = client.get("/")
    assert index.status_code == 200
    assert "No sweep yet. Submit one with coverfarm sweep submit" in text_of(index.text)


def test_a_reused_cell_shows_its_mark_and_the_sweep_it_came_from(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    first = submit(client, admin, ["act"], ["xnnpack"])
    measured = finished("act", "xnnpack", (90, 100), (800, 1000), 3)
    store(sessions, settings, job_of(first, "act", "xnnpack"), measured)
    second = submit(client, admin, ["act"], ["xnnpack"])
    source = ReusedFrom(job_id=job_of(first, "act", "xnnpack"), sweep_id=first["id"])
    store(
        sessions,
        settings,
        job_of(second, "act", "xnnpack"),
        measured.model_copy(update={"reused_from": source}),
    )

    label = f"{tracker.REUSED} reused from sweep #{first['id']} (job {source.job_id})"
    grid = client.get(f"/sweeps/{second['id']}").text
    assert f"✓ {tracker.REUSED}" in text_of(grid) and label in grid  # the export cell's tooltip
    assert f"✓ {tracker.REUSED}" not in text_of(client.get(f"/sweeps/{first['id']}").text)
    cell = cell_of(second, "act", "xnnpack")
    details = client.get(f"/cells/{cell['id']}").text
    assert label in text_of(details) and f'href="/sweeps/{first["id"]}"' in details
    report = client.get(f"/api/sweeps/{second['id']}/report.md").text
    assert f"| act | 90 / 100 (90%) | 80% | 3 | ✓ {tracker.REUSED} |" in report


def test_a_big_sweeps_grid_comes_a_page_of_rows_at_a_time(
    client: TestClient,
    admin: dict[str, str],
    sessions: sessionmaker[Session],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With more policies than a page holds, the grid renders the first page of rows and a link to the
    next (the script's ``data-rows-url``, and plain links without the script); the rows endpoint renders
    the next rows as the page renders its own, and the link after them until the last."""
    monkeypatch.setattr(endpoints, "ROWS", 2)
    policies = ["act", "tdmpc", "evo1", "pi05", "vqbet"]
    sweep = submit(client, admin, policies, ["vulkan", "xnnpack"])
    store(sessions, settings, job_of(sweep, "pi05", "vulkan"), finished("pi05", "vulkan"))
    ids = {policy: [cell_of(sweep, policy, b)["id"] for b in ("vulkan", "xnnpack")] for policy in policies}

    page = client.get(f"/sweeps/{sweep['id']}").text
    assert sorted(grid_cells(page)) == ids["act"] + ids["tdmpc"]
    assert f'data-rows-url="/sweeps/{sweep["id"]}/rows?offset=2"' in page
    assert "3 more policies" in text_of(page) and "next 2 →" in text_of(page)
    assert "policies 1–2" in text_of(page)  # the heatmap's rows are the page's

    # Without the script, the links page through the rows.
    second = client.get(f"/sweeps/{sweep['id']}?offset=2").text
    assert sorted(grid_cells(second)) == ids["evo1"] + ids["pi05"]
    assert "← previous 2" in text_of(second) and "next 2 →" in text_of(second)

    loaded = client.get(f"/sweeps/{sweep['id']}/rows", params={"offset": 2, "limit": 2})
    assert loaded.status_code == 200 and loaded.headers["cache-control"] == "no-store"
    rows = loaded.json()
    assert rows["rows"] in second  # one rendering for the page and the rows it loads
    assert grid_cells(rows["rows"])[ids["pi05"][0]] == ACT_ROW
    assert f'data-rows-url="/sweeps/{sweep["id"]}/rows?offset=4"' in rows["more"]
    assert "previous" not in rows["more"]  # loaded below the rows before, onward only
    last = client.get(f"/sweeps/{sweep['id']}/rows", params={"offset": 4}).json()
    assert sorted(grid_cells(last["rows"])) == ids["vqbet"]
    assert last["more"] == ""
    assert client.get(f"/sweeps/{sweep['id']}/rows", params={"offset": 9}).json()["rows"].strip() == ""


def test_live_json_renders_only_the_cells_asked_for(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], settings: Settings
) -> None:
    """An event asks for its own cell: live.json renders the cells named (of this sweep only), or the
    cells of some rows, or none at all, and always the sweep's state and progress."""
    sweep = submit(client, admin, ["act", "vqbet", "tdmpc"], ["vulkan"])
    other = submit(client, admin, ["act"], ["vulkan"])
    act, vqbet = cell_of(sweep, "act", "vulkan")["id"], cell_of(sweep, "vqbet", "vulkan")["id"]
    store(sessions, settings, job_of(sweep, "act", "vulkan"), finished("act", "vulkan"))
    url = f"/sweeps/{sweep['id']}/live.json"

    named = client.get(url, params={"cells": [act, other["cells"][0]["id"]]}).json()
    assert list(named["cells"]) == list(named["squares"]) == [str(act)]
    assert grid_cells(named["cells"][str(act)])[act] == ACT_ROW
    assert "1 done" in text_of(named["progress"]) and named["state"] == "running"
    assert list(client.get(url, params={"rows": 0}).json()["cells"]) == []
    assert list(client.get(url, params={"rows": 1, "offset": 1}).json()["cells"]) == [str(vqbet)]
    assert len(client.get(url).json()["cells"]) == 3  # the page's rows
    for bad in ({"cells": "one"}, {"cells": 0}, {"rows": -1}, {"cells": list(range(1, 502))}):
        response = client.get(url, params=bad)
        assert response.status_code == 422, (bad, response.text)
    assert client.get("/sweeps/999999/live.json").status_code == 404
