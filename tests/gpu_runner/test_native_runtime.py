"""The native ``executor_runner`` runtime: its command line, the ``.bin`` files it reads and writes, the
log it prints, how its backends are found, and the runtime choice.

No executor_runner binary exists here (the executorch pip wheel ships none and this repo does not build
ExecuTorch), so the parts around the process are tested against ExecuTorch's real formats and real
ExecuTorch files, and the end-to-end run is skipped unless ``COVERFARM_EXECUTOR_RUNNER`` names a build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from runnerhelp import ROOT

from coverfarm.bundle_manifest import TensorSpec, load_manifest
from coverfarm.device_result import DeviceResult, TimingRules
from coverfarm_cli import main
from gpu_runner.bundle_run import run_bundle
from gpu_runner.native.binary import ENV_VAR, configured_path, describe_binary, scan_backends
from gpu_runner.native.command import runner_args
from gpu_runner.native.log import parse_log
from gpu_runner.native.tensor_io import decode, encode
from gpu_runner.native.timing import execution_ms
from gpu_runner.runtime import PythonRuntime, RuntimeFailure, registered_backends
from gpu_runner.runtime_choice import choose_runtime

# What executor_runner.cpp (ExecuTorch main) logs through the default POSIX PAL for
# ``--num_executions=3 --output_file=/tmp/out``: "%c %02u:%02u:%02u.%06lu executorch:%s:%zu] %s".
RECENT_LOG = """\
I 00:00:00.000512 executorch:executor_runner.cpp:318] Resetting threadpool with num threads = 2
I 00:00:00.001204 executorch:executor_runner.cpp:398] Loading inputs from input file(s).
I 00:00:00.002311 executorch:executor_runner.cpp:470] Model file /b/programs/forward.pte is loaded.
I 00:00:00.002322 executorch:executor_runner.cpp:479] Using method forward
I 00:00:00.002330 executorch:executor_runner.cpp:530] Setting up CPU planned buffer 0, size 7340032.
I 00:00:00.031001 executorch:executor_runner.cpp:600] Model loaded in 28.671000 ms.
I 00:00:00.145001 executorch:executor_runner.cpp:760] Iteration 1 of 3: 113.912000 ms
I 00:00:00.250001 executorch:executor_runner.cpp:760] Iteration 2 of 3: 104.870000 ms
I 00:00:00.355001 executorch:executor_runner.cpp:760] Iteration 3 of 3: 105.004000 ms
I 00:00:00.355101 executorch:executor_runner.cpp:770] Model executed successfully 3 time(s) in 323.786000 ms.
I 00:00:00.355111 executorch:executor_runner.cpp:777] 1 outputs:
I 00:00:00.355200 executorch:executor_runner.cpp:787] Writing output to file: /tmp/out-0.bin
"""
# Releases before per-execution logging print only the total (and no load time).
OLDER_LOG = """\
I 00:00:00.002311 executorch:executor_runner.cpp:250] Model file m.pte is loaded.
I 00:00:00.002330 executorch:executor_runner.cpp:291] Setting up planned buffer 0, size 64.
I 00:00:00.004001 executorch:executor_runner.cpp:330] Model executed successfully 4 time(s) in 2.500000 ms.
"""
FAILED_LOG = """\
I 00:00:00.002311 executorch:executor_runner.cpp:470] Model file obs.pte is loaded.
E 00:00:00.002901 executorch:method.cpp:85] Backend VulkanBackend is not registered.
F 00:00:00.002950 executorch:executor_runner.cpp:590] In function main(), assert failed (method.ok()): \
Loading of method forward failed with status 0x14
"""


def test_command_line() -> None:
    args = runner_args(
        Path("/opt/et/executor_runner"),
        Path("/b/programs/step.pte"),
        [Path("/w/in-0.bin"), Path("/w/in-1.bin")],
        executions=25,
        output_base=Path("/w/out"),
    )
    assert args == [
        "/opt/et/executor_runner",
        "--model_path=/b/programs/step.pte",
        "--num_executions=25",
        "--inputs=/w/in-0.bin,/w/in-1.bin",
        "--output_file=/w/out",
    ]
    bundled = runner_args(Path("r"), Path("m.bpte"), bundleio=(0.001, 0.0001))
    assert bundled[-2:] == ["--bundleio_rtol=0.001", "--bundleio_atol=0.0001"]
    with pytest.raises(RuntimeFailure, match="comma"):
        runner_args(Path("r"), Path("m.pte"), [Path("/a,b/in-0.bin")])


def test_the_bundle_bin_files_are_what_inputs_reads(tiny_bundles: dict[str, Path]) -> None:
    """The engine writes each program's test-case inputs as the bytes encode() hands executor_runner."""
    bundle = tiny_bundles["xnnpack"]
    manifest = load_manifest(bundle)
    with np.load(bundle / "testcase.npz") as testcase:
        for program in manifest.programs:
            for i, spec in enumerate(program.inputs):
                array = testcase[f"{program.name}/in/{i}"]
                raw = (bundle / "inputs" / program.name / f"{i}.bin").read_bytes()
                assert raw == encode(array, spec)
                assert len(raw) == int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
                np.testing.assert_array_equal(
                    decode(bundle / "inputs" / program.name / f"{i}.bin", spec), array
                )


