"""A bundle's outputs against its references: the test case replayed program by program
(``replay_testcase``), the plan on every frame (``check_frames``, with each output's max abs error and
SQNR), and each timed chunk's outputs against the reference of its frame (``OutputChecker``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from coverfarm.bundle_manifest import Manifest, read_npz, take_array
from coverfarm.device_result import FramesCheck, OutputCheck, OutputStability, ProgramCheck
from gpu_runner import runtime
from gpu_runner.bundle_plan import Programs, _frame_env, run_plan


def _same_shape(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    if actual.shape != expected.shape:
        raise runtime.RuntimeFailure(
            f"{what} has shape {list(actual.shape)}, the reference {list(expected.shape)}"
        )


def _max_abs(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.size == 0:
        return 0.0
    return float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> bool:
    return bool(np.allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol))


def sqnr_db(actual: np.ndarray, expected: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio of ``actual`` against ``expected``; None when identical."""
    signal = float(np.sum(np.square(expected.astype(np.float64))))
    noise = float(np.sum(np.square(actual.astype(np.float64) - expected.astype(np.float64))))
    if noise == 0.0:
        return None
    return float(10 * np.log10(max(signal, float(np.finfo(np.float64).tiny)) / noise))


def replay_testcase(bundle: Path, manifest: Manifest, programs: Programs) -> list[ProgramCheck]:
    testcase = read_npz(bundle, "testcase.npz")
    rtol, atol = manifest.tolerance.rtol, manifest.tolerance.atol
    checks = []
    for spec in manifest.programs:
        inputs = [
            take_array(testcase, f"{spec.name}/in/{i}", "testcase.npz") for i in range(len(spec.inputs))
        ]
        expected = [
            take_array(testcase, f"{spec.name}/out/{i}", "testcase.npz") for i in range(len(spec.outputs))
        ]
        outputs = programs[spec.name](inputs)
        if len(outputs) != len(expected):
            checks.append(
                ProgramCheck(
                    program=spec.name,
                    passed=False,
                    error=f"returned {len(outputs)} outputs, the manifest names {len(expected)}",
                )
            )
            continue
        for i, (a, e) in enumerate(zip(outputs, expected, strict=True)):
            _same_shape(f"output {i} of {spec.name}", a, e)
        checks.append(
            ProgramCheck(
                program=spec.name,
                max_abs_error=max(
                    (_max_abs(a, e) for a, e in zip(outputs, expected, strict=True)), default=0.0
                ),
                passed=all(_close(a, e, rtol, atol) for a, e in zip(outputs, expected, strict=True)),
            )
        )
    return checks


def check_frames(bundle: Path, manifest: Manifest, programs: Programs) -> FramesCheck:
    frames, references = read_npz(bundle, "frames.npz"), read_npz(bundle, "references.npz")
    constants = read_npz(bundle, "constants.npz")
    rtol, atol = manifest.tolerance.rtol, manifest.tolerance.atol
    worst: dict[str, float] = dict.fromkeys(manifest.plan.outputs, 0.0)
    sqnr: dict[str, float | None] = dict.fromkeys(manifest.plan.outputs)
    passed = dict.fromkeys(manifest.plan.outputs, True)
    for i in range(manifest.frames):
        outputs = run_plan(manifest.plan, programs, _frame_env(manifest, frames, constants, i))
        for name, actual in outputs.items():
            expected = take_array(references, f"{i}/{name}", "references.npz")
            _same_shape(f"output {name} of frame {i}", actual, expected)
            worst[name] = max(worst[name], _max_abs(actual, expected))
            db = sqnr_db(actual, expected)
            if db is not None:
                previous = sqnr[name]
                sqnr[name] = db if previous is None else min(previous, db)
            passed[name] = passed[name] and _close(actual, expected, rtol, atol)
    outputs_checked = [
        OutputCheck(name=n, max_abs_error=worst[n], min_sqnr_db=sqnr[n], passed=passed[n])
        for n in manifest.plan.outputs
    ]
    return FramesCheck(frames=manifest.frames, outputs=outputs_checked, passed=all(passed.values()))


class OutputChecker:
    """``ChunkWork.check``: each timed chunk's plan outputs against the reference of its frame."""

    def __init__(self, manifest: Manifest, references: Mapping[str, np.ndarray], frames: int) -> None:
        self.manifest, self.references, self.frames = manifest, references, frames
        self.executions = self.differing = 0
        self.first: str | None = None

    def __call__(self, index: int, outputs: Mapping[str, np.ndarray]) -> None:
        frame = index % self.frames
        rtol, atol = self.manifest.tolerance.rtol, self.manifest.tolerance.atol
        self.executions += 1
        for name in self.manifest.plan.outputs:
            expected = take_array(self.references, f"{frame}/{name}", "references.npz")
            actual = outputs.get(name)
            if actual is None or actual.shape != expected.shape or not _close(actual, expected, rtol, atol):
                self.differing += 1
                if self.first is None:
                    error = (
                        "missing or misshapen"
                        if actual is None or actual.shape != expected.shape
                        else (f"max abs error {_max_abs(actual, expected):.3g}")
                    )
                    self.first = f"timed chunk {self.executions} on frame {frame}: {name} {error}"
                return

    def stability(self) -> OutputStability:
        return OutputStability(executions=self.executions, differing=self.differing, first=self.first)
