"""The numerics run end to end: each program run once more by a runtime that writes a real ETDump with its
intermediate outputs (the executorch wheel's pybindings with ``enable_etdump`` and a debug buffer: the
stand-in, ``wheel-etdump``), compared with eager's intermediates by ``executorch.devtools.Inspector``
from the bundle's ETRecords, naming the first op whose output departs.

The bundles (tinybundle.py, ``build_numerics``): ``portable``, a chain of ops lowered with no partitioner,
so the runtime logs every op's output; ``xnnpack``, the two-program bundle whose ``obs`` ends with a
CPU-left cumsum. Their ``altered`` variants run a program that computes one op differently from the eager
model their ETRecord and references come from (``Chain``'s ``* 2.0`` as ``* 2.5``; ``Obs``'s linear
weights × 1.5), so the op to name is known and any other answer fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from runnerhelp import ROOT
from standin_executor_runner import write_standin

from coverfarm.bundle_manifest import load_manifest
from coverfarm.device_result import DeviceFailure, DeviceResult, TimingRules
from coverfarm.digest import bundle_digest
from coverfarm.numerics import CPU, WHEEL_GRAIN, NumericsRun, growth, op_words
from gpu_runner.bundle_run import run_bundle
from gpu_runner.numerics import (
    DEBUG_BUFFER_ENV,
    MODES,
    capture_bundle,
    numerics_result,
    run_capture_process,
    trigger_of,
)
from gpu_runner.profiling import STAND_IN
from worker.profile.numerics import compare
from worker.repros.numerics import NotBuildable, OneOp, build_repros

XNNPACK = "XnnpackBackend"


@pytest.fixture(autouse=True)
def small_debug_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEBUG_BUFFER_ENV, "4")  # the tiny programs' intermediates take a few KB


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Path]:
    from tinybundle import build_numerics

    out = tmp_path_factory.mktemp("numerics")
    return {
        (lowering, altered): Path(build_numerics(out, lowering, altered))
        for lowering in ("portable", "xnnpack")
        for altered in (False, True)
    }


def captured(bundle: Path) -> NumericsRun:
    run = capture_bundle(bundle, STAND_IN, "requested", 120)
    assert run.status == "ok", run.error
    assert run.stand_in and run.kind == "numerics"
    assert all(d.kept and d.bytes > 0 and d.debug_bytes == 4 * 2**20 for d in run.dumps)
    return run


def test_portable_ops_are_compared_one_by_one_and_the_altered_op_is_named(
    bundles: dict[tuple[str, bool], Path],
) -> None:
    from tinybundle import chain_policy

    right = compare(captured(bundles["portable", False]), bundles["portable", False])
    assert [(op.op, op.where, op.span) for op in right.ops] == [
        ("aten.linear.default", CPU, 1),
        ("aten.relu.default", CPU, 1),
        ("aten.mul.Tensor", CPU, 1),
        ("aten.cumsum.default", CPU, 1),
        ("aten.linear.default", CPU, 1),
        ("aten.tanh.default", CPU, 1),
    ]
    assert right.first is None and all(op.max_abs_error < 1e-5 for op in right.ops)
    assert right.grain == WHEEL_GRAIN and right.reference_graph == "exported_program"

    wrong = compare(captured(bundles["portable", True]), bundles["portable", True])
    first = wrong.first
    assert first is not None
    assert (first.program, first.op, first.node, first.where) == ("obs", "aten.mul.Tensor", "mul", CPU)
    # its error is the alteration's: relu(linear(x)) × (2.5 − 2.0) on the test case's input
    policy = chain_policy()
    model, state = policy.eager["obs"], policy.make_frame(0)["observation.state"]
    with torch.no_grad():
        expected = float((torch.relu(model.a(state)) * 0.5).abs().max())
    assert first.max_abs_error == pytest.approx(expected, rel=1e-5) and first.max_abs_error > first.bound
    # before it nothing departs; after it every op does: the error carried down the graph
    departs = [(op.node, op.departs) for op in wrong.ops]
    assert departs == [
        ("linear", False), ("relu", False), ("mul", True), ("cumsum", True), ("linear_1", True),
        ("tanh", True),
    ]  # fmt: skip
    assert [op.node for op in growth(wrong)] == ["mul", "cumsum"]
    assert wrong.largest is not None and wrong.largest.node == "cumsum"
    # the one-op repro is built from the named node's description
    (example,) = first.examples
    assert example["op"] == "aten.mul.Tensor"
    assert example["args"][0] == {"kind": "tensor", "shape": [1, 8], "dtype": "float32", "source": "input"}
    assert op_words(first) == "aten.mul.Tensor (mul)"


def test_an_xnnpack_delegate_logs_its_outputs_only_and_its_ops_are_named_together(
    bundles: dict[tuple[str, bool], Path],
) -> None:
    """What the wheel's runtime captures of a delegated program: one output per delegate call (its ops
    compared together, as their last op's output), and each CPU-left op's own."""
    right = compare(captured(bundles["xnnpack", False]), bundles["xnnpack", False])
    assert [(op.program, op.op, op.where, op.span) for op in right.ops] == [
        ("obs", "aten.relu.default", XNNPACK, 2),  # linear, relu: one XNNPACK call
        ("obs", "aten.cumsum.default", CPU, 1),
        ("step", "aten.sub.Tensor", XNNPACK, 6),  # the whole step program: one XNNPACK call
    ]
    assert right.first is None

    wrong = compare(captured(bundles["xnnpack", True]), bundles["xnnpack", True])
    first = wrong.first
    assert first is not None
    assert (first.program, first.op, first.where, first.span, first.first_node) == (
        "obs", "aten.relu.default", XNNPACK, 2, "linear",
    )  # fmt: skip
    assert [e["op"] for e in first.examples] == ["aten.linear.default", "aten.relu.default"]
    assert op_words(first) == "aten.relu.default (2 ops linear … relu in one XnnpackBackend call)"
    # the CPU-left cumsum after it departs too; step ran on the test case's own inputs and does not
    assert [(op.program, op.departs) for op in wrong.ops] == [("obs", True), ("obs", True), ("step", False)]


def test_pairing_by_debug_handle_names_the_delegate_call_the_inspector_names(
    bundles: dict[tuple[str, bool], Path],
) -> None:
    """Where the Inspector cannot pair a capture (it raised on a Vulkan capture of diffusion's step), the
    CPU-kernel ops are paired with eager's by debug handle, and a delegate call's departure is seen at
    the CPU op that reads it: here the altered XNNPACK call (linear, relu), seen at the cumsum after it,
    the same call the Inspector's pairing names."""
    right = compare(captured(bundles["xnnpack", False]), bundles["xnnpack", False], pairing="handles")
    assert [(op.program, op.op, op.where) for op in right.ops] == [("obs", "aten.cumsum.default", CPU)]
    assert right.first is None and right.ops[0].max_abs_error < 1e-5
    assert right.pairing is not None and right.pairing.startswith("by debug handle")
    assert "obs (asked for)" in right.pairing and right.reference_graph == "edge_dialect_exported_program"

    wrong = compare(captured(bundles["xnnpack", True]), bundles["xnnpack", True], pairing="handles")
    first = wrong.first
    assert first is not None
    assert (first.program, first.op, first.where, first.span) == ("obs", "aten.relu.default", XNNPACK, 2)
    assert first.seen_at is not None and "cumsum" in first.seen_at
    assert [e["op"] for e in first.examples] == ["aten.linear.default", "aten.relu.default"]
    assert op_words(first).endswith(f"in one XnnpackBackend call, seen at {first.seen_at}, which reads it)")
    # the cumsum's own row follows, departing with the error it was handed
    assert [(op.op, op.departs) for op in wrong.ops] == [
        ("aten.relu.default", True), ("aten.cumsum.default", True),
    ]  # fmt: skip
    assert wrong.ops[1].max_abs_error == first.max_abs_error > first.bound
    assert compare(captured(bundles["xnnpack", True]), bundles["xnnpack", True]).pairing is None


def test_an_op_of_several_outputs_gets_a_one_op_repro_of_its_first() -> None:
    """native_group_norm returns its output, mean and rstd; its repro returns the output alone (the
    plan names one output per program), as eager's group norm computes it."""
    from executorch.exir import to_edge

    from worker.lower.metrics.example import describe

    model = torch.nn.GroupNorm(8, 32).eval()
    edge = to_edge(torch.export.export(model, (torch.randn(1, 32, 16),))).exported_program()
    (node,) = [n for n in edge.graph.nodes if "native_group_norm" in str(n.target)]
    repro = OneOp(describe(node, edge)).eval()
    (x,) = repro.examples(0)
    weight, bias = (getattr(repro, name) for name in ("c0", "c1"))
    out = repro(x)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 32, 16)
    torch.testing.assert_close(out, torch.nn.functional.group_norm(x, 8, weight, bias, model.eps))