def test_encode_and_decode_check_the_manifest(tmp_path: Path) -> None:
    spec = TensorSpec(name="x", dtype="float32", shape=[1, 8])
    with pytest.raises(
        RuntimeFailure, match=r"input x is float64\[1, 8\], the manifest says float32\[1, 8\]"
    ):
        encode(np.zeros((1, 8)), spec)
    with pytest.raises(RuntimeFailure, match=r"the manifest says float32\[1, 8\]"):
        encode(np.zeros((8,), dtype=np.float32), spec)
    values = np.arange(8, dtype=np.float32).reshape(1, 8)
    assert encode(values, spec) == np.arange(8, dtype="<f4").tobytes()  # little-endian, C order
    (tmp_path / "out-0.bin").write_bytes(b"\0" * 28)
    with pytest.raises(
        RuntimeFailure, match=r"output x \(out-0.bin\) has 28 bytes, float32\[1, 8\] needs 32"
    ):
        decode(tmp_path / "out-0.bin", spec)
    with pytest.raises(RuntimeFailure, match=r"wrote no out-1\.bin for output x"):
        decode(tmp_path / "out-1.bin", spec)


def test_outputs_as_executor_runner_writes_them(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    """executor_runner fwrite()s each output tensor's bytes to X-<i>.bin; decoding them by the
    manifest's specs gives back what the runtime computed."""
    bundle = tiny_bundles["xnnpack"]
    spec = next(p for p in load_manifest(bundle).programs if p.name == "step")
    runtime = PythonRuntime()
    program = runtime.load_program(spec, bundle / spec.pte, "xnnpack")
    with np.load(bundle / "testcase.npz") as testcase:
        outputs = program([testcase[f"step/in/{i}"] for i in range(len(spec.inputs))])
    for i, array in enumerate(outputs):
        (tmp_path / f"out-{i}.bin").write_bytes(array.tobytes())  # native order: what fwrite produces
    back = [decode(tmp_path / f"out-{i}.bin", s) for i, s in enumerate(spec.outputs)]
    for a, b in zip(back, outputs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_log_of_a_recent_runner() -> None:
    log = parse_log(RECENT_LOG)
    assert log.load_ms == pytest.approx(28.671)
    assert log.iteration_ms == pytest.approx([113.912, 104.870, 105.004])
    assert (log.executions, log.total_execute_ms) == (3, pytest.approx(323.786))
    assert log.errors == [] and log.not_registered == []


def test_log_of_an_older_runner() -> None:
    log = parse_log(OLDER_LOG)
    assert log.load_ms is None and log.iteration_ms == []
    assert (log.executions, log.total_execute_ms) == (4, pytest.approx(2.5))


def test_log_of_a_refused_program() -> None:
    log = parse_log(FAILED_LOG)
    assert log.not_registered == ["VulkanBackend"]
    assert log.errors == [
        "Backend VulkanBackend is not registered.",
        "In function main(), assert failed (method.ok()): Loading of method forward failed with status 0x14",
    ]
    bundleio = parse_log(
        "I 00:00:01.000000 executorch:executor_runner.cpp:900] TEST: BundleIO index[0] Test_result: PASS\n"
    )
    assert bundleio.bundleio_passed is True


def test_a_timed_execution_is_the_last_the_binary_logged() -> None:
    """One process per call: the warm-ups, then the timed execution, whose own logged time is the call's."""
    assert execution_ms("obs", parse_log(RECENT_LOG), 3) == (pytest.approx(105.004), True)
    older = parse_log(OLDER_LOG)  # only a total: the mean stands for it, and says so
    assert execution_ms("obs", older, 4) == (pytest.approx(2.5 / 4), False)
    with pytest.raises(RuntimeFailure, match="logged no execution time for obs"):
        execution_ms("obs", parse_log(FAILED_LOG), 1)


LOAD_VULKAN = """
import sys
from executorch.runtime import Runtime
try:
    Runtime.get().load_program(sys.argv[1]).load_method("forward")
except Exception as error:
    print("refused:", error)
"""


def test_log_parser_reads_what_executorch_itself_printed(tiny_bundles: dict[str, Path]) -> None:
    """The pip wheel's runtime logs through its own PAL ("[method.cpp:85] ..."): the same messages."""
    if "VulkanBackend" in registered_backends():
        pytest.skip("this runtime registers VulkanBackend: nothing is refused")
    pte = tiny_bundles["vulkan"] / "programs" / "obs.pte"
    run = subprocess.run(
        [sys.executable, "-c", LOAD_VULKAN, str(pte)], capture_output=True, text=True, timeout=300
    )
    assert "refused:" in run.stdout, run.stderr[-2000:]
    log = parse_log(run.stderr)
    assert log.not_registered == ["VulkanBackend"]
    assert "Backend VulkanBackend is not registered." in log.errors


def test_backend_scan_agrees_with_the_python_runtime_registry() -> None:
    """Scanning the pip wheel's pybindings (and the ExecuTorch libraries they load) for registration
    names finds exactly what executorch.runtime's backend_registry lists."""
    import executorch.extension.pybindings as pybindings

    (extension,) = Path(pybindings.__path__[0]).glob("_C.*.so")
    assert scan_backends(extension) == registered_backends()
    assert "VulkanBackend" not in scan_backends(extension)


def test_no_binary_is_none_configured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    info = describe_binary(configured_path())
    assert info.status.startswith("none configured") and info.registered_backends == []
    not_a_program = tmp_path / "executor_runner"
    not_a_program.write_text("")
    monkeypatch.setenv(ENV_VAR, str(not_a_program))
    info = describe_binary(configured_path())
    assert info.path == str(not_a_program) and info.status.endswith("is not executable")
    other = describe_binary(Path("/bin/true"))  # runs, but is no executor_runner: no classes from it
    assert other.status == "/bin/true is not an executor_runner: no --model_path flag"


def test_runtime_choice_without_a_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert isinstance(choose_runtime("auto", "vulkan"), PythonRuntime)
    assert isinstance(choose_runtime("python", "xnnpack"), PythonRuntime)
    with pytest.raises(RuntimeFailure, match=f"needs an executor_runner binary.*{ENV_VAR}"):
        choose_runtime("native", "xnnpack")
    with pytest.raises(RuntimeFailure, match="executor_runner /no/such/runner does not exist"):
        choose_runtime("auto", "xnnpack", Path("/no/such/runner"))


def test_python_runtime_run_says_which_and_how(
    tiny_bundles: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    rules = TimingRules(warmup=0, min_chunks=2, min_s=0.0, replicas=1)
    result = run_bundle(tiny_bundles["xnnpack"], rules=rules, runtime="python")
    assert result.status == "ok", result.error
    assert result.runtime == "python"
    assert result.latency is not None and result.latency.method is not None
    assert "executorch.runtime" in result.latency.method
    assert result.probe is not None and result.probe.native_runtime is not None
    assert result.probe.native_runtime.status.startswith("none configured")
    failed = run_bundle(tiny_bundles["xnnpack"], runtime="native")
    assert failed.status == "failed" and failed.error is not None and ENV_VAR in failed.error


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run-bundle", ".", "--out", "r.json", "--runtime", "native"], "--runtime native needs"),
        (["run-bundle", ".", "--out", "r.json", "--executor-runner", "/no/such/runner"], "--executor-runner"),
        (["probe", "--executor-runner", "/no/such/runner"], "--executor-runner: executor_runner /no/such"),
    ],
    ids=["native-without-binary", "missing-binary", "probe-missing-binary"],
)
def test_runtime_option_mistakes_are_one_line(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert main(["runner", *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"coverfarm: error: {expected}"), line


PROBE_WITHOUT_PYTHON_RUNTIME = """
import json, sys
from gpu_runner.probe import probe
report = probe(python_runtime=False)
print(json.dumps({"torch": "torch" in sys.modules, "report": report.model_dump(mode="json")}))
"""


def test_a_native_run_probes_without_loading_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    run = subprocess.run(
        [sys.executable, "-c", PROBE_WITHOUT_PYTHON_RUNTIME],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["torch"] is False
    assert doc["report"]["executorch"]["error"].startswith("not asked")
    assert doc["report"]["native_runtime"]["status"].startswith("none configured")


@pytest.mark.skipif(
    configured_path() is None,
    reason=f"no executor_runner: the executorch pip wheel ships none and this repo does not build "
    f"ExecuTorch; set {ENV_VAR} to a build of examples/portable/executor_runner to run it",
)
def test_native_runtime_end_to_end(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    args = ["runner", "run-bundle", str(tiny_bundles["xnnpack"]), "--out", str(out), "--runtime", "native"]
    run = subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args, "--min-chunks", "3", "--min-seconds", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = DeviceResult.model_validate_json(out.read_text())
    if "XnnpackBackend" not in scan_backends(configured_path() or Path()):
        assert result.status == "failed" and result.error and "XnnpackBackend" in result.error
        return
    assert run.returncode == 0 and result.status == "ok", result.error
    assert result.runtime == "native"
    assert [c.passed for c in result.testcase] == [True, True]
    assert result.frames is not None and result.frames.passed
    assert result.latency is not None and result.latency.method is not None
    assert "executor_runner" in result.latency.method
    assert not result.torch_module_loaded and not result.libtorch_mapped  # a torch-free process
