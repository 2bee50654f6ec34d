"""The cell view's rules that the golden files (tests/dashboard/test_golden_views.py) do not reach: the
one-line cause of an error text, device latencies whose interval is wide, and the grid's colour following
the kind, never the text (tests/coverfarm/test_latency_interval.py has the intervals' rules)."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest

from coverfarm import tracker
from coverfarm.baseline import BaselineResult
from coverfarm.cell_build import Cell, CpuJobs, DeviceInput, DeviceJob, build
from coverfarm.cell_view import Kind
from coverfarm.device_result import DeviceResult, Isolation, LatencyStats, TimingRules
from coverfarm.result import Options, ResultDocument, StageResult, StageStatus, WeightsInfo, error_line
from coverfarm_cli import analyze, build_parser
from dashboard.views import device_field
from farmrun.stats import MIN_REACHED, replica

CLASS = "cpu-x86_64-xnnpack"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # A traceback names its exception last.
        (
            'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom',
            "RuntimeError: boom",
        ),
        ("Traceback ...\nRuntimeError: engine crashed", "RuntimeError: engine crashed"),
        # Anything else leads with its summary.
        ("output wrong\nframe 3 differs by 0.5", "output wrong"),
        ("  Missing out variants\n  see the list  ", "Missing out variants"),
        ("", None),
        ("   \n ", None),
        (None, None),
    ],
)
def test_the_cause_is_the_line_that_says_what_went_wrong(text: str | None, line: str | None) -> None:
    assert error_line(text) == line


def latency(median_ms: float, spread: float = 0.0, cv: float = 0.02) -> LatencyStats:
    """Two replicas timed under the host's lock, their medians ``spread`` (a fraction) either side of
    ``median_ms``: a speed-up may come of it."""
    isolated = Isolation(lock="/tmp/timing.lock", acquired=True, waited_s=0.0)
    parts = [
        replica([m] * 3, 1, 1.0, MIN_REACHED).model_copy(update={"isolation": isolated})
        for m in (median_ms * (1 - spread), median_ms * (1 + spread))
    ]
    return LatencyStats(
        warmup=1, iterations=3, samples_ms=[median_ms] * 3, median_ms=median_ms, p90_ms=median_ms,
        min_ms=median_ms, mean_ms=median_ms, cv=cv, stable=spread <= 0.1, load_ms=1.0, rules=TimingRules(),
        replicas=parts, frames=16, judgement=2,
    )  # fmt: skip


def baseline(median_ms: float, spread: float = 0.0) -> BaselineResult:
    return BaselineResult(
        policy="act", options=Options(), frames=1, latency=latency(median_ms, spread, 0.2), status="ok",
        runner_id=1, host_id="h",
    )  # fmt: skip


def device_view(run: DeviceResult | None = None, timer: BaselineResult | None = None, **more: object) -> Cell:
    device = DeviceInput(CLASS, run=run, baseline=timer, **more)  # type: ignore[arg-type]
    return Cell("act", "xnnpack", Options(), devices=[device])


def run(median_ms: float, spread: float = 0.0, cv: float = 0.02) -> DeviceResult:
    return DeviceResult(
        bundle_sha256="ab" * 32, status="ok", latency=latency(median_ms, spread, cv), runner_id=1, host_id="h"
    )


def test_a_known_run_and_a_known_baseline_give_a_speedup_with_its_interval() -> None:
    view = build(device_view(run(3.25), baseline(13.0)))
    assert tracker.device_text(view.devices[CLASS]) == "✓ 3.25 ms (4.0×, 4.0–4.0)"


def test_a_run_taken_from_a_cell_of_the_same_reuse_key_is_marked_as_reused() -> None:
    taken = build(device_view(run(3.25), baseline(13.0), run_reused=True)).devices[CLASS]
    own = build(device_view(run(3.25), baseline(13.0))).devices[CLASS]
    assert tracker.device_text(taken) == "✓ 3.25 ms (4.0×, 4.0–4.0) ↺"
    assert "same reuse key" in tracker.device_hint(CLASS, taken)
    plain = f"{CLASS}: replica medians 3.25–3.25 ms (2 replicas), per-sample CV 2% (jitter)"
    assert (tracker.device_text(own), tracker.device_hint(CLASS, own)) == ("✓ 3.25 ms (4.0×, 4.0–4.0)", plain)


def test_a_run_of_a_bundle_lowered_with_a_workaround_says_so() -> None:
    cell = device_view(run(3.25), baseline(13.0))
    rewritten = Cell("diffusion", "xnnpack", Options(workarounds=("group_norm_4d",)), devices=cell.devices)
    column = build(rewritten).devices[CLASS]
    assert tracker.device_text(column) == "✓ 3.25 ms (4.0×, 4.0–4.0) ⚒ group_norm_4d"
    hint = tracker.device_hint(CLASS, column)
    assert "lowered with group_norm_4d: each 3-D (N, C, L) native_group_norm" in hint
    assert hint.endswith("not the stock lowering")
    assert "⚒" not in tracker.device_text(build(cell).devices[CLASS])


def test_a_run_with_a_wide_interval_reads_about_its_figure_with_its_interval_in_the_tooltip() -> None:
    view = build(device_view(run(25.3, spread=0.2, cv=0.12), baseline(13.0)))
    column = view.devices[CLASS]
    assert column.kind is Kind.UNSTABLE
    assert tracker.device_text(column) == "~25.3 ms (~0.51×, 0.43–0.64 wide)"
    field = device_field(view)
    assert (field.text, field.tone) == ("~25.3 ms (~0.51×, 0.43–0.64 wide)", "unstable")
    assert field.hint is not None
    assert field.hint.startswith(f"{CLASS}: replica medians 20.24–30.36 ms (2 replicas), per-sample CV 12%")
    assert "latency not known within ±10%" in field.hint


def test_a_baseline_with_a_wide_interval_marks_the_speedup_wide() -> None:
    view = build(device_view(run(3.25), baseline(13.0, spread=0.2)))
    assert tracker.device_text(view.devices[CLASS]) == "✓ 3.25 ms (~4.0×, 3.2–4.8 wide)"
    assert view.devices[CLASS].kind is Kind.VALUE


def test_the_device_colour_follows_the_kind_not_the_text() -> None:
    # A failed run whose cause happens to start with the done glyph is still a failure.
    failed = DeviceResult(bundle_sha256="ab" * 32, status="failed", error="✓ marks were expected, got NaN")
    field = device_field(build(device_view(failed)))
    assert (field.text, field.tone) == ("❌ ✓ marks were expected, got NaN", "failed")
    waiting = device_field(build(device_view(job=DeviceJob("queued"), enrolled=True)))
    assert (waiting.text, waiting.tone) == ("⏳", "pending")
    unserved = device_field(build(device_view(job=DeviceJob("queued"), enrolled=False)))
    assert (unserved.text, unserved.tone) == ("no device", "muted")


def test_a_backend_no_device_class_runs_reads_one_dash_whatever_the_other_classes() -> None:
    """A Vulkan cell of a sweep whose device runs are all XNNPACK classes (this machine's and an offline
    host's) reads "-", not "cpu-x86_64-xnnpack: -; h100-host-xnnpack: -" (which widened the grid)."""
    devices = [DeviceInput(CLASS, run=run(3.25)), DeviceInput("h100-host-xnnpack", run=run(1.5))]
    vulkan = device_field(build(Cell("act", "vulkan", Options(), devices=devices)))
    assert vulkan.text == "-"
    xnnpack = device_field(build(Cell("act", "xnnpack", Options(), devices=devices)))
    assert xnnpack.text == f"{CLASS}: ✓ 3.25 ms; h100-host-xnnpack: ✓ 1.5 ms"


def test_a_cell_without_a_result_reads_pending_cancelled_or_failed_in_every_column() -> None:
    since = datetime(2026, 1, 2, tzinfo=UTC)
    pending = build(Cell("act", "vulkan", Options(), cpu=CpuJobs(pending=True, running=True, since=since)))
    assert {column.kind for column in pending.coverage} == {Kind.PENDING}
    assert (tracker.pending_label(pending), pending.since, pending.cause) == ("⏳ running", since, None)
    cancelled = build(Cell("act", "vulkan", Options(), cpu=CpuJobs(cancelled=True)))
    assert tracker.view_row(cancelled) == ["act", "-", "-", "-", "-"]
    assert cancelled.cause == "cancelled"
    failed = build(Cell("act", "vulkan", Options(), cpu=CpuJobs(cause="RuntimeError: engine crashed")))
    assert tracker.view_row(failed) == ["act", "❌", "❌", "❌", "❌"]
    assert [column.cause for column in failed.coverage] == ["RuntimeError: engine crashed"] * 4
    assert (failed.device.kind, failed.device.cause) == (Kind.NOT_APPLICABLE, "no bundle to run")


def test_shares_under_one_percent_are_not_shown_as_zero() -> None:
    assert [tracker.share_percent(s) for s in (0.0, 0.001, 0.004, 0.005, 1.0, None)] == [
        "0%", "<1%", "<1%", "<1%", "100%", "-",
    ]  # fmt: skip
    assert tracker.share_percent(None, missing="?") == "?"


def parsed(command: str) -> Options:
    """The options ``coverfarm analyze`` runs with for this command line (its own parser and checks)."""
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.func, args.json) == (analyze.run, True)
    return analyze.options_of(args)


