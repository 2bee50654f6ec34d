"""How well a latency is known (``coverfarm.latency_interval``) and the speed-up divided from two of them
(``coverfarm.baseline.speedup``), from synthetic replicas of known spread: the replicas' range is the
interval, a speed-up is shown when its interval is narrow and marked wide when it is not, whatever the
per-sample jitter, and documents stored under the first rules stay readable and say so."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from coverfarm import tracker
from coverfarm.baseline import BaselineResult, speedup
from coverfarm.cell_build import Cell, DeviceInput, build
from coverfarm.cell_view import Kind
from coverfarm.device_result import DeviceResult, Isolation, LatencyStats, TimingRules
from coverfarm.latency_interval import RULES_VERSION, interval_of
from coverfarm.result import Options
from farmrun.stats import MIN_REACHED, combine, latency_stats, replica

CLASS = "cpu-x86_64-xnnpack"
ISOLATED = Isolation(lock="/tmp/timing.lock", acquired=True, waited_s=0.0)
# Eager act on the H200 host, five fresh processes (issue: medians 68.1–78.5 ms, per-sample CV 6–9%).
EAGER_H200 = [78.46, 73.76, 75.33, 68.83, 68.08]
VULKAN_H200 = [30.95, 31.32]  # act on Vulkan through server mode, two replicas


def timed(medians: Sequence[float], jitter: float = 0.02, rules: TimingRules | None = None) -> LatencyStats:
    """One fresh-process replica per median, each of five samples spread ``jitter`` about it, combined
    as the runner combines them, each under the host's timing lock, over 16 frames."""
    parts = []
    for median in medians:
        samples = [median * (1 + jitter * k) for k in (-2, -1, 0, 1, 2)]
        one = latency_stats(samples, 1, 1.0, rules)
        one.replicas = [replica(samples, 1, 1.0, MIN_REACHED).model_copy(update={"isolation": ISOLATED})]
        one.frames = 16
        parts.append(one)
    return combine(parts, rules or TimingRules())


def device(medians: Sequence[float], jitter: float = 0.02) -> DeviceResult:
    return DeviceResult(
        bundle_sha256="ab" * 32, status="ok", latency=timed(medians, jitter), runner_id=1, host_id="h"
    )


def eager(medians: Sequence[float], jitter: float = 0.02) -> BaselineResult:
    return BaselineResult(
        policy="act", options=Options(), frames=16, latency=timed(medians, jitter), status="ok", runner_id=1,
        host_id="h",
    )  # fmt: skip


def cell_text(run: DeviceResult, baseline: BaselineResult | None) -> tuple[str, Kind, str]:
    column = build(Cell("act", "xnnpack", Options(), devices=[DeviceInput(CLASS, run, baseline)])).devices[
        CLASS
    ]
    return tracker.device_text(column), column.kind, tracker.device_hint(CLASS, column)


def test_the_replicas_range_is_the_interval_and_their_median_the_figure() -> None:
    latency = timed(EAGER_H200, jitter=0.08)
    judged = interval_of(latency)
    assert judged.figure_ms == pytest.approx(73.76)  # the median of the replica medians
    assert (judged.low_ms, judged.high_ms) == (pytest.approx(68.08), pytest.approx(78.46))
    assert judged.replicas == 5 and judged.coverage == pytest.approx(1 - 2**-4)
    # 78.46 / 73.76 - 1 = 6.4%, 1 - 68.08 / 73.76 = 7.7%: within ±10% whatever the samples' CV of 8%.
    assert judged.narrow and judged.reason is None and latency.stable and latency.cv > 0.05
    assert latency.judgement == RULES_VERSION and latency.unstable_reasons == []
    # The same replicas judged against ±5% are wide, and say by how much.
    assert not interval_of(latency, 0.05).narrow
    wide = timed(EAGER_H200, rules=TimingRules(interval_width=0.05))
    assert not wide.stable
    assert wide.unstable_reasons == ["replica medians 68.08–78.46 ms (±8% of 73.76 ms), wider than ±5%"]


def test_fewer_than_two_replicas_have_no_interval_and_say_so() -> None:
    one = timed([100.0])
    judged = interval_of(one)
    assert (judged.low_ms, judged.high_ms, judged.narrow) == (None, None, False)
    assert judged.reason == "1 replica: no interval (needs at least 2)"
    assert one.unstable_reasons == [
        "1 replica (the rules ask for 5)",
        "1 replica: no interval (needs at least 2)",
    ]
    text, kind, hint = cell_text(device([100.0]), eager([400.0, 410.0, 405.0]))
    assert (text, kind) == ("~100 ms (~4.0×, no interval)", Kind.UNSTABLE)
    assert hint.startswith(f"{CLASS}: no interval (1 replica), per-sample CV")
    assert "no interval: the device run has 1 replica: no interval (needs at least 2)" in hint


def test_a_speedup_with_a_narrow_interval_is_shown_with_it() -> None:
    # The H200's act: eager replicas 15% apart, yet the speed-up is known within ±10%.
    verdict = speedup(eager(EAGER_H200, 0.08), device(VULKAN_H200, 0.001))
    assert verdict.allowed and verdict.narrow and verdict.reasons == []
    assert verdict.value == pytest.approx(73.76 / 31.135)
    assert (verdict.low, verdict.high) == (pytest.approx(68.08 / 31.32), pytest.approx(78.46 / 30.95))
    text, kind, hint = cell_text(device(VULKAN_H200, 0.001), eager(EAGER_H200, 0.08))
    assert (text, kind) == ("✓ 31.1 ms (2.4×, 2.2–2.5)", Kind.VALUE)
    assert hint == f"{CLASS}: replica medians 30.95–31.32 ms (2 replicas), per-sample CV 1% (jitter)"


