"""force_fp16: a Vulkan cell lowered with VulkanPartitioner({"force_fp16": True}) in the real lower stage
process, recorded in its options, and its bundle states fp16's device tolerance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coverfarm.result import FP16_TOLERANCE, Options, ResultDocument, StageResult, StageStatus
from coverfarm_cli import main
from worker.bundle.write import write_bundle
from worker.child.events import EventLog, read_events
from worker.trace.stage import write_trace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gpu_runner"))
from tinybundle import traced_policy  # noqa: E402


def lower(trace_dir: Path, out: Path, *flags: str) -> dict[str, dict[str, object]]:
    out.mkdir()
    events = out / "events.jsonl"
    subprocess.run(
        [sys.executable, "-m", "worker.lower.stage", "--trace-dir", str(trace_dir), "--backend", "vulkan",
         "--lowering", "fast", "--out", str(out), "--events", str(events), *flags],
        cwd=ROOT, check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return {event["event"]: event for event in read_events(events)}


def test_a_vulkan_cell_with_force_fp16_lowers_and_states_fp16_tolerance(tmp_path: Path) -> None:
    traced = traced_policy(two_programs=False)
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    log = EventLog(tmp_path / "trace.events.jsonl")
    trace = write_trace(traced, trace_dir, log, 2)
    log.close()
    fp16 = lower(trace_dir, tmp_path / "fp16", "--force-fp16")
    fp32 = lower(trace_dir, tmp_path / "fp32")
    for events in (fp16, fp32):
        assert "error" not in events, events.get("error")
        assert events["lowered"]["delegates"] == 1 and events["done"]["failed"] is False
    # The partitioner got the option: the same program compiles to a different Vulkan delegate.
    pte16, pte32 = Path(str(fp16["exported"]["pte"])), Path(str(fp32["exported"]["pte"]))
    assert pte16.read_bytes() != pte32.read_bytes()

    options = Options(force_fp16=True)
    ok = StageResult(status=StageStatus.OK)
    doc = ResultDocument(policy="tiny", backend="vulkan", options=options, trace=ok)
    bundle = Path(write_bundle(doc, trace, trace_dir, tmp_path / "fp16", tmp_path / "bundles").path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["options"]["force_fp16"] is True and manifest["precision"] == "fp16"
    assert manifest["tolerance"] == FP16_TOLERANCE
    # The kit's act figure (max abs error 3.1e-3 against eager fp32) passes it; fp32's 1e-3 would not.
    assert FP16_TOLERANCE["atol"] >= 3.1e-3 and trace["tolerance"]["atol"] < 3.1e-3


def test_force_fp16_on_another_backend_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--policy", "act", "--backend", "xnnpack", "--force-fp16"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "coverfarm: error: --force-fp16 is a Vulkan partitioner option; backend xnnpack has none"