def test_run_bundle_makes_a_numerics_run_after_a_wrong_output_apart_from_its_latency(
    bundles: dict[tuple[str, bool], Path], tmp_path: Path
) -> None:
    bundle = bundles["xnnpack", True]
    out = tmp_path / "result.json"
    args = [
        "runner", "run-bundle", str(bundle), "--out", str(out), "--unsigned", "--runtime", "python",
        "--profiling-executor-runner", STAND_IN,
        "--warmup", "1", "--min-chunks", "3", "--min-seconds", "0", "--min-sample-ms", "0", "--replicas", "1",
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 1, done.stderr[-2000:]  # the output is wrong
    result = DeviceResult.model_validate(json.loads(out.read_text()))
    assert result.failure is not None and result.failure.kind == "wrong_output"
    run = result.numerics
    assert run is not None and run.trigger == "wrong_output" and run.status == "ok", run.error
    assert run.summary is not None, run.summary_note
    first = run.summary.first
    assert first is not None and (first.program, first.op, first.where) == (
        "obs",
        "aten.relu.default",
        XNNPACK,
    )
    printed = json.loads(done.stdout)
    assert printed["numerics"].startswith("first departs: aten.relu.default (relu) of obs on XnnpackBackend")
    # the timed runs alone are the latency
    assert result.latency is not None and len(result.latency.samples_ms) == 3


def test_a_right_output_gets_a_numerics_run_only_when_asked(
    bundles: dict[tuple[str, bool], Path], tmp_path: Path
) -> None:
    bundle = bundles["portable", False]
    ok = DeviceResult(bundle_sha256=bundle.name, policy="tiny", backend="xnnpack", status="ok")
    wrong = ok.model_copy(
        update={"status": "failed", "failure": DeviceFailure(kind="wrong_output", cause="max abs error 0.2")}
    )
    refused = ok.model_copy(
        update={"status": "failed", "failure": DeviceFailure(kind="refused_at_load", cause="refused")}
    )
    assert [trigger_of(ok, mode) for mode in MODES] == [None, "requested", None]
    assert [trigger_of(wrong, mode) for mode in MODES] == ["wrong_output", "wrong_output", None]
    assert [trigger_of(refused, mode) for mode in MODES] == [None, None, None]  # nothing ran to capture
    assert numerics_result(ok, bundle, STAND_IN, 120, "auto").numerics is None
    assert numerics_result(ok, bundle, None, 120, "always").numerics is None  # no profiling runtime

    asked = numerics_result(ok, bundle, STAND_IN, 120, "always").numerics
    assert asked is not None and asked.trigger == "requested" and asked.summary is not None, asked
    assert asked.summary.first is None and len(asked.summary.ops) == 6

    base = ["runner", "run-bundle", str(bundle), "--unsigned", "--out", str(tmp_path / "r.json")]
    refusal = subprocess.run(
        [sys.executable, "-m", "coverfarm_cli", *base, "--numerics", "always"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refusal.returncode == 2 and not (tmp_path / "r.json").exists()
    assert "--numerics always needs a profiling runtime" in refusal.stderr


def test_a_debug_buffer_too_small_and_a_binary_that_cannot_capture_fail_with_their_cause(
    bundles: dict[tuple[str, bool], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEBUG_BUFFER_ENV, "0.00001")
    small = run_capture_process(bundles["portable", False], STAND_IN, "requested", 120)
    assert small.status == "failed" and small.error is not None
    assert "do not fit the debug buffer" in small.error and DEBUG_BUFFER_ENV in small.error

    tracer = write_standin(tmp_path / "traced", event_tracer=True)  # --etdump_path, no debug buffer
    refused = capture_bundle(bundles["portable", False], str(tracer), "requested", 60)
    assert refused.status == "failed" and refused.error is not None
    assert (
        "cannot capture intermediate outputs" in refused.error
        and "--dump_intermediate_outputs" in refused.error
    )


def test_the_named_op_s_one_op_repro_is_a_bundle_the_runner_runs(
    bundles: dict[tuple[str, bool], Path], tmp_path: Path
) -> None:
    """Built from the node the numerics run described: ``mul`` alone, at its shape, lowered for XNNPACK;
    on the wheel's right kernels its output matches eager (a wrong kernel would fail it)."""
    wrong = compare(captured(bundles["portable", True]), bundles["portable", True])
    assert wrong.first is not None
    (name, bundle), *rest = build_repros(wrong.first.examples, "xnnpack", tmp_path).items()
    assert rest == [] and name == "0-aten_mul_Tensor"
    manifest = load_manifest(bundle)
    assert [(t.shape, t.dtype) for t in manifest.programs[0].inputs] == [([1, 8], "float32")]
    rules = TimingRules(warmup=0, min_chunks=1, min_s=0, min_sample_ms=0, replicas=1)
    result = run_bundle(bundle, expected_sha256=bundle_digest(bundle), rules=rules, runtime="python")
    assert result.status == "ok", result.error
    assert result.testcase and all(c.passed for c in result.testcase)

    with pytest.raises(NotBuildable, match="not one a node description holds"):
        OneOp(
            {"op": "aten.mul.Tensor", "args": [{"kind": "expr", "value": "__import__('os')"}], "kwargs": {}}
        )


def test_a_native_runtime_with_the_debug_buffer_flags_names_the_same_op(
    bundles: dict[tuple[str, bool], Path], tmp_path: Path
) -> None:
    """The native path: one process per program with --etdump_path, --dump_intermediate_outputs,
    --debug_buffer_size and --debug_output_path (the stand-in executor_runner, through the wheel)."""
    binary = write_standin(tmp_path / "intermediate", intermediate_outputs=True)
    bundle = bundles["portable", True]
    run = capture_bundle(bundle, str(binary), "wrong_output", 120)
    assert run.status == "ok" and not run.stand_in and str(binary) in run.runtime, run.error
    first = compare(run, bundle).first
    assert first is not None and (first.op, first.node) == ("aten.mul.Tensor", "mul")