@pytest.mark.parametrize(
    "options",
    [
        Options(),
        Options(timeout_s=60, lowering="stock", constant_prop=False, weights="real"),
        Options(timeout_s=1234567.5, seed=7, frames=4, lowering="fast", weights="fake"),
        Options(force_fp16=True, workarounds=("group_norm_4d",)),
    ],
)
def test_the_repro_command_measures_the_cell_with_its_options(options: Options, tmp_path: Path) -> None:
    options = (
        options.model_copy(update={"checkpoint": str(tmp_path)}) if options.weights == "real" else options
    )
    view = build(Cell("act", "vulkan", options))
    assert view.command.startswith("coverfarm analyze --policy act --backend vulkan ")
    assert parsed(view.command) == options
    assert {column.command for column in view.coverage} == {view.command}


def test_the_repro_command_names_the_weights_the_result_was_measured_with() -> None:
    # auto chose fake weights on a small worker: run elsewhere, the command must not let it choose again.
    weights = WeightsInfo(mode="fake", requested="auto", reason="estimated peak over the worker")
    ok = StageResult(status=StageStatus.OK)
    doc = ResultDocument(
        policy="groot", backend="vulkan", options=Options(timeout_s=60), trace=ok, weights=weights
    )
    view = build(Cell("groot", "vulkan", doc.options, doc))
    assert "--weights fake" in view.command and "--lowering fast" in view.command
    assert parsed(view.command) == Options(timeout_s=60, weights="fake")
