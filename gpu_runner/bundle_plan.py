"""A bundle's plan: one frame's plan inputs from its frames and constants (``_frame_env``), and one action
chunk, the plan's calls in order (``run_plan``); what the bundle run, the profile run and the benchmarks
feed a bundle's programs with. Its arrays are read by ``coverfarm.bundle_manifest.read_npz``."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coverfarm.bundle_manifest import BundleError, Manifest, Plan, take_array
from gpu_runner import runtime

Programs = Mapping[str, runtime.Program]


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
    env = {name: take_array(constants, name, "constants.npz") for name in manifest.plan.constants}
    env.update({name: take_array(frames, f"{i}/{name}", "frames.npz") for name in manifest.plan.frame_inputs})
    return env
