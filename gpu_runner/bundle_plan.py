"""A bundle's arrays and its plan: reading its ``.npz`` files (``_npz``, ``_take``), one frame's plan
inputs from its frames and constants (``_frame_env``), and one action chunk, the plan's calls in order
(``run_plan``); what the bundle run, the profile run and the benchmarks feed a bundle's programs with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coverfarm.bundle_manifest import BundleError, Manifest, Plan
from gpu_runner import runtime

Programs = Mapping[str, runtime.Program]


def _npz(bundle: Path, name: str) -> dict[str, np.ndarray]:
    try:
        with np.load(bundle / name, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as error:
        raise BundleError(f"{name} of the bundle is unreadable: {error}") from None


def _take(arrays: Mapping[str, np.ndarray], key: str, name: str) -> np.ndarray:
    if key not in arrays:
        raise BundleError(f"{name} of the bundle lacks {key}")
    return arrays[key]


def run_plan(plan: Plan, programs: Programs, env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One action chunk: the plan's calls in order, each fed its inputs by name from what came before."""
    values = dict(env)
    for call in plan.calls:
        missing = [name for name in call.inputs if name not in values]
        if missing:
            raise BundleError(f"the plan feeds {call.program} with {missing}, which nothing produced")
        inputs = [values[name] for name in call.inputs]
        outputs = programs[call.program](inputs)
        if len(outputs) != len(call.outputs):
            raise runtime.RuntimeFailure(
                f"program {call.program} returned {len(outputs)} outputs, the plan names {len(call.outputs)}"
            )
        values.update(zip(call.outputs, outputs, strict=True))
    return {name: values[name] for name in plan.outputs}


def _frame_env(
    manifest: Manifest, frames: Mapping[str, np.ndarray], constants: Mapping[str, np.ndarray], i: int
) -> dict[str, np.ndarray]:
    env = {name: _take(constants, name, "constants.npz") for name in manifest.plan.constants}
    env.update({name: _take(frames, f"{i}/{name}", "frames.npz") for name in manifest.plan.frame_inputs})
    return env
