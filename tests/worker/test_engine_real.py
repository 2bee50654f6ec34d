"""The engine end to end on real LeRobot policies with the real ExecuTorch partitioners: trace, metrics,
export, and a bundle that is written, verifiable by hash, and (for XNNPACK) runs on ExecuTorch's runtime."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from enginedocs import SESSION_OPTIONS, Analyzed
from small_checkpoints import SMALL_DIFFUSION, SMALL_DIFFUSION_FEATURES, save_small_checkpoint

from coverfarm import tracker
from coverfarm.result import Options, ResultDocument, StageStatus
from worker.bundle.write import bundle_digest, load_manifest
from worker.engine import analyze

pytestmark = pytest.mark.real_policy

# act's exact figures (random weights from seed 0, constant propagation on), pinned for the versions
# check_pinned_versions names, per backend: the tracker's row; ops on the backend, supported and in all;
# programs, connected groups and delegates; the blocker groups (op, reason, nodes, MACs). The heavy math
# (17,465,912,320 multiply-adds, all on the backend) is the same on both; the ops are not, since XNNPACK
# keeps some ops undecomposed through to_edge (aten.linear).
ACT_MACS = 17_465_912_320
ACT = {
    "vulkan": (
        ["act", "1549 / 1553 (100%)", "100%", "3", "✓"],  # the README's (the tracker's: 1556 / 1561)
        (1549, 1549, 1553),
        (3, 3, 3),
        [
            ("aten.cat.default", "op does not support high dim tensors", 2, 0),
            ("aten.cumsum.default", "no operator implementation", 2, 0),
        ],
    ),
    "xnnpack": (
        ["act", "909 / 1531 (59%)", "100%", "15", "✓"],
        (909, 909, 1531),
        (15, 13, 15),
        [
            ("aten.cumsum.default", "no operator implementation", 2, 0),
            ("aten.full.default", "no operator implementation", 2, 0),
            ("aten.full_like.default", "no operator implementation", 1, 0),
            ("aten.native_layer_norm.default", "no operator implementation", 12, 0),
            ("aten.select_copy.int", "no operator implementation", 1, 0),
            ("aten.slice_copy.Tensor", "constraints not met", 4, 0),
            ("aten.squeeze_copy.dims", "no operator implementation", 600, 0),
        ],
    ),
}


def check_bundle(doc: ResultDocument) -> dict[str, object]:
    assert doc.bundle is not None
    path = Path(doc.bundle.path)
    assert path.name == doc.bundle.sha256 == bundle_digest(path)
    manifest = load_manifest(path)
    assert manifest["policy"] == doc.policy and manifest["backend"] == doc.backend
    for program in manifest["programs"]:
        assert (path / program["pte"]).stat().st_size > 0
        for spec, raw in zip(program["inputs"], program["raw_inputs"], strict=True):
            expected = math.prod(spec["shape"]) * np.dtype(spec["dtype"]).itemsize
            assert (path / raw).stat().st_size == expected  # what executor_runner --inputs checks
    return manifest


def check_consistent(doc: ResultDocument) -> None:
    """Totals are the sums of the programs; the partition count is what lowering produced."""
    assert doc.trace.status is StageStatus.OK
    assert doc.partition.status is StageStatus.OK, doc.partition.error
    assert doc.export.status is StageStatus.OK, doc.export.error
    assert doc.ops.total == sum(p.ops or 0 for p in doc.program_list)
    assert doc.heavy_macs.total == sum((p.macs or 0) * p.runs_per_chunk for p in doc.program_list)
    assert doc.programs.count == doc.programs.delegates
    assert doc.ops.on_backend is not None and doc.ops.supported is not None
    assert doc.ops.on_backend <= doc.ops.supported <= doc.ops.total
    left = sum(b.count for b in doc.blockers)
    assert left == doc.ops.total - doc.ops.on_backend
    for program in doc.program_list:
        assert program.pt2 is not None and Path(program.pt2).exists()
    assert ResultDocument.model_validate_json(doc.model_dump_json()) == doc


@pytest.fixture(scope="module")
def act_vulkan(analyzed: Analyzed) -> dict[str, ResultDocument]:
    """act lowered for Vulkan with the stock partitioner and with the exact fast one (+ pattern cache)."""
    return {
        lowering: analyzed("act", "vulkan", SESSION_OPTIONS.model_copy(update={"lowering": lowering}))
        for lowering in ("stock", "fast")
    }


def test_fast_lowering_gives_act_the_same_numbers_and_byte_identical_programs(
    act_vulkan: dict[str, ResultDocument],
) -> None:
    stock, fast = act_vulkan["stock"], act_vulkan["fast"]
    fields = ("ops", "heavy_macs", "programs", "blockers")
    assert [getattr(stock, f) for f in fields] == [getattr(fast, f) for f in fields]
    for a, b in zip(stock.program_list, fast.program_list, strict=True):
        assert a.pte is not None and b.pte is not None
        assert Path(a.pte).read_bytes() == Path(b.pte).read_bytes()
    assert stock.bundle is not None and fast.bundle is not None
    # the bundles differ only in the manifest's record of the options used
    assert stock.bundle.sha256 != fast.bundle.sha256


def check_pinned_versions(doc: ResultDocument) -> None:
    """The exact figures below are those of the versions requirements/lock.txt pins: a new torch or
    ExecuTorch may change them, and then they are measured again and pinned anew."""
    pinned = {"torch": "2.14.1", "executorch": "1.5.1", "lerobot": "0.6.1"}
    assert {name: doc.versions.get(name) for name in pinned} == pinned


def check_act_figures(doc: ResultDocument) -> None:
    """act's exact row on ``doc``'s backend (``ACT``); the measured figures are printed first
    (``pytest -s``), so that a failure shows the whole row."""
    check_pinned_versions(doc)
    assert doc.options.constant_prop is True
    measured = (
        tracker.row(doc),
        (doc.ops.on_backend, doc.ops.supported, doc.ops.total),
        (doc.programs.count, doc.programs.connected_groups, doc.programs.delegates),
        sorted((b.op, b.reason, b.count, b.macs) for b in doc.blockers),
    )
    print(f"\nact on {doc.backend}: {measured}, heavy math {doc.heavy_macs.model_dump()}")
    assert measured == ACT[doc.backend]
    assert doc.heavy_macs.on_backend == doc.heavy_macs.supported == doc.heavy_macs.total == ACT_MACS


def test_act_on_vulkan(act_vulkan: dict[str, ResultDocument]) -> None:
    doc = act_vulkan["fast"]
    check_consistent(doc)
    assert [p.name for p in doc.program_list] == ["forward"]
    assert doc.program_list[0].runs_per_chunk == 1
    check_act_figures(doc)
    manifest = check_bundle(doc)
    assert manifest["plan"]["calls"][0]["program"] == "forward"


def test_act_on_xnnpack_bundle_runs_on_the_executorch_runtime(analyzed: Analyzed) -> None:
    from executorch.runtime import Runtime

    doc = analyzed("act", "xnnpack", SESSION_OPTIONS)
    check_consistent(doc)
    check_act_figures(doc)
    manifest = check_bundle(doc)
    assert doc.bundle is not None
    bundle = Path(doc.bundle.path)
    testcase = np.load(bundle / "testcase.npz")
    tolerance = manifest["tolerance"]
    runtime = Runtime.get()
    for program in manifest["programs"]:
        method = runtime.load_program(bundle / program["pte"]).load_method("forward")
        name = program["name"]
        inputs = [torch.from_numpy(testcase[f"{name}/in/{i}"]) for i in range(len(program["inputs"]))]
        outputs = method.execute(inputs)
        for i, out in enumerate(outputs):
            torch.testing.assert_close(
                out,
                torch.from_numpy(testcase[f"{name}/out/{i}"]),
                rtol=tolerance["rtol"],
                atol=tolerance["atol"],
            )


def test_denoising_policy_on_vulkan_weights_the_step_program_by_its_runs(
    trace_cache: Path, tmp_path: Path
) -> None:
    # A small diffusion checkpoint (4 DDPM steps, a two-level U-Net): the subject is the weighting of the
    # step program by its runs, which the policy's size does not change. The options ask for two reference
    # frames; the frame count (one, below) is recorded in the trace and the bundle's manifest.
    checkpoint = save_small_checkpoint(
        tmp_path / "diffusion", "diffusion", SMALL_DIFFUSION_FEATURES, **SMALL_DIFFUSION
    )
    options = Options(frames=2, checkpoint=str(checkpoint))
    doc = analyze("diffusion", "vulkan", options, tmp_path / "out", trace_cache=trace_cache)
    check_consistent(doc)
    runs = {p.name: p.runs_per_chunk for p in doc.program_list}
    assert runs == {"observation": 1, "denoise_step": 4}
    step = next(p for p in doc.program_list if p.name == "denoise_step")
    assert step.macs is not None and doc.heavy_macs.total is not None
    assert doc.heavy_macs.total > 4 * step.macs  # the step's math counts once per denoising step
    # diffusion stacks two observations per input: frame 0 is its only reference frame, however many
    # frames the options ask for (the tracker compares 16 only for policies without a frame history)
    assert doc.trace_info is not None and doc.trace_info.frame_history
    assert doc.trace_info.frames == doc.trace_info.frames_wanted == 1
    assert doc.trace_info.substitutions, "the scheduler update inside the step program is recorded"
    manifest = check_bundle(doc)
    assert manifest["frames"] == 1
    assert [c["program"] for c in manifest["plan"]["calls"]].count("denoise_step") == 4
    # The step's test case is its middle call (DDPM's 4 of 100 steps: t = 75, 50, 25, 0; the third),
    # where its output depends on the network's; at t = 75 the clipped update all but fixes it.
    assert doc.bundle is not None
    testcase = np.load(Path(doc.bundle.path) / "testcase.npz")
    assert testcase["denoise_step/in/2"].tolist() == [25]  # the step's inputs: cond, x, t, noise
