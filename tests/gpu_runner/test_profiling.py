"""The profile run end to end: a bundle's chunk run once more with a runtime that writes real ETDumps
(the executorch wheel's pybindings with ``enable_etdump``: the stand-in, and the stand-in
``executor_runner`` built "with the event tracer", which writes them through the same pybindings), read
by ``executorch.devtools.Inspector`` with the bundle's ETRecords into where the time goes.

The bundle is the engine's tiny two-program XNNPACK bundle with an op XNNPACK leaves on the CPU
(``aten.cumsum``) and ETRecords (tinybundle.py, ``profiled=True``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runnerhelp import ROOT
from standin_executor_runner import write_standin

from coverfarm.bundle_manifest import BundleError, load_manifest
from coverfarm.device_result import DeviceFailure, DeviceResult
from coverfarm.profile import CPU, ProfileRun
from gpu_runner.bundle_run import verify
from gpu_runner.profiling import STAND_IN, profile_bundle, profile_result


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tinybundle import build

    return Path(build(tmp_path_factory.mktemp("profiled"), ["xnnpack"], profiled=True)["xnnpack"])


def test_the_bundle_carries_its_etrecords_named_by_its_manifest_and_covered_by_its_address(
    profiled: Path, tmp_path: Path
) -> None:
    manifest = load_manifest(profiled)
    assert [p.etrecord for p in manifest.programs] == ["programs/obs.etrecord", "programs/step.etrecord"]
    assert all((profiled / str(p.etrecord)).stat().st_size > 0 for p in manifest.programs)
    copy = shutil.copytree(profiled, tmp_path / profiled.name)
    (copy / "programs" / "obs.etrecord").write_bytes(b"another record")
    with pytest.raises(BundleError, match="is refused"):
        verify(copy)


def ok_result(bundle: Path) -> DeviceResult:
    return DeviceResult(bundle_sha256=bundle.name, policy="tiny", backend="xnnpack", status="ok")


def check_where_the_time_goes(run: ProfileRun) -> None:
    """What both profilers' ETDumps say of the tiny bundle, read with its ETRecords."""
    assert run.kind == "profile" and run.status == "ok", run.error
    assert [(d.program, d.executions) for d in run.etdumps] == [("obs", 1), ("step", 2)]
    assert all(d.bytes > 0 and len(d.sha256) == 64 for d in run.etdumps)
    summary = run.summary
    assert summary is not None, run.summary_note
    assert summary.op_names_from == "etrecord"
    # obs: one XNNPACK call (linear, relu) and cumsum on the CPU; step: one XNNPACK call each time.
    (delegate,) = summary.delegates
    assert (delegate.backend, delegate.calls) == ("XnnpackBackend", 3)
    assert [(p.name, p.executions) for p in summary.programs] == [("obs", 1), ("step", 2)]
    cpu = [op for op in summary.top_ops if op.where == CPU]
    assert [(op.name, op.calls, op.programs) for op in cpu] == [("aten.cumsum.default", 1, ["obs"])]
    assert summary.cpu_ops_ms == pytest.approx(cpu[0].ms) and summary.cpu_ops_ms > 0
    assert summary.programs[1].cpu_ops_ms == 0.0 and summary.programs[0].cpu_ops_ms > 0
    assert summary.execute_ms == pytest.approx(sum(p.execute_ms for p in summary.programs))
    assert summary.delegate_ms + summary.cpu_ops_ms <= summary.execute_ms
    assert summary.runtime_ms == pytest.approx(summary.execute_ms - summary.delegate_ms - summary.cpu_ops_ms)
    inside = [op for op in summary.top_ops if op.where == "XnnpackBackend"]
    assert any(op.name.startswith("Fully Connected") for op in inside)


