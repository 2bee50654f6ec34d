"""The trace stage's child process: build a policy, export its programs, compute eager references.

Run as ``python -m worker.stages.trace``. It writes a trace directory: one ``.pt2`` per program (saved with
``torch.export.save``, so anyone can re-check the numbers with plain ExecuTorch calls), the chunk plan,
16 deterministic frames with the eager-PyTorch action chunk of each, and the test case (each program's
inputs and eager outputs on frame 0). ``trace.json`` is written last: a directory without it is
incomplete.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worker.policies.base import Call, TracedPolicy
from worker.policies.registry import get_adapter
from worker.stages.events import EventLog

FRAMES = 16
TRACE_MANIFEST = "trace.json"


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: kept exactly as float32
        tensor = tensor.float()
    return tensor.contiguous().numpy()


def save_npz(path: Path, arrays: Mapping[str, torch.Tensor]) -> None:
    np.savez(path, **{name: to_numpy(t) for name, t in arrays.items()})  # type: ignore[arg-type]


def max_abs_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    return max((float((a[k].float() - b[k].float()).abs().max()) for k in a), default=0.0)


def write_trace(traced: TracedPolicy, out: Path, log: EventLog) -> dict[str, Any]:
    """Save programs, frames, references and the test case of a traced policy into ``out``."""
    programs = []
    runs = traced.plan.runs_per_chunk()
    for program in traced.programs:
        pt2 = f"{program.name}.pt2"
        torch.export.save(program.exported, out / pt2)
        programs.append(
            {
                "name": program.name,
                "pt2": pt2,
                "input_names": list(program.input_names),
                "output_names": list(program.output_names),
                "runs_per_chunk": runs.get(program.name, 0),
            }
        )
    log.emit("phase", phase="reference")
    start = time.monotonic()
    frames: dict[str, torch.Tensor] = {}
    references: dict[str, torch.Tensor] = {}
    record: list[tuple[Call, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = []
    with torch.no_grad():
        for i in range(FRAMES):
            frame = traced.make_frame(i)
            outputs = traced.plan.run(traced.eager, frame, record=record if i == 0 else None)
            frames.update({f"{i}/{k}": v for k, v in frame.items()})
            references.update({f"{i}/{k}": v for k, v in outputs.items()})
        frame0 = traced.make_frame(0)
        exported = {p.name: p.exported.module() for p in traced.programs}
        export_diff = max_abs_diff(
            traced.plan.run(exported, frame0), {k: references[f"0/{k}"] for k in traced.plan.outputs}
        )
        chunk_diff = None
        if traced.eager_chunk is not None:
            chunk = traced.eager_chunk(frame0)
            chunk_diff = max_abs_diff(chunk, {k: references[f"0/{k}"] for k in chunk})
    testcase: dict[str, torch.Tensor] = {}
    for call, call_inputs, call_outputs in record:
        if any(key.startswith(f"{call.program}/") for key in testcase):
            continue  # the first call of each program is its test case
        testcase.update({f"{call.program}/in/{j}": t for j, t in enumerate(call_inputs)})
        testcase.update({f"{call.program}/out/{j}": t for j, t in enumerate(call_outputs)})
    save_npz(out / "frames.npz", frames)
    save_npz(out / "references.npz", references)
    save_npz(out / "testcase.npz", testcase)
    save_npz(out / "constants.npz", dict(traced.plan.constants))
    plan = traced.plan
    return {
        "policy": traced.policy,
        "seed": traced.seed,
        "checkpoint": traced.checkpoint,
        "config": traced.config,
        "substitutions": traced.substitutions,
        "tolerance": {"rtol": traced.tolerance[0], "atol": traced.tolerance[1]},
        "programs": programs,
        "plan": {
            "frame_inputs": list(plan.frame_inputs),
            "calls": [
                {"program": c.program, "inputs": list(c.inputs), "outputs": list(c.outputs)}
                for c in plan.calls
            ],
            "outputs": list(plan.outputs),
            "constants": sorted(plan.constants),
        },
        "frames": FRAMES,
        "checks": {"exported_vs_eager_max_abs": export_diff, "plan_vs_policy_max_abs": chunk_diff},
        "reference_seconds": time.monotonic() - start,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.stages.trace")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--events", type=Path, required=True)
    args = parser.parse_args(argv)

    log = EventLog(args.events)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        log.emit("phase", phase="trace")
        start = time.monotonic()
        traced = get_adapter(args.policy)(seed=args.seed, checkpoint=args.checkpoint)
        log.emit("traced", seconds=time.monotonic() - start, programs=[p.name for p in traced.programs])
        manifest = write_trace(traced, args.out, log)
        manifest["trace_seconds"] = time.monotonic() - start
        (args.out / TRACE_MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
        log.emit("done", failed=False)
        return 0
    except Exception as error:
        log.emit(
            "error",
            type=f"{type(error).__module__}.{type(error).__qualname__}".removeprefix("builtins."),
            message=str(error),
            traceback=traceback.format_exc(),
        )
        log.emit("done", failed=True)
        return 1
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
