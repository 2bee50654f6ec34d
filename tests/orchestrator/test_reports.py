"""Blocker groups, what-if estimates, the tracker report and sweep diffs, against the real migrated
Postgres: two sweeps whose result documents are stored the way the worker stores them (jobs.start,
jobs.finish) and that differ in one cell and one blocker group."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from coverfarm.device_result import Board, DeviceResult, ExecutorchInfo, ProbeReport, TimingRules
from coverfarm.latency_interval import LatencyInterval, interval_of
from coverfarm.result import (
    Blocker,
    HeavyMacs,
    Ops,
    Options,
    Programs,
    Repro,
    ResultDocument,
    StageResult,
    StageStatus,
    TraceInfo,
)
from coverfarm.settings import Settings
from farmrun.stats import combine, latency_stats
from orchestrator.db import take_outbox
from orchestrator.devices import repository as devices
from orchestrator.jobs import service as jobs
from orchestrator.models import Sweep
from orchestrator.reports.devices import device_intervals
from orchestrator.reports.diff import diff_sweeps, latency_flags
from orchestrator.reports.latency import latency_change
from orchestrator.reports.schemas import LatencyChange, SweepDiff
from orchestrator.sweeps import service as sweeps
from orchestrator.sweeps.schemas import SweepCreate

VERSIONS = {"executorch": "9.9.1", "torch": "8.8.2", "transformers": "7.7.3", "lerobot": "6.6.4"}
CONV = ("aten.convolution.default", "op args not supported")
ELU = ("aten.elu.default", "no operator implementation")


def repro(op: str, reason: str, ready: bool) -> Repro:
    seen = reason if ready else "input dtype torch.int64 not in {torch.float32}"
    return Repro(
        text=f"OP_NAME = {op!r}\n",
        output=f"{op}: support check refuses it: {seen}\nverdict: ...",
        reproduced=ready,
        reason_seen=seen,
        delegated=False,
    )


def blocker(key: tuple[str, str], count: int, macs: int, programs_if: int, ready: bool) -> Blocker:
    return Blocker(
        op=key[0],
        reason=key[1],
        count=count,
        macs=macs,
        programs_if_supported=programs_if,
        repro=repro(*key, ready=ready),
    )


@dataclass
class Cell:
    ops: tuple[int, int]
    macs: tuple[int, int]
    programs: int
    blockers: list[Blocker]


def document(policy: str, cell: Cell, versions: dict[str, str] = VERSIONS) -> ResultDocument:
    ok = StageResult(status=StageStatus.OK)
    return ResultDocument(
        policy=policy,
        backend="vulkan",
        options=Options(),
        trace=ok,
        trace_info=TraceInfo(seed=0),
        partition=ok,
        export=ok,
        ops=Ops(total=cell.ops[0], on_backend=cell.ops[1]),
        heavy_macs=HeavyMacs(total=cell.macs[0], on_backend=cell.macs[1]),
        programs=Programs(count=cell.programs),
        blockers=cell.blockers,
        versions=versions,
    )


ACT = Cell(ops=(100, 98), macs=(1000, 1000), programs=3, blockers=[blocker(ELU, 2, 0, 2, ready=True)])
VQBET_A = Cell(
    ops=(200, 180),
    macs=(4000, 1000),
    programs=20,
    blockers=[blocker(CONV, 3, 3000, 18, ready=True), blocker(ELU, 17, 0, 15, ready=False)],
)
# Sweep B: the same, except that vqbet's batched convolution is now taken.
VQBET_B = Cell(
    ops=(200, 183), macs=(4000, 4000), programs=18, blockers=[blocker(ELU, 17, 0, 15, ready=False)]
)


def stored_sweep(
    session: Session,
    settings: Settings,
    cells: dict[str, Cell],
    versions: dict[str, dict[str, str]] | None = None,
) -> int:
    """A sweep of these cells on Vulkan, each with its document stored; ``versions`` per policy where
    they are not ``VERSIONS``."""
    sweep = sweeps.create(
        session, settings, SweepCreate(policies=list(cells), backends=["vulkan"], timeout_s=60)
    )
    take_outbox(session)  # nothing goes to the broker: the documents are stored here as a worker would
    for cell in sweep.cells:
        job = cell.jobs[0]
        assert jobs.start(session, job.id, "w1", settings) is not None
        doc = document(cell.policy, cells[cell.policy], (versions or {}).get(cell.policy, VERSIONS))
        jobs.finish(session, job.id, 1, doc, settings)
    session.flush()
    return sweep.id


@pytest.fixture
def two_sweeps(session: Session, settings: Settings) -> tuple[int, int]:
    return (
        stored_sweep(session, settings, {"act": ACT, "vqbet": VQBET_A}),
        stored_sweep(session, settings, {"act": ACT, "vqbet": VQBET_B}),
    )


def test_blocker_groups_are_sorted_by_heavy_math_lost_with_what_ifs(
    client: TestClient, two_sweeps: tuple[int, int]
) -> None:
    a, _ = two_sweeps
    report = client.get(f"/api/sweeps/{a}/blockers").json()
    assert report["policies"] == ["act", "vqbet"]
    conv, elu = report["groups"]
    assert (conv["op"], conv["reason"]) == CONV and (elu["op"], elu["reason"]) == ELU
    [hit] = conv["policies"]
    assert hit["policy"] == "vqbet" and hit["nodes"] == 3 and hit["macs"] == 3000
    assert hit["macs_share"] == pytest.approx(3000 / VQBET_A.macs[0])
    assert hit["extra_programs"] == VQBET_A.programs - 18
    assert hit["ops_if_supported"] == VQBET_A.ops[1] + 3
    assert hit["heavy_share"] == pytest.approx(VQBET_A.macs[1] / VQBET_A.macs[0])
    assert hit["heavy_share_if_supported"] == pytest.approx(1.0)
    assert conv["repro_status"] == "ready" and conv["repro"]["text"].startswith("OP_NAME")
    # elu hits both; its repro is the ready one (act's), not vqbet's that shows another reason.
    assert [h["policy"] for h in elu["policies"]] == ["act", "vqbet"]
    assert elu["nodes"] == 2 + 17
    assert elu["extra_programs"] == (ACT.programs - 2) + (VQBET_A.programs - 15)
    assert elu["repro_status"] == "ready" and elu["repro"]["policy"] == "act"
    assert [h["repro_status"] for h in elu["policies"]] == ["ready", "not reproduced"]
    # All groups of one reason: vqbet regains its convolutions' heavy math first.
    first = report["by_reason"][0]
    assert (first["policy"], first["reason"]) == ("vqbet", CONV[1])
    assert first["heavy_share_if_supported"] == pytest.approx(1.0)


def test_report_is_the_whole_tracker_body(client: TestClient, two_sweeps: tuple[int, int]) -> None:
    a, _ = two_sweeps
    response = client.get(f"/api/sweeps/{a}/report.md", params={"backend": "vulkan"})
    assert response.status_code == 200, response.text
    text = response.text
    sections = ["### Coverage", "Legend:", "Notes:", "### Built on", "### Known issues", "#### Repros"]
    positions = [text.index(section) for section in sections]
    assert positions == sorted(positions)
    assert f"| act | {ACT.ops[1]} / {ACT.ops[0]} (98%) | 100% | {ACT.programs} | ✓ |" in text
    assert "act, vqbet use random weights" in text
    assert f"ExecuTorch: {VERSIONS['executorch']}" in text
    assert f"torch {VERSIONS['torch']}, transformers {VERSIONS['transformers']}" in text
    assert f"LeRobot: {VERSIONS['lerobot']}" in text
    conv_row = next(line for line in text.splitlines() if line.startswith(f"| `{CONV[0]}`"))
    assert "vqbet (75% of its heavy math stays on the CPU, 3 nodes)" in conv_row
    assert conv_row.endswith("| 2 | Repro ready (repro 1) |")
    elu_row = next(line for line in text.splitlines() if line.startswith(f"| `{ELU[0]}`"))
    assert "Repro ready (repro 2)" in elu_row
    assert text.index(conv_row) < text.index(elu_row)
    assert "```python\nOP_NAME = 'aten.convolution.default'\n```" in text
    # The CLI's default: every backend of the sweep.
    assert client.get(f"/api/sweeps/{a}/report.md").text.count("### Known issues") == 1


def test_unknown_backend_and_sweep_are_clear_errors(client: TestClient, two_sweeps: tuple[int, int]) -> None:
    a, _ = two_sweeps
    for path in (f"/api/sweeps/{a}/report.md", f"/api/sweeps/{a}/blockers"):
        response = client.get(path, params={"backend": "metal"})
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["query", "backend"] and "no backend 'metal'" in error["msg"]
        assert "vulkan" in error["msg"]
    assert client.get("/api/sweeps/999999/blockers").status_code == 404
    assert client.get(f"/api/sweeps/{a}/diff/999999").json() == {"detail": "sweep 999999 not found"}


def test_diff_names_the_changed_cell_and_the_vanished_blocker(
    client: TestClient, two_sweeps: tuple[int, int]
) -> None:
    a, b = two_sweeps
    diff = client.get(f"/api/sweeps/{a}/diff/{b}").json()
    [cell] = diff["changed"]
    assert (cell["policy"], cell["backend"]) == ("vqbet", "vulkan")
    changes = cell["changes"]
    assert changes["Ops on Vulkan"] == ["180 / 200 (90%)", "183 / 200 (92%)"]
    assert changes["Heavy math on Vulkan"] == ["25%", "100%"]
    assert changes["Vulkan programs"] == ["20", "18"]
    assert changes[f"blocker {CONV[0]}: {CONV[1]}"] == ["3 nodes, 3000 MACs", None]
    assert "state" not in changes and f"blocker {ELU[0]}: {ELU[1]}" not in changes
    assert [(g["op"], g["reason"], g["policies"]) for g in diff["blockers_vanished"]] == [(*CONV, ["vqbet"])]
    assert diff["blockers_appeared"] == [] and diff["only_in_a"] == diff["only_in_b"] == []
    back = client.get(f"/api/sweeps/{b}/diff/{a}").json()
    assert [(g["op"], g["reason"]) for g in back["blockers_appeared"]] == [CONV]
    same = client.get(f"/api/sweeps/{a}/diff/{a}").json()
    assert same["changed"] == [] and same["blockers_vanished"] == []
    text = client.get(f"/api/sweeps/{a}/diff/{b}.md").text
    assert "- vqbet on Vulkan" in text and "Vulkan programs: 20 → 18" in text
    assert f"Blocker groups that vanished:\n- Vulkan: {CONV[0]} ({CONV[1]}) in vqbet" in text


def replicated(medians: list[float]) -> LatencyInterval:
    """A latency of one fresh-process replica per median (five jittery samples each), judged."""
    parts = [latency_stats([m * 0.9, m * 0.95, m, m * 1.05, m * 1.1], 0, 0.0) for m in medians]
    return interval_of(combine(parts, TimingRules()))


def test_latency_is_beyond_the_spread_only_beyond_both_runs_intervals() -> None:
    steady = replicated([10.0, 10.2, 9.9, 10.1, 10.0])
    assert (steady.low_ms, steady.high_ms) == (9.9, 10.2)  # the replica medians' range, not the samples'
    assert not latency_change("mali-g610", steady, replicated([10.1, 10.3, 10.0, 10.2, 10.1])).beyond_spread
    slower = latency_change("mali-g610", steady, replicated([15.0, 15.3, 14.9, 15.1, 15.0]))
    assert slower.beyond_spread and slower.direction == "slower"
    assert slower.why == "slower beyond both runs' intervals (replica medians 9.9–10.2 ms vs 14.9–15.3 ms)"
    assert not slower.flagged  # one pair of runs never counts on its own
    assert latency_change("mali-g610", replicated([15.0, 15.2]), steady).why.startswith("faster")
    # Replicas 20% apart: the medians differ, but the run's own interval covers the other run.
    noisy = replicated([8.0, 9.0, 12.0, 14.0, 12.5])
    assert not latency_change("mali-g610", steady, noisy).beyond_spread
    few = latency_change("mali-g610", replicated([10.0]), replicated([20.0]))
    assert not few.beyond_spread and few.why == "no interval to judge (1 and 1 replicas; at least 2 each)"


def test_dashboard_blockers_page_shows_the_known_issues_with_repros(
    client: TestClient, two_sweeps: tuple[int, int]
) -> None:
    a, _ = two_sweeps
    response = client.get(f"/sweeps/{a}/blockers")
    assert response.status_code == 200, response.text
    page = response.text
    assert page.index(f"<code>{CONV[0]}</code>") < page.index(f"<code>{ELU[0]}</code>")
    assert "vqbet (75%, 3)" in page
    assert page.count('<details class="repro">') == 2
    # Repro text and output are escaped, not interpreted as markup.
    assert "OP_NAME = &#39;aten.convolution.default&#39;" in page
    assert "refuses it: op args not supported" in page
    assert client.get(f"/sweeps/{a}/blockers", params={"backend": "metal"}).status_code == 422
    assert f'href="/sweeps/{a}/blockers"' in client.get(f"/sweeps/{a}").text


def test_diff_flags_a_device_latency_change_only_beyond_the_spread(
    session: Session, two_sweeps: tuple[int, int]
) -> None:
    a, b = (sweeps.get(session, sweep_id) for sweep_id in two_sweeps)
    steady = [10.0, 10.2, 9.9, 10.1, 10.0]
    # act's numbers and blockers are the same in both sweeps
    key_a, key_b = (next(cell.id for cell in sweep.cells if cell.policy == "act") for sweep in (a, b))
    before = {key_a: {"mali-g610": replicated(steady)}}
    same = diff_sweeps(a, b, before, {key_b: {"mali-g610": replicated([s + 0.05 for s in steady])}})
    assert [cell.policy for cell in same.changed] == ["vqbet"]
    slower = diff_sweeps(a, b, before, {key_b: {"mali-g610": replicated([s * 2 for s in steady])}})
    act = next(cell for cell in slower.changed if cell.policy == "act")
    assert act.changes == {}
    [change] = act.latency
    assert change.beyond_spread and change.median_b_ms == pytest.approx(2 * change.median_a_ms)
    # One sweep beyond the spread is listed, not counted: b has no earlier sweep of the same cell.
    assert not change.flagged and change.consecutive == 1 and "counts once" in change.why


STEADY = [10.0, 10.2, 9.9, 10.1, 10.0]


def device_sweep(
    session: Session, settings: Settings, medians: list[float], runtime: str = "python"
) -> Sweep:
    """A sweep of act on Vulkan whose cell ran on mali-g610 in one replica per median (five samples
    each, 10% either side of it)."""
    sweep = sweeps.get(session, stored_sweep(session, settings, {"act": ACT}))
    (cell,) = sweep.cells
    probe = ProbeReport(
        board=Board(cores=8, arch="aarch64"), vulkan_status="ok", executorch=ExecutorchInfo(version="1.5")
    )
    document = DeviceResult(
        bundle_sha256="0" * 64, policy="act", backend="vulkan", device_class="mali-g610", status="ok",
        runtime=runtime, probe=probe, latency=combine(
            [latency_stats([m * 0.9, m * 0.95, m, m * 1.05, m * 1.1], 0, 0.0) for m in medians], TimingRules()
        ),  # type: ignore[arg-type]
    ).model_dump(mode="json")  # fmt: skip
    devices.upsert_run(
        session,
        {"cell_id": cell.id, "device_class": "mali-g610", "source": "import", "status": "ok",
         "median_ms": statistics.median(medians), "bundle_sha256": "0" * 64, "document": document},
    )  # fmt: skip
    session.flush()
    return sweep


def act_change(diff: SweepDiff) -> LatencyChange | None:
    cell = next((cell for cell in diff.changed if cell.policy == "act"), None)
    return cell.latency[0] if cell is not None else None


def test_a_regression_counts_only_after_two_consecutive_sweeps_beyond_the_spread(
    session: Session, settings: Settings
) -> None:
    reference = device_sweep(session, settings, STEADY)
    first = device_sweep(session, settings, [s * 1.5 for s in STEADY])
    once = act_change(diff_sweeps(reference, first, device_intervals(session, reference),
                                  device_intervals(session, first)))  # fmt: skip
    assert once is not None and once.beyond_spread and not once.flagged and once.sweeps == [first.id]
    second = device_sweep(session, settings, [s * 1.5 for s in STEADY])
    twice = act_change(diff_sweeps(reference, second, device_intervals(session, reference),
                                   device_intervals(session, second)))  # fmt: skip
    assert twice is not None and twice.flagged and twice.regression
    assert twice.sweeps == [first.id, second.id] and twice.consecutive == 2
    assert f"in sweeps {first.id} and {second.id}, consecutive sweeps of the same cell" in twice.why
    flags = latency_flags(session, second)[second.cells[0].id]["mali-g610"]
    assert flags.flagged and flags.regression and flags.sweeps == [first.id, second.id]


def test_a_change_that_does_not_persist_or_comes_from_another_stack_is_not_counted(
    session: Session, settings: Settings
) -> None:
    reference = device_sweep(session, settings, STEADY)
    device_sweep(session, settings, [s * 1.5 for s in STEADY])
    back = device_sweep(session, settings, STEADY)  # the slow sweep was one of a kind
    latest = device_sweep(session, settings, [s * 1.5 for s in STEADY])
    change = act_change(diff_sweeps(reference, latest, device_intervals(session, reference),
                                    device_intervals(session, latest)))  # fmt: skip
    assert change is not None and change.beyond_spread and not change.flagged
    assert latency_flags(session, back)[back.cells[0].id]["mali-g610"].flagged is False
    # A slow sweep on another runtime is another cell: it does not make this one's second sweep.
    other = device_sweep(session, settings, [s * 1.5 for s in STEADY], runtime="native")
    newest = device_sweep(session, settings, [s * 1.5 for s in STEADY], runtime="native")
    assert other.id < newest.id
    native = act_change(diff_sweeps(reference, other, device_intervals(session, reference),
                                    device_intervals(session, other)))  # fmt: skip
    assert native is not None and not native.flagged  # its previous sweep of the same cell: none


# --- the rows each report state gives, as exact text ------------------------------------------------


def known_issues_rows(text: str) -> list[str]:
    """The rows of the Known issues table (the lines after its header and rule)."""
    lines = text.splitlines()
    start = lines.index("| Problem | Policies | If supported | Extra programs | Status |") + 2
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))


def test_known_issues_say_no_repro_and_does_not_reproduce_with_why(
    client: TestClient, session: Session, settings: Settings
) -> None:
    elu = Blocker(op=ELU[0], reason=ELU[1], count=2, macs=0, programs_if_supported=2,
                  repro_note="only the 24 heaviest groups of a cell get a repro")  # fmt: skip
    conv = Blocker(op=CONV[0], reason=CONV[1], count=3, macs=3000, programs_if_supported=18,
                   repro=repro(*CONV, ready=False))  # fmt: skip
    failed = Repro(text="OP_NAME = 'aten.cumsum.default'\n", reproduced=False, error="Timeout: over 180 s")
    cumsum = Blocker(op="aten.cumsum.default", reason="no operator implementation", count=1, macs=0,
                     repro=failed)  # fmt: skip
    bare = Blocker(op="aten.sort.default", reason="no operator implementation", count=1, macs=0)
    sweep_id = stored_sweep(
        session, settings,
        {"act": Cell(ops=(100, 98), macs=(1000, 1000), programs=3, blockers=[elu]),
         "vqbet": Cell(ops=(200, 195), macs=(4000, 1000), programs=20, blockers=[conv, cumsum, bare])},
    )  # fmt: skip
    text = client.get(f"/api/sweeps/{sweep_id}/report.md", params={"backend": "vulkan"}).text
    assert known_issues_rows(text) == [
        "| `aten.convolution.default`: op args not supported. "
        "| vqbet (75% of its heavy math stays on the CPU, 3 nodes) "
        "| vqbet: ops 195 → 198 / 200, heavy math 25% → 100% | 2 "
        "| Repro does not reproduce (repro 1: shows input dtype torch.int64 not in {torch.float32}) |",
        "| `aten.elu.default`: no operator implementation. | act (2 nodes) | act: ops 98 → 100 / 100 | 1 "
        "| No repro: only the 24 heaviest groups of a cell get a repro |",
        "| `aten.cumsum.default`: no operator implementation. | vqbet (1 node) | vqbet: ops 195 → 196 / 200 "
        "| - | Repro does not reproduce (repro 2: Timeout: over 180 s) |",
        "| `aten.sort.default`: no operator implementation. | vqbet (1 node) | vqbet: ops 195 → 196 / 200 "
        "| - | No repro: none recorded |",
    ]
    assert (
        "Repro 1: `aten.convolution.default` (op args not supported), from a node of vqbet; "
        "does not reproduce the reason."
    ) in text
    # A repro that failed before printing anything shows its error as its output.
    assert "Repro 2: `aten.cumsum.default` (no operator implementation), from a node of vqbet" in text
    assert text.endswith("Output:\n\n```\nTimeout: over 180 s\n```\n")


def test_nothing_left_on_the_cpu_and_mixed_versions(
    client: TestClient, session: Session, settings: Settings
) -> None:
    sweep_id = stored_sweep(
        session,
        settings,
        {
            "act": Cell(ops=(100, 100), macs=(1000, 1000), programs=1, blockers=[]),
            "vqbet": Cell(ops=(200, 200), macs=(4000, 4000), programs=1, blockers=[]),
        },
        versions={"vqbet": {**VERSIONS, "executorch": "9.10.0", "transformers": "7.8.0"}},
    )
    text = client.get(f"/api/sweeps/{sweep_id}/report.md", params={"backend": "vulkan"}).text
    built_on = text[text.index("### Built on") : text.index("### Known issues")].splitlines()
    assert built_on[2:5] == [
        "  • ExecuTorch: 9.10.0 (vqbet); 9.9.1 (act) (its backends' Python code is what was measured).",
        "  • torch 8.8.2, transformers 7.7.3 (act); 7.8.0 (vqbet).",
        "  • LeRobot: 6.6.4.",
    ]
    assert text.endswith("### Known issues\n\nNothing is left on the CPU by Vulkan in the stored results.\n")
    assert client.get(f"/api/sweeps/{sweep_id}/blockers").json()["groups"] == []


def test_diff_lists_the_cells_of_one_sweep_only(
    client: TestClient, session: Session, settings: Settings
) -> None:
    a = stored_sweep(session, settings, {"act": ACT, "vqbet": VQBET_A})
    b = stored_sweep(session, settings, {"act": ACT, "diffusion": ACT})
    diff = client.get(f"/api/sweeps/{a}/diff/{b}").json()
    assert (diff["only_in_a"], diff["only_in_b"], diff["changed"]) == (
        ["vqbet/vulkan"],
        ["diffusion/vulkan"],
        [],
    )
    # vqbet's convolution group leaves with it; diffusion's elu group is no new group, since a group is
    # a (backend, op, reason) and act has that one in both sweeps.
    assert [(g["op"], g["policies"]) for g in diff["blockers_vanished"]] == [(CONV[0], ["vqbet"])]
    assert diff["blockers_appeared"] == []
    assert client.get(f"/api/sweeps/{a}/diff/{b}.md").text == (
        f"Sweep {a} → sweep {b}\n"
        "\n"
        f"Only in sweep {a}: vqbet/vulkan\n"
        "\n"
        f"Only in sweep {b}: diffusion/vulkan\n"
        "\n"
        "Blocker groups that vanished:\n"
        f"- Vulkan: {CONV[0]} ({CONV[1]}) in vqbet\n"
    )


def test_stacks_go_oldest_release_first_and_unknown_releases_last_in_the_sweeps_order() -> None:
    """The progress view's and the grid's order of a sweep's stacks (cell_views.release_order): by the
    executorch most of a stack's results recorded, as versions ("1.10.0" after "1.9.1"); a stack with
    no result, or a release that is no version, after those, in the order the sweep names them."""
    from coverfarm.cell_build import Cell as CellInput
    from coverfarm.cell_build import build
    from orchestrator.models import Cell as CellRow
    from orchestrator.sweeps.cell_views import release_order

    releases = {"pr-wheel": "not-a-version", "et-1.10.0": "1.10.0", "new": None, "et-1.9.1": "1.9.1"}
    sweep = Sweep(stacks=list(releases))
    views = {}
    for index, (stack, release) in enumerate(releases.items(), start=1):
        sweep.cells.append(CellRow(id=index, policy="act", backend="vulkan", stack=stack, options={}))
        doc = document("act", ACT, {"executorch": release}) if release else None
        views[index] = build(CellInput("act", "vulkan", Options(), doc, stack=stack))
    assert release_order(sweep.stacks, sweep.cells, views) == ["et-1.9.1", "et-1.10.0", "pr-wheel", "new"]
