"""The trace stage's child process: build a policy, export its programs, compute eager references.

Run as ``python -m worker.trace.stage``. It writes a trace directory: one ``.pt2`` per program (saved with
``torch.export.save``, so anyone can re-check the numbers with plain ExecuTorch calls), the chunk plan,
16 deterministic frames with the eager-PyTorch action chunk of each (frame 0 alone for a policy that
stacks a history of observations), and the test case (each program's inputs and eager outputs on frame
0). ``trace.json`` is written last: a directory without it is
incomplete.

With ``--weights fake`` the policy is built and exported under a fake tensor mode
(``worker.trace.fake_weights``): the programs are saved with meta tensors for weights, and there are no
frames, test case or references, which need values.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from worker.child.events import EventLog, error_fields
from worker.fake_programs import to_meta
from worker.trace.fake_weights import building_fake
from worker.trace.policies.base import Call, TracedPolicy
from worker.trace.policies.registry import get_adapter

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


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    staging = out / f".{TRACE_MANIFEST}"
    staging.write_text(json.dumps(manifest, indent=2, default=str))
    staging.replace(out / TRACE_MANIFEST)  # atomic: a reader never sees half a manifest


def parameter_bytes(traced: TracedPolicy) -> int:
    """Bytes of the storage behind the programs' weights and constants, each storage counted once: the
    programs of one policy share its parameters whatever each program calls them (``model.x`` in one,
    ``owner.model.x`` in another), and tied weights (an LM head tied to the embedding) share one storage.
    Fake tensors have storage objects too, so the count is the same with fake weights."""
    sizes: dict[int, int] = {}
    for program in traced.programs:
        for table in (program.exported.state_dict, program.exported.constants):
            for value in table.values():
                if isinstance(value, torch.Tensor):
                    storage = value.untyped_storage()
                    sizes[StorageWeakRef(storage).cdata] = storage.nbytes()
    return sum(sizes.values())


def history_steps(traced: TracedPolicy) -> int:
    """How many observations the policy stacks per input (its config's ``n_obs_steps``; 1 without)."""
    steps = traced.config.get("n_obs_steps")
    return steps if isinstance(steps, int) and steps > 0 else 1


def write_trace(
    traced: TracedPolicy, out: Path, log: EventLog, frames_wanted: int, fake: bool = False
) -> dict[str, Any]:
    """Save programs, the test case and frames with their eager references into ``out``.

    The manifest is written as soon as the programs and the test case (frame 0) exist, so the lower
    stage can start from it, then rewritten after each further frame: eager references of a big
    denoiser cost minutes per frame, and a reference phase that runs out of time leaves the frames it
    finished (the manifest says how many) instead of nothing.

    A policy that stacks a history of observations (``n_obs_steps`` over 1 in its config: diffusion,
    vqbet, multi_task_dit) gets frame 0 alone: its test case is what the tracker compares, since a run of
    independent frames is not an input such a policy ever sees. The manifest says so (``frame_history``).
    """
    frame_history = history_steps(traced) > 1
    if frame_history:
        frames_wanted = min(frames_wanted, 1)
    programs = []
    runs = traced.plan.runs_per_chunk()
    weight_bytes = parameter_bytes(traced)
    for program in traced.programs:
        pt2 = f"{program.name}.pt2"
        torch.export.save(to_meta(program.exported) if fake else program.exported, out / pt2)
        programs.append(
            {
                "name": program.name,
                "pt2": pt2,
                "input_names": list(program.input_names),
                "output_names": list(program.output_names),
                "runs_per_chunk": runs.get(program.name, 0),
            }
        )
    plan = traced.plan
    if not fake:
        save_npz(out / "constants.npz", dict(plan.constants))
    manifest: dict[str, Any] = {
        "policy": traced.policy,
        "weights": "fake" if fake else "real",
        "parameter_bytes": weight_bytes,
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
        "frames": 0,
        "frames_wanted": frames_wanted,
        "frame_history": frame_history,
        "checks": {},
    }
    if fake:  # eager references need values
        _write_manifest(out, manifest)
        return manifest
    frames: dict[str, torch.Tensor] = {}
    references: dict[str, torch.Tensor] = {}
    start = time.monotonic()
    with torch.no_grad():
        for i in range(frames_wanted):
            record: list[tuple[Call, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = []
            frame = traced.make_frame(i)
            outputs = plan.run(traced.eager, frame, record=record)
            frames.update({f"{i}/{k}": v for k, v in frame.items()})
            references.update({f"{i}/{k}": v for k, v in outputs.items()})
            if i == 0:
                save_npz(out / "testcase.npz", _testcase(record))
            save_npz(out / "frames.npz", frames)
            save_npz(out / "references.npz", references)
            manifest["frames"] = i + 1
            manifest["reference_seconds"] = time.monotonic() - start
            _write_manifest(out, manifest)
            log.emit("frame", index=i, seconds=time.monotonic() - start)
            if i == 0:
                log.emit("phase", phase="reference")
                manifest["checks"] = _checks(traced, frame, {k: references[f"0/{k}"] for k in plan.outputs})
                _write_manifest(out, manifest)
    return manifest


def _testcase(
    record: list[tuple[Call, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]],
) -> dict[str, torch.Tensor]:
    """Each program's inputs and outputs at its middle call in frame 0 (its only call, for most).

    The middle, not the first: a denoiser's step is called once per step, and at the first (t = 99 of
    100) a DDPM update clips the predicted clean sample (``clip_sample``), so the step's output hardly
    depends on the network's and a wrong network would still pass. Halfway down the schedule it does."""
    calls: dict[str, list[tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]]] = {}
    for call, call_inputs, call_outputs in record:
        calls.setdefault(call.program, []).append((call_inputs, call_outputs))
    testcase: dict[str, torch.Tensor] = {}
    for program, program_calls in calls.items():
        call_inputs, call_outputs = program_calls[len(program_calls) // 2]
        testcase.update({f"{program}/in/{j}": t for j, t in enumerate(call_inputs)})
        testcase.update({f"{program}/out/{j}": t for j, t in enumerate(call_outputs)})
    return testcase


def _checks(
    traced: TracedPolicy, frame0: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]
) -> dict[str, float | None]:
    """The exported programs against eager on frame 0, and the plan against the policy's own API."""
    exported = {p.name: p.exported.module() for p in traced.programs}
    checks: dict[str, float | None] = {
        "exported_vs_eager_max_abs": max_abs_diff(traced.plan.run(exported, frame0), reference),
        "plan_vs_policy_max_abs": None,
    }
    if traced.eager_chunk is not None:
        chunk = traced.eager_chunk(frame0)
        checks["plan_vs_policy_max_abs"] = max_abs_diff(chunk, {k: reference[k] for k in chunk})
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.trace.stage")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--frames", type=int, default=FRAMES)
    parser.add_argument("--weights", choices=["real", "fake"], default="real")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--events", type=Path, required=True)
    args = parser.parse_args(argv)
    fake = args.weights == "fake"

    log = EventLog(args.events)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        log.emit("phase", phase="trace")
        start = time.monotonic()
        with building_fake() if fake else contextlib.nullcontext():
            traced = get_adapter(args.policy)(seed=args.seed, checkpoint=args.checkpoint)
        log.emit(
            "traced",
            seconds=time.monotonic() - start,
            programs=[p.name for p in traced.programs],
            parameter_bytes=parameter_bytes(traced),
        )
        write_trace(traced, args.out, log, args.frames, fake=fake)
        log.emit("done", failed=False)
        return 0
    except Exception as error:
        log.emit("error", **error_fields(error))
        log.emit("done", failed=True)
        return 1
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
