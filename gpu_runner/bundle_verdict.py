"""Whether a bundle run's outputs are right, in one cause (the cell's ❌): the test case, then the frames,
then the timed executions' stability over every replica (``unstable_outputs``); the failure it makes,
with the worst program and error (``_wrong_output``)."""

from __future__ import annotations

from coverfarm.device_result import DeviceFailure, DeviceResult, LatencyStats


def _wrong_output(result: DeviceResult, cause: str) -> DeviceFailure:
    worst_case = max(
        (c for c in result.testcase if not c.passed and c.max_abs_error is not None),
        key=lambda c: c.max_abs_error or 0.0,
        default=None,
    )
    frames = [o for o in (result.frames.outputs if result.frames else []) if not o.passed]
    worst_frame = max(frames, key=lambda o: o.max_abs_error, default=None)
    return DeviceFailure(
        kind="wrong_output",
        cause=cause,
        program=worst_case.program if worst_case else None,
        max_abs_error=(
            worst_case.max_abs_error if worst_case else (worst_frame.max_abs_error if worst_frame else None)
        ),
        min_sqnr_db=worst_frame.min_sqnr_db if worst_frame else None,
    )


def _verdict(result: DeviceResult, atol: float, rtol: float) -> str | None:
    """Why the outputs are wrong (the cell's ❌ cause), or None when they are right. Where the runtime
    chose its own precision (``result.precision``), a tolerance failure says which it computed in."""
    chosen = f"; {result.backend} computed in {result.precision}" if result.precision else ""
    wrong = [
        f"{c.program} ({c.error or f'max abs error {c.max_abs_error:.3g}'})"
        for c in result.testcase
        if not c.passed
    ]
    if wrong:
        return f"test case outside tolerance (atol {atol:g}, rtol {rtol:g}): {', '.join(wrong)}{chosen}"
    if result.frames and not result.frames.passed:
        worst = max((o for o in result.frames.outputs if not o.passed), key=lambda o: o.max_abs_error)
        return (
            f"frames differ from the reference: {worst.name} max abs error {worst.max_abs_error:.3g}{chosen}"
        )
    return unstable_outputs(result.latency)


def unstable_outputs(latency: LatencyStats | None) -> str | None:
    """``output not stable: k of N executions differ`` over every replica's timed executions; None when
    every compared execution matched its reference."""
    checked = [r.outputs for r in (latency.replicas if latency else []) if r.outputs is not None]
    differing = sum(o.differing for o in checked)
    if not differing:
        return None
    executions = sum(o.executions for o in checked)
    first = next(o.first for o in checked if o.differing)
    return f"output not stable: {differing} of {executions} executions differ ({first})"
