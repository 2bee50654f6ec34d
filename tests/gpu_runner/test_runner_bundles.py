"""The runner on tiny bundles the engine wrote: address check, test case, frames, failures with causes."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from runnerhelp import ROOT, rehomed

from coverfarm import digest
from coverfarm.device_result import DeviceResult, TimingRules
from gpu_runner.bundle_run import run_bundle
from gpu_runner.runtime import registered_backends

QUICK = TimingRules(warmup=1, min_chunks=5, min_s=0.0, max_s=5.0, replicas=1)


def coverfarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_a_bundle_is_stored_under_its_digest(tiny_bundles: dict[str, Path]) -> None:
    for bundle in tiny_bundles.values():
        assert digest.bundle_digest(bundle) == bundle.name


def test_tiny_xnnpack_bundle_passes(tiny_bundles: dict[str, Path]) -> None:
    result = run_bundle(tiny_bundles["xnnpack"], rules=QUICK, runtime="python")
    assert result.status == "ok", result.error
    assert result.device_class == f"cpu-{platform.machine()}-xnnpack"
    assert [(c.program, c.passed) for c in result.testcase] == [("obs", True), ("step", True)]
    assert all(c.max_abs_error is not None and c.max_abs_error < 1e-4 for c in result.testcase)
    assert result.frames is not None and result.frames.passed and result.frames.frames == 16
    (action,) = result.frames.outputs
    assert action.name == "action" and action.max_abs_error < 1e-4
    assert action.min_sqnr_db is None or action.min_sqnr_db > 60
    assert result.latency is not None and len(result.latency.samples_ms) == 5
    assert result.latency.warmup == 1 and result.latency.load_ms > 0
    assert result.latency.rules == QUICK and result.latency.frames == 16  # cycled over every frame
    (replica,) = result.latency.replicas
    # A tiny program's chunk takes well under a millisecond: timed in groups, every chunk checked.
    assert replica.chunks_per_sample > 1
    executions = 5 * replica.chunks_per_sample
    assert replica.outputs is not None and (replica.outputs.executions, replica.outputs.differing) == (
        executions,
        0,
    )
    assert replica.host_load is not None and replica.host_load.cores >= 1
    assert replica.isolation is None  # no lock given: not isolated, and no speed-up will use it


def test_tiny_openvino_bundle_runs_on_the_wheels_runtime_and_records_its_precision(
    tiny_bundles: dict[str, Path],
) -> None:
    from coverfarm.backends.openvino import cpu_inference_precision

    # Loaded from its file (mapped), an OpenVINO program crashes the runtime at its first execute; the
    # runner loads it from the file's bytes, kept alive as long as the program.
    result = run_bundle(tiny_bundles["openvino"], rules=QUICK, runtime="python")
    assert result.device_class == f"cpu-{platform.machine()}-openvino"
    assert result.precision == cpu_inference_precision()
    assert [c.program for c in result.testcase] == ["obs", "step"]
    assert all(c.max_abs_error is not None for c in result.testcase)
    assert result.frames is not None and result.frames.frames == 16
    assert result.latency is not None and len(result.latency.samples_ms) == 5
    assert result.status == "ok", result.error  # tiny enough for fp32's tolerance even in bf16
    xnnpack = run_bundle(tiny_bundles["xnnpack"], rules=QUICK, runtime="python")
    assert xnnpack.precision is None  # XNNPACK computes in the bundle's own dtypes


def test_tampered_bundle_is_refused_by_hash(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = tmp_path / tiny_bundles["xnnpack"].name
    shutil.copytree(tiny_bundles["xnnpack"], bundle)
    pte = bundle / "programs" / "step.pte"
    data = bytearray(pte.read_bytes())
    data[len(data) // 2] ^= 0x01
    pte.write_bytes(bytes(data))

    out = tmp_path / "result.json"
    run = coverfarm("runner", "run-bundle", str(bundle), "--out", str(out), "--runtime", "python")
    assert run.returncode == 1, run.stderr
    result = DeviceResult.model_validate_json(out.read_text())
    assert result.status == "failed"
    assert result.error is not None and "refused" in result.error and bundle.name in result.error
    assert result.testcase == [] and result.latency is None  # nothing of it was loaded or run
    assert not result.torch_module_loaded


@pytest.mark.parametrize(
    ("npz", "key", "cause"),
    [
        ("references.npz", "3/action", "frames differ from the reference: action max abs error 0.25"),
        ("testcase.npz", "step/out/0", "test case outside tolerance (atol 0.001, rtol 0.001): step (max abs"),
    ],
    ids=["frames", "testcase"],
)
def test_wrong_outputs_fail_with_the_cause(
    tiny_bundles: dict[str, Path], tmp_path: Path, npz: str, key: str, cause: str
) -> None:
    bundle = tmp_path / "edited"
    shutil.copytree(tiny_bundles["xnnpack"], bundle)
    with np.load(bundle / npz) as data:
        arrays = {name: data[name] for name in data.files}
    arrays[key] = arrays[key] + 0.25
    np.savez(bundle / npz, **arrays)  # type: ignore[arg-type]
    result = run_bundle(rehomed(bundle, tmp_path), rules=QUICK, runtime="python")
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith(cause), result.error
    assert result.latency is not None  # a wrong cell still has its timings


def test_an_openvino_tolerance_failure_names_the_precision_it_ran_in(
    tiny_bundles: dict[str, Path], tmp_path: Path
) -> None:
    bundle = tmp_path / "edited"
    shutil.copytree(tiny_bundles["openvino"], bundle)
    with np.load(bundle / "testcase.npz") as data:
        arrays = {name: data[name] for name in data.files}
    arrays["obs/out/0"] = arrays["obs/out/0"] + 0.25
    np.savez(bundle / "testcase.npz", **arrays)  # type: ignore[arg-type]
    result = run_bundle(rehomed(bundle, tmp_path), rules=QUICK, runtime="python")
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("test case outside tolerance"), result.error
    assert result.error.endswith(f"; openvino computed in {result.precision}"), result.error


def test_vulkan_bundle_without_vulkan_runtime_fails_with_cause(tiny_bundles: dict[str, Path]) -> None:
    result = run_bundle(tiny_bundles["vulkan"], rules=QUICK, runtime="python")
    if "VulkanBackend" in registered_backends():  # a runtime built with Vulkan: it must simply work
        assert result.status == "ok", result.error
        return
    assert result.status == "failed"
    assert result.error is not None
    assert "program obs failed to load" in result.error  # obs is its only program
    assert "VulkanBackend is not registered in this ExecuTorch runtime" in result.error
    assert result.device_class is None


HOOK = """
import builtins, json, runpy, sys
importers = []
real_import = builtins.__import__
def hook(name, globals=None, locals=None, fromlist=(), level=0):
    if name == "torch" or name.startswith("torch."):
        importers.append(((globals or {}).get("__name__"), "torch" in sys.modules))
    return real_import(name, globals, locals, fromlist, level)
