"""The native runtime's whole path (``run_bundle(runtime="native")``: load, server mode, timing, failure
classes) against a stand-in ``executor_runner`` (standin_executor_runner.py) that honours the real
binary's flags, files and log lines and runs the programs through the executorch wheel; and the runner's
parsers against what the real binary printed on the H200 host (``recorded/``, from an executor_runner
built there from ExecuTorch main cff6f4dd32 with the Vulkan backend, event tracer off)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standin_executor_runner import write_standin

from coverfarm import runtime_repros
from coverfarm.device_result import DeviceResult, TimingRules
from coverfarm.digest import bundle_digest
from gpu_runner.bundle_run import run_bundle
from gpu_runner.declared_source import COMMIT_ENV_VAR, VERSION_ENV_VAR
from gpu_runner.native import tensor_io
from gpu_runner.native.binary import describe_binary, help_flags
from gpu_runner.native.failures import classify_exit
from gpu_runner.native.log import parse_log
from gpu_runner.native.runtime import NativeRuntime
from gpu_runner.native.shader_cache import shader_cache_state
from gpu_runner.native.tensor_io import IO_DIR_ENV_VAR, memory_folder

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parent / "recorded"
HEALTH = ROOT / "orchestrator" / "artifacts" / "health" / "xnnpack"


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_standin(tmp_path_factory.mktemp("standin"))


def run_health(binary: Path, **options: object) -> DeviceResult:
    return run_bundle(
        HEALTH,
        expected_sha256=bundle_digest(HEALTH),
        runtime=options.pop("runtime", "native"),  # type: ignore[arg-type]
        executor_runner=binary,
        # one chunk a sample, however fast the stand-in runs: the execution counts below are exact
        rules=TimingRules(warmup=1, min_chunks=3, min_s=0.0, min_sample_ms=0.0, replicas=1),
        **options,  # type: ignore[arg-type]
    )


# --- what the real binary printed on the H200 ----------------------------------------------------


@pytest.mark.parametrize(
    ("log", "where"),
    [
        (
            "vqbet-index-tensor-refused.log",
            "IndexTensor.cpp:76: (indices_list->size() == 1) is false! "
            "index.Tensor: only one index tensor is supported",
        ),
        ("tdmpc-argreduce-refused.log", "ArgReduce.cpp:28: (graph.is_buffer_storage(in)) is false!"),
    ],
)
def test_recorded_refusals_are_classified_with_the_runtimes_words(log: str, where: str) -> None:
    lines = (RECORDED / log).read_text().splitlines()
    failure = classify_exit("refused_at_load", "forward", -6, lines, "refused at load")
    assert failure.kind == "refused_at_load" and failure.signal == 6
    assert failure.cause == f"program forward refused at load: {where}"
    assert failure.message is not None and "vkcompute::vkapi::Error" in failure.message
    assert "/backends/vulkan/runtime/graph/ops/impl/" in failure.message  # the full text is kept
    assert failure.last_lines[-1].startswith("exit 134")


def test_a_recorded_missing_operator_is_classified_and_names_its_op() -> None:
    lines = (RECORDED / "multi-task-dit-missing-logical-not.log").read_text().splitlines()
    failure = classify_exit("refused_at_load", "observation", -6, lines, "refused at load")
    assert failure.kind == "refused_at_load" and failure.signal == 6
    assert failure.cause == "program observation refused at load: Missing operator: aten.logical_not.default"
    assert failure.message is not None and "VK_HAS_OP(op_name)" in failure.message  # the full text is kept
    assert runtime_repros.missing_operator(failure.message) == "aten.logical_not.default"
    ref = runtime_repros.for_message(failure.message)
    assert ref is not None and (ref.op, ref.name) == ("aten.logical_not.default", "logical_not")
    assert runtime_repros.missing_operator("ArgReduce.cpp:28: (graph.is_buffer_storage(in)) is false!") is (
        None
    )


def test_recorded_log_of_three_executions() -> None:
    log = parse_log((RECORDED / "act-three-executions.log").read_text())
    assert log.load_ms == pytest.approx(519.952539)
    assert log.iteration_ms == pytest.approx([32.160638, 25.391703, 25.414025])
    assert (log.executions, log.total_execute_ms) == (3, pytest.approx(82.966366))
    assert log.errors == []


def test_recorded_help_shows_server_mode_and_no_event_tracer(tmp_path: Path) -> None:
    fake = tmp_path / "executor_runner"
    fake.write_text(f'#!/bin/sh\ncat "{RECORDED / "helpshort.txt"}" >&2\nexit 1\n')
    fake.chmod(0o755)
    flags = help_flags(fake)
    assert {"model_path", "inputs", "output_file", "server_mode", "print_output", "num_executions"} <= set(
        flags
    )
    assert "etdump_path" not in flags


# --- the stand-in through the runner ---------------------------------------------------------------


def test_server_mode_loads_once_times_chunks_and_records_the_declared_runtime(
    binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VERSION_ENV_VAR, "1.5.0")
    monkeypatch.setenv(COMMIT_ENV_VAR, "cff6f4dd32a3")
    result = run_health(binary)
    assert result.status == "ok", result.error
    assert result.runtime == "native"  # (torch-freeness is checked in a fresh process: test_runner_no_torch)
    assert result.latency is not None and result.latency.iterations == 3
    assert result.latency.method is not None and "--server_mode" in result.latency.method
    assert result.load is not None and len(result.load.programs) == 1
    load = result.load.programs[0]
    assert load.first_ms is not None and load.warm_ms is not None and load.first_wall_ms is not None
    identity = result.runtime_identity
    assert identity is not None and (identity.version, identity.commit) == ("1.5.0", "cff6f4dd32a3")
    assert identity.export_version == "1.5.1" and identity.matches_export is False
    assert "runtime and export differ" in (identity.note or "")
    assert result.probe is not None and result.probe.native_runtime is not None
    native = result.probe.native_runtime
    assert native.server_mode and native.event_tracer is False and native.logging is True
    assert native.declared_version == "1.5.0" and native.problems == []


# Executions of the health bundle (4 frames) before its timed chunks: the test case's 1, the frames' 4,
# then in server mode the one warm-up chunk (chunk 0; the timed chunks 1-3 are executions 7-9), and one
# process per call runs a warm-up and the timed execution in each (chunks 0-2: executions 6-7, 8-9, 10-11).
@pytest.mark.parametrize(
    ("server_mode", "altered", "frame"), [(True, 8, 2), (False, 9, 1)], ids=["server", "per-call"]
)
def test_one_altered_timed_output_fails_as_wrong_output(
    binary: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server_mode: bool, altered: int, frame: int
) -> None:
    monkeypatch.setenv("STANDIN_ALTER_EXECUTION", str(altered))
    monkeypatch.setenv("STANDIN_COUNT_FILE", str(tmp_path / "executions"))  # counted over the processes
    result = run_health(binary, server_mode=server_mode)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.kind == "wrong_output"
    assert result.testcase[0].passed and result.frames is not None and result.frames.passed
    assert result.failure.cause == (
        f"output not stable: 1 of 3 executions differ (timed chunk 2 on frame {frame}: out max abs error 1)"
    )
    assert (tmp_path / "executions").read_text() == str(9 if server_mode else 11)
    assert result.latency is not None and result.latency.method is not None
    (replica,) = result.latency.replicas
    assert replica.outputs is not None and replica.outputs.note is None  # every timed chunk checked
    assert (replica.outputs.executions, replica.outputs.differing) == (3, 1)
    if not server_mode:  # the binary's own times, one warm-up and the timed execution per process
        assert "the binary's own time of its last execution" in result.latency.method
        assert "--num_executions=2" in result.latency.method
        assert result.load is not None and result.load.programs[0].warm_ms is None


def test_a_refused_program_fails_at_load_with_the_runtimes_message(
    binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_REFUSE", str(RECORDED / "vqbet-index-tensor-refused.log"))
    result = run_health(binary)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.kind == "refused_at_load" and result.failure.program == "health"
    assert result.failure.cause.startswith("program health refused at load: IndexTensor.cpp:76:")
    assert result.error == result.failure.cause and result.latency is None


def test_a_crash_while_running_gives_its_signal_and_last_lines(
    binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_CRASH_AFTER", "2")
    result = run_health(binary)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.kind == "crashed" and result.failure.signal == 11
    assert "crashed while running (signal 11 (SIGSEGV))" in result.failure.cause
    assert any("Model loaded in" in line for line in result.failure.last_lines)


def test_a_call_past_its_bound_is_out_of_time(binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_HANG_AFTER", "0")
    # A generous bound on the load (the stand-in starts a Python runtime), a short one on the call.
    runtime = NativeRuntime(binary, timeout_s=4, load_timeout_s=60)
    result = run_health(binary, runtime=runtime)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.kind == "out_of_time" and "ran over 4 s" in result.failure.cause


def test_wrong_output_is_classified_with_its_error(binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_ALTER_EXECUTION", "1")  # the test case's execution
    result = run_health(binary)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.kind == "wrong_output" and result.failure.program == "health"
    assert result.failure.max_abs_error == pytest.approx(1.0, abs=1e-5)
    assert result.failure.cause.startswith("test case outside tolerance")


def test_a_binary_without_logging_or_declared_source_says_so(tmp_path: Path) -> None:
    silent = tmp_path / "executor_runner"
    silent.write_text(
        f'#!/bin/sh\n[ "$1" = --helpshort ] && cat "{RECORDED / "helpshort.txt"}" >&2\nexit 1\n'
    )
    silent.chmod(0o755)
    info = describe_binary(silent)
    assert info.status == "ok" and info.logging is False
    assert any("logs nothing" in problem for problem in info.problems)
    assert any(VERSION_ENV_VAR in problem for problem in info.problems) or os.environ.get(VERSION_ENV_VAR)


def test_shader_cache_state(tmp_path: Path) -> None:
    cache = tmp_path / "nvidia" / "GLCache"
    assert "no shader disk cache" in shader_cache_state({"XDG_CACHE_HOME": str(tmp_path)})
    cache.mkdir(parents=True)
    assert shader_cache_state({"XDG_CACHE_HOME": str(tmp_path)}) == f"nvidia: empty ({cache})"
    (cache / "a.bin").write_bytes(b"x" * 2000)
    assert "nvidia: 1 files, 0.0 MB" in shader_cache_state({"XDG_CACHE_HOME": str(tmp_path)})
    off = {"XDG_CACHE_HOME": str(tmp_path), "__GL_SHADER_DISK_CACHE": "0"}
    assert shader_cache_state(off).startswith("nvidia: disabled")


def test_a_server_hands_over_through_memory_unless_the_host_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live server's .bin files go to /dev/shm: on the H200, act's chunk took 30.2-32.0 ms that way
    against 33.2-37.5 ms through the disk's /tmp (three alternating pairs, binary's own 25.1 ms)."""
    monkeypatch.delenv(IO_DIR_ENV_VAR, raising=False)
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(tensor_io, "SHARED_MEMORY", shm)
    assert memory_folder() == str(shm)
    monkeypatch.setattr(tensor_io, "SHARED_MEMORY", tmp_path / "absent")
    assert memory_folder() is None  # the default temp folder
    chosen = tmp_path / "chosen"
    monkeypatch.setenv(IO_DIR_ENV_VAR, str(chosen))
    monkeypatch.setattr(tensor_io, "SHARED_MEMORY", shm)
    assert memory_folder() == str(chosen)
