"""Reading a profile: the op a CPU-left event ran, and a native ETDump recorded on a device host read
again (tests/worker/profile/recorded/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from coverfarm.bundle_manifest import Manifest
from coverfarm.profile import ProfileRun
from worker.profile.summarize import op_name, summarize

RECORDED = Path(__file__).resolve().parent / "recorded"
SOFTPLUS = ["aten.exp.default", "aten.log1p.default", "aten.gt.Scalar", "aten.where.self"]


@pytest.mark.parametrize(
    ("op_types", "kernel", "named"),
    [
        (SOFTPLUS, "log1p.out", "aten.log1p.default"),
        (SOFTPLUS, "where.self_out", "aten.where.self"),
        (SOFTPLUS, "gt.Scalar_out", "aten.gt.Scalar"),
        (["dim_order_ops._to_dim_order_copy.default"], "_to_dim_order_copy.out",
         "dim_order_ops._to_dim_order_copy.default"),
        (["aten.cumsum.default"], "cumsum.out", "aten.cumsum.default"),
        (["aten.mul.Tensor", "aten.add.Tensor"], "sigmoid.out", "aten.mul.Tensor"),
        ([], "elu.out", "elu.out"),
        ([], None, "unknown op"),
    ],
)  # fmt: skip
def test_a_cpu_left_event_is_named_by_the_op_its_kernel_runs(
    op_types: list[str], kernel: str | None, named: str
) -> None:
    assert op_name(op_types, kernel) == named


def test_a_recorded_native_etdump_reads_again_into_the_recorded_split() -> None:
    with gzip.open(RECORDED / "h100-tdmpc-xnnpack-native.profile.json.gz", "rt") as recorded:
        run = ProfileRun.model_validate(json.load(recorded))
    manifest_text = (RECORDED / "h100-tdmpc-xnnpack.manifest.json").read_text()
    manifest = Manifest.model_validate(json.loads(manifest_text))
    assert run.summary is not None and run.summary.op_names_from == "etrecord"
    assert not run.stand_in and run.runtime.startswith("profiling executor_runner")
    # without the ETRecord (not kept): the same events, named by their kernels
    without = manifest.model_copy(
        update={"programs": [p.model_copy(update={"etrecord": None}) for p in manifest.programs]}
    )
    again = summarize(run, RECORDED / "no-such-bundle", without)
    assert again.op_names_from == "etdump"
    for figure in ("execute_ms", "delegate_ms", "cpu_ops_ms", "runtime_ms", "cpu_share"):
        assert getattr(again, figure) == pytest.approx(getattr(run.summary, figure)), figure
    assert [(d.backend, d.calls) for d in again.delegates] == [("XnnpackBackend", 292)]
    # the portable kernels, one thread each, take most of the execution
    assert again.cpu_share is not None and again.cpu_share > 0.9
    # the ETRecord names the kernels' ops: log1p, not the exp (taken by XNNPACK) it was decomposed with
    kernels = {op.name: op.ms for op in again.top_ops if op.where == "cpu"}
    named = {op.name: op.ms for op in run.summary.top_ops if op.where == "cpu"}
    pairs = [
        ("log1p.out", "aten.log1p.default"),
        ("elu.out", "aten.elu.default"),
        ("where.self_out", "aten.where.self"),
        ("gt.Scalar_out", "aten.gt.Scalar"),
    ]
    for kernel, op in pairs:
        assert kernels[kernel] == pytest.approx(named[op]), op
    assert "aten.exp.default" not in named