def test_a_speedup_with_a_wide_interval_is_marked_wide_with_why() -> None:
    # Eager replicas 19% apart and device replicas 14% apart on a loaded 2-core host.
    run, baseline = device([391.0, 380.0, 433.0, 402.0, 410.0]), eager([330.0, 392.0, 361.0, 350.0, 371.0])
    verdict = speedup(baseline, run)
    assert verdict.allowed and not verdict.narrow and verdict.value == pytest.approx(361 / 402)
    assert verdict.reasons == ["the speed-up's interval 0.762–1.03 (±15% of 0.898) is wider than ±10%"]
    text, kind, hint = cell_text(run, baseline)
    assert (text, kind) == ("✓ 402 ms (~0.9×, 0.76–1.0 wide)", Kind.VALUE)
    assert "speed-up not known within ±10%: the speed-up's interval 0.762–1.03" in hint


def test_a_device_latency_whose_own_interval_is_wide_reads_about() -> None:
    text, kind, hint = cell_text(device([20.0, 25.3, 30.0]), None)
    assert (text, kind) == ("~25.3 ms", Kind.UNSTABLE)
    assert hint.startswith(f"{CLASS}: replica medians 20–30 ms (3 replicas), per-sample CV")
    assert "latency not known within ±10%: replica medians 20–30 ms (±21% of 25.3 ms)" in hint
    assert "no speed-up: no eager baseline" in hint  # never nothing without saying why


@pytest.mark.parametrize(
    ("baseline", "reason"),
    [
        (None, "no eager baseline"),
        (
            BaselineResult(policy="act", options=Options(), frames=16, status="slow", error="over 900 s"),
            "the eager baseline ended slow: over 900 s",
        ),
        (eager([100.0, 101.0]).model_copy(update={"runner_id": 2}), "timed by different or unknown runners"),
        (
            eager([100.0, 101.0]).model_copy(update={"host_id": "other"}),
            "timed on different or unknown hosts",
        ),
    ],
)
def test_without_a_speedup_the_cell_says_why(baseline: BaselineResult | None, reason: str) -> None:
    text, kind, hint = cell_text(device([25.0, 25.2]), baseline)
    assert (text, kind) == ("✓ 25.1 ms", Kind.VALUE)
    assert f"no speed-up: {reason}" in hint


# A device result stored under rules 1: two replicas refused for their per-sample CV.
OLD_RULES = {
    "warmup": 3, "min_chunks": 5, "min_s": 2.0, "max_s": 60.0, "max_chunks": 1000, "min_sample_ms": 1.0,
    "replicas": 2, "max_cv": 0.05, "replica_tolerance": 0.05, "inputs": "cycle",
}  # fmt: skip


def old_replica(median_ms: float) -> dict[str, object]:
    return {
        "warmup": 3, "iterations": 30, "seconds": 2.5, "stopped": "min_chunks and min_s reached",
        "median_ms": median_ms, "p90_ms": median_ms * 1.1, "min_ms": median_ms * 0.9, "cv": 0.09,
        "isolation": {"lock": "/tmp/timing.lock", "acquired": True, "waited_s": 0.0},
    }  # fmt: skip


def old_latency(replicas: list[float], rules: dict[str, object] | None) -> dict[str, object]:
    median = replicas[0] if replicas else 31.0
    return {
        "warmup": 3, "iterations": 60, "samples_ms": [median] * 60, "median_ms": median, "p90_ms": median,
        "min_ms": median, "mean_ms": median, "cv": 0.09, "stable": False, "load_ms": 5.0, "rules": rules,
        "frames": 16, "replicas": [old_replica(m) for m in replicas],
        "unstable_reasons": ["replica 1: CV 0.090 over 0.05", "replica 2: CV 0.090 over 0.05"],
    }  # fmt: skip


def test_documents_of_the_first_rules_stay_readable_and_say_which_rules_they_met() -> None:
    run = DeviceResult.model_validate(
        {
            "bundle_sha256": "ab" * 32,
            "status": "ok",
            "runner_id": 1,
            "host_id": "h",
            "latency": old_latency([31.0, 31.4], OLD_RULES),
        }
    )
    assert run.latency is not None and run.latency.judgement is None and not run.latency.stable
    judged = interval_of(run.latency)
    assert judged.measured_under == 1 and judged.judged_under == RULES_VERSION
    assert judged.note == (
        "measured under rules 1 (each replica's CV at most max_cv and the replicas' medians within "
        "replica_tolerance); judged from its 2 replica medians"
    )
    # Judged now from its stored replicas: they agree within ±1%, so the figure is known.
    text, kind, hint = cell_text(run, eager([62.0, 63.0, 62.5]))
    assert (text, kind) == ("✓ 31.2 ms (2.0×, 2.0–2.0)", Kind.VALUE)
    assert "the device run: measured under rules 1" in hint


def test_documents_from_before_replicated_timing_cannot_be_judged_and_say_so() -> None:
    run = DeviceResult.model_validate(
        {"bundle_sha256": "ab" * 32, "status": "ok", "latency": old_latency([], None), "host_id": "h"}
    )
    assert run.latency is not None
    judged = interval_of(run.latency)
    assert judged.figure_ms == 31.0 and judged.low_ms is None
    assert judged.note == "measured before replicated timing: it records no replicas, so it has no interval"
    text, kind, hint = cell_text(run, None)
    assert (text, kind) == ("~31 ms", Kind.UNSTABLE)
    assert "measured before replicated timing" in hint