builtins.__import__ = hook
module, *args = json.loads(sys.argv[1])
sys.argv = [module, *args]
code = 0
try:
    runpy.run_module(module, run_name="__main__")
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "importers": importers}))
"""


def hooked(module: str, *args: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-c", HOOK, json.dumps([module, *args])], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return report


def test_runner_never_imports_torch_itself(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    """The pip wheel's runtime imports torch (its pybindings need it); the runner's code never does.
    ``run-bundle`` itself never loads the runtime: its replicas do, each in a fresh process."""
    out = tmp_path / "result.json"
    args = ["runner", "run-bundle", str(tiny_bundles["xnnpack"]), "--out", str(out), "--runtime", "python",
            "--min-chunks", "3", "--min-seconds", "0", "--replicas", "1"]  # fmt: skip
    report = hooked("coverfarm_cli", *args)
    assert report["code"] == 0 and report["importers"] == []
    result = DeviceResult.model_validate_json(out.read_text())
    assert result.status == "ok", result.error
    # What the pip wheel does to the replica's process is recorded, not hidden.
    assert result.torch_module_loaded and result.libtorch_mapped
    assert any(lib.startswith("libtorch") for lib in result.libtorch_libraries)

    bundle, rules = str(tiny_bundles["xnnpack"]), QUICK.model_dump_json()
    replica = hooked("gpu_runner.bundle_run", bundle, "--out", str(out), "--rules", rules)
    assert replica["code"] == 0
    mine = ("gpu_runner", "coverfarm", "coverfarm_cli")
    ours = [who for who, _ in replica["importers"] if who and who.split(".")[0] in mine]
    assert ours == []
    first = [who for who, loaded in replica["importers"] if not loaded]
    assert first and first[0].startswith("executorch."), first
