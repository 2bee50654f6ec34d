"""Device timing that can be trusted: bounded in time, every timed chunk's outputs checked, replicas in
fresh processes judged together, and a speed-up only from two trusted measurements."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from standin_runtimes import FlakyOutputRuntime, SlowRuntime

from coverfarm.baseline import BaselineResult, speedup
from coverfarm.device_result import DeviceResult, Isolation, LatencyStats, TimingRules
from coverfarm.result import Options
from farmrun import hostload
from farmrun.hostload import LoadMeter, cpu_seconds, host_id, live_descendant_seconds
from farmrun.hostlock import HostLock
from farmrun.stats import MAX_S_REACHED, MIN_REACHED, combine, latency_stats, replica, timed_loop
from gpu_runner.bundle_run import run_bundle
from gpu_runner.replicas import run_replicated

# One chunk per sample (min_sample_ms=0): these tests count chunks.
QUICK = TimingRules(warmup=1, min_chunks=5, min_s=0.0, max_s=5.0, replicas=1, min_sample_ms=0.0)


def test_the_loop_meets_both_minimums() -> None:
    rules = TimingRules(warmup=2, min_chunks=3, min_s=0.3, max_s=10.0)
    seen: list[int] = []
    timed = timed_loop(lambda i: time.sleep(0.05), rules, after=lambda i, _r, _ms: seen.append(i))
    assert timed.stopped == MIN_REACHED and timed.warmup == 2
    assert timed.seconds >= 0.3 and len(timed.samples_ms) >= 6  # 0.3 s of 50 ms chunks, not 3 chunks
    assert seen == list(range(2, 2 + len(timed.samples_ms)))  # every timed chunk checked, none warm-up


def test_iterations_are_bounded_in_time(tiny_bundles: dict[str, Path]) -> None:
    """A slow chunk (3 program calls of 0.15 s) is timed until max_s, not 100 times: a 100-step
    denoiser is not timed 23 times."""
    # A loaded machine only makes each chunk longer: the bounds below hold for chunks of 0.45 s up to
    # about 0.65 s (min_s 0.7 is reached after the second warm-up chunk, max_s after the third or fourth).
    rules = TimingRules(warmup=3, min_chunks=100, min_s=0.7, max_s=1.5, replicas=1)
    start = time.monotonic()
    result = run_bundle(tiny_bundles["xnnpack"], rules=rules, runtime=SlowRuntime(0.15))
    assert result.status == "ok", result.error
    lat = result.latency
    assert lat is not None
    (part,) = lat.replicas
    assert part.stopped == MAX_S_REACHED
    assert lat.iterations in (3, 4) and 1.5 <= part.seconds < 2.7  # 4 chunks of 0.45 s pass 1.5 s
    assert part.warmup == 2  # warm-up stops once it took min_s, before its 3 chunks
    assert time.monotonic() - start < 40  # correctness pass (50 calls) and timing, not 100 chunks


def test_an_output_that_differs_on_one_timed_execution_fails(tiny_bundles: dict[str, Path]) -> None:
    # step is called once by the test case and twice per chunk: 1 + 16 frames x 2 + 1 warm-up x 2 = 35
    # calls before timing; call 41 is the second step of the third timed chunk (frame 3).
    flaky = FlakyOutputRuntime("step", flaky_call=41)
    result = run_bundle(tiny_bundles["xnnpack"], rules=QUICK, runtime=flaky)
    assert result.testcase and all(c.passed for c in result.testcase)
    assert result.frames is not None and result.frames.passed  # the correctness pass saw nothing wrong
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("output not stable: 1 of 5 executions differ (timed chunk 3 on frame 3")
    # Without the alteration the same run passes: the check does not fail by itself.
    steady = run_bundle(tiny_bundles["xnnpack"], rules=QUICK, runtime=FlakyOutputRuntime("step", 10**9))
    assert steady.status == "ok", steady.error


def stats(samples: list[float], rules: TimingRules) -> LatencyStats:
    part = replica(samples, 0, sum(samples) / 1e3, MIN_REACHED)
    return latency_stats(samples, 0, 0.0, rules, [part])


def test_the_replicas_spread_is_the_interval_and_jitter_judges_nothing() -> None:
    rules = TimingRules(replicas=2)
    first = stats([10.0, 10.1, 9.9, 10.0, 10.05], rules)
    second = stats([11.0, 11.1, 10.9, 11.0, 11.05], rules)
    assert combine([first, first], rules).stable
    # Medians 10 and 11 ms: figure 10.5 ms, interval ±4.8%, within the ±10% the rules allow.
    near = combine([first, second], rules)
    assert near.stable and near.replica_spread == pytest.approx(0.1)
    apart = combine([first, stats([13.0, 13.1, 12.9, 13.0, 13.05], rules)], rules)
    assert not apart.stable
    assert apart.unstable_reasons == ["replica medians 10–13 ms (±13% of 11.5 ms), wider than ±10%"]
    # A replica's samples 20% apart (CV 0.2) are jitter: with agreeing medians the latency is known.
    noisy = combine([first, stats([10.0, 14.0, 8.0, 10.0, 12.0], rules)], rules)
    assert noisy.stable and noisy.replicas[1].cv > 0.15 and noisy.unstable_reasons == []


def test_replicas_run_in_fresh_processes_under_one_lock(
    tiny_bundles: dict[str, Path], tmp_path: Path
) -> None:
    rules = QUICK.model_copy(update={"replicas": 2})
    result = run_replicated(
        tiny_bundles["xnnpack"], rules=rules, lock=HostLock(tmp_path / "timing.lock"), runner_id=7
    )
    assert result.status == "ok", result.error
    lat = result.latency
    assert lat is not None and len(lat.replicas) == 2 and lat.iterations == 10
    assert all(r.isolation is not None and r.isolation.acquired for r in lat.replicas)
    assert all(r.outputs is not None and r.outputs.executions == 5 for r in lat.replicas)
    assert result.runner_id == 7 and result.host_id == host_id()
    assert lat.rules == rules and lat.replica_spread is not None


def trusted(median: float, cv_spread: float = 0.01) -> LatencyStats:
    rules = TimingRules()
    samples = [median * (1 + cv_spread * k) for k in (-1, 0, 1, 0, 0)]
    isolated = Isolation(lock="/tmp/lock", acquired=True, waited_s=0.0)
    parts = [replica(samples, 0, 1.0, MIN_REACHED) for _ in range(2)]
    for part in parts:
        part.isolation = isolated
    lat = latency_stats(samples * 2, 0, 0.0, rules, parts)
    lat.frames = 16
    return lat


def test_a_speedup_only_from_two_trusted_measurements_of_one_runner_and_host() -> None:
    host = host_id()
    eager = BaselineResult(
        policy="act", options=Options(), frames=16, status="ok", latency=trusted(40.0), runner_id=3,
        host_id=host,
    )  # fmt: skip
    device = DeviceResult(
        bundle_sha256="0" * 64, status="ok", latency=trusted(10.0), runner_id=3, host_id=host
    )
    allowed = speedup(eager, device)
    assert allowed.allowed and allowed.value == pytest.approx(4.0) and allowed.reasons == []

    # Per-sample jitter does not keep a speed-up from being shown.
    noisy = device.model_copy(update={"latency": trusted(10.0, cv_spread=0.2)})
    assert speedup(eager, noisy).narrow

    other = speedup(eager, device.model_copy(update={"runner_id": 4}))
    assert other.reasons == ["timed by different or unknown runners (device 4, baseline 3)"]
    elsewhere = speedup(eager, device.model_copy(update={"host_id": "another/host"}))
    assert elsewhere.reasons[0].startswith("timed on different or unknown hosts")
    beside = trusted(10.0)
    beside.replicas[1].isolation = Isolation(lock="/tmp/lock", acquired=False, waited_s=1800.0)
    crowded = speedup(eager, device.model_copy(update={"latency": beside}))
    assert crowded.reasons == [
        "the device run's replica 2 timed beside a CPU stage (waited 1800 s for the host's timing lock)"
    ]
    frame0 = trusted(10.0)
    frame0.frames = 1
    assert "different inputs" in speedup(eager, device.model_copy(update={"latency": frame0})).reasons[0]
    assert speedup(None, device).reasons == ["no eager baseline"]


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_sub_millisecond_chunks_are_timed_in_groups_and_reach_the_minimum_time() -> None:
    """0.1 ms chunks under a 100-sample cap and 0.5 s minimum: one chunk per sample would stop at the
    cap after 10 ms; grouped, the loop reaches its minimum time, each sample is the mean per chunk, and
    every chunk of every group is still checked."""
    rules = TimingRules(warmup=3, min_chunks=5, min_s=0.5, max_s=5.0, max_chunks=100)
    seen: list[int] = []
    timed = timed_loop(lambda i: _spin(1e-4), rules, after=lambda i, _r, _ms: seen.append(i))
    assert timed.stopped == MIN_REACHED and timed.seconds >= 0.5
    assert timed.chunks_per_sample >= 10  # a sample reaches 2 * 0.5 s / 100 = 10 ms
    assert len(timed.samples_ms) <= 100
    assert seen == list(range(3, 3 + len(timed.samples_ms) * timed.chunks_per_sample))
    assert all(0.09 <= sample <= 5.0 for sample in timed.samples_ms)  # per chunk, not per group
    part = replica(timed.samples_ms, timed.warmup, timed.seconds, timed.stopped, timed.chunks_per_sample)
    assert part.chunks_per_sample == timed.chunks_per_sample


def test_chunks_long_enough_are_timed_one_per_sample() -> None:
    rules = TimingRules(warmup=1, min_chunks=3, min_s=0.0, max_s=5.0, min_sample_ms=1.0)
    timed = timed_loop(lambda i: time.sleep(0.005), rules)
    assert timed.chunks_per_sample == 1 and len(timed.samples_ms) == 3
    # With no warm-up there is nothing to judge a chunk by: one chunk per sample.
    assert timed_loop(lambda i: None, TimingRules(warmup=0, min_chunks=2, min_s=0.0)).chunks_per_sample == 1


BUSY_CHILD = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end:\n    pass\n"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_live_child_counts_as_the_timed_process_own_cpu_not_as_another_process() -> None:
    """A native runtime's server process runs the timed program: while it is alive its CPU is this
    process's own, not load from elsewhere on the host (whatever other children this process has)."""
    meter = LoadMeter().start()
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD])
    try:
        deadline = time.monotonic() + 30
        while (child_s := cpu_seconds(child.pid)) < 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_descendant_seconds() >= child_s  # the child is among the live descendants
        load = meter.stop()  # the child is still alive and unreaped here
    finally:
        child.wait()
    assert load.own_cores is not None and load.busy_cores is not None
    # the child's CPU seconds (at least 1 s, on however loaded a host) are counted as this process's own
    assert child_s >= 1.0
    assert load.own_cores * load.window_s >= 0.9 * child_s - 0.05
    assert load.own_cores <= load.busy_cores


def test_a_host_without_a_machine_id_is_told_apart_by_its_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leased GPU hosts have no machine id and all call themselves ``vm``: their name alone would pair a
    baseline of one machine with a device run of another."""
    monkeypatch.setattr(hostload, "_MACHINE_ID", (tmp_path / "no-machine-id",))
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert host_id() == f"boot-{boot}/{socket.gethostname()}"
    monkeypatch.setattr(hostload, "_BOOT_ID", tmp_path / "no-boot-id")
    assert host_id() == socket.gethostname()
    (tmp_path / "machine-id").write_text("3d1219c7\n")
    monkeypatch.setattr(hostload, "_MACHINE_ID", (tmp_path / "machine-id",))
    assert host_id() == f"3d1219c7/{socket.gethostname()}"