def test_the_wheel_standin_profiles_a_chunk_and_says_where_its_time_goes(profiled: Path) -> None:
    result = profile_result(ok_result(profiled), profiled, STAND_IN, 600)
    run = result.profile
    assert run is not None and run.stand_in and "stand-in" in run.runtime
    check_where_the_time_goes(run)
    # The warm-up chunk ran first and is left out; the profiled chunk's wall clock gives the hand-over.
    assert [d.warmup for d in run.etdumps] == [1, 2]
    summary = run.summary
    assert summary is not None and summary.chunk_ms == run.chunk_ms and run.chunk_ms is not None
    assert summary.share_of == "chunk"
    assert summary.handover_ms == pytest.approx(run.chunk_ms - summary.execute_ms)
    assert summary.cpu_share == pytest.approx(summary.cpu_ops_ms / run.chunk_ms)
    assert result.latency is None  # a profile is never a latency


def test_a_profiling_executor_runner_profiles_through_run_bundle_without_torch_in_the_runner(
    profiled: Path, tmp_path: Path
) -> None:
    timed = write_standin(tmp_path / "timed")
    tracer = write_standin(tmp_path / "traced", event_tracer=True)
    out = tmp_path / "result.json"
    args = [
        "runner", "run-bundle", str(profiled), "--out", str(out), "--unsigned", "--runtime", "native",
        "--executor-runner", str(timed), "--profiling-executor-runner", str(tracer),
        "--warmup", "1", "--min-chunks", "3", "--min-seconds", "0", "--replicas", "1",
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = DeviceResult.model_validate(json.loads(out.read_text()))
    assert result.status == "ok" and result.runtime == "native"
    # The runner's process never loaded torch: the profile's reading ran in a child process of its own.
    assert result.torch_module_loaded is False
    run = result.profile
    assert run is not None and not run.stand_in and str(tracer) in run.runtime
    check_where_the_time_goes(run)
    # One process per program, a warm-up of as many executions first; no chunk wall clock, no hand-over.
    assert [d.warmup for d in run.etdumps] == [1, 2]
    assert run.chunk_ms is None and run.handover_note and "not measured" in run.handover_note
    assert run.summary is not None and run.summary.handover_ms is None and run.summary.share_of == "execute"
    # The timed runs are the latency, alone: its samples are the timed chunks'.
    assert result.latency is not None and len(result.latency.samples_ms) == 3


def test_a_binary_without_the_event_tracer_is_refused_as_a_profiler_with_the_cause(
    profiled: Path, tmp_path: Path
) -> None:
    run = profile_bundle(profiled, str(write_standin(tmp_path / "plain")), 60)
    assert run.status == "failed" and run.etdumps == []
    assert run.error is not None and "built without the event tracer" in run.error


def test_no_profile_without_a_declared_runtime_or_after_a_run_that_never_ran(profiled: Path) -> None:
    result = ok_result(profiled)
    assert profile_result(result, profiled, None, 60).profile is None
    refused = result.model_copy(
        update={"status": "failed", "failure": DeviceFailure(kind="refused_at_load", cause="refused")}
    )
    assert profile_result(refused, profiled, STAND_IN, 60).profile is None


# One dispatch's event name as Vulkan's runtime (ExecuTorch main, an H100) logged it in a profile of
# diffusion's denoise step: a JSON object per dispatch, its ids unique, so that raw names never add up.
VULKAN_DISPATCH = (
    '{"operator": {"name": "aten.convolution.default", "delegate_node_id": 8, "args": [{"type": "TENSOR", '
    '"value_ref": 20, "dtype": "Float", "sizes": [1, 128, 8], "storage": "TEXTURE_3D", "packed_dim": 2}]}, '
    '"kernel_name": "conv1d_float", "operator_id": 234, "dispatch_id": 14}'
)


def test_a_vulkan_dispatch_is_named_by_its_op_and_shader() -> None:
    from worker.profile.summarize import delegated_op_name

    assert delegated_op_name(VULKAN_DISPATCH) == "aten.convolution.default (conv1d_float)"
    other = VULKAN_DISPATCH.replace('"dispatch_id": 14', '"dispatch_id": 15').replace("234", "235")
    assert delegated_op_name(other) == delegated_op_name(VULKAN_DISPATCH)  # dispatches of one op add up
    assert delegated_op_name("Fully Connected (NC, F32) GEMM #1") == "Fully Connected (NC, F32) GEMM #1"
    assert delegated_op_name('{"not": "an operator"}') == '{"not": "an operator"}'
    assert delegated_op_name("{not json") == "{not json"
