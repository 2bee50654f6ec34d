"""A bundle run replicated in fresh processes, judged as one measurement.

Each replica is ``python -m gpu_runner.bundle_run`` in a process of its own (its own program load and
warm-up), one after the other, all of them inside one hold of the host's timing lock
(``farmrun.hostlock``), so no stage slips in between two replicas. The result is the first replica's
checks with every replica's latency combined (``farmrun.stats.combine``): stable only when enough
replicas agree. A replica that fails makes the run fail with its cause; a replica whose process gives no
document fails the run with why.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from coverfarm.device_result import DeviceResult, TimingRules
from farmrun.stats import combine, mark_isolation

if TYPE_CHECKING:
    from farmrun.hostlock import HostLock


def run_replicated(
    bundle: Path,
    *,
    rules: TimingRules,
    expected_sha256: str | None = None,
    runtime: str = "auto",
    executor_runner: Path | None = None,
    lock: HostLock | None = None,
    lock_wait_s: float = 0.0,
    runner_id: int | None = None,
    timeout_s: float | None = None,
    server_mode: bool = True,
) -> DeviceResult:
    """``rules.replicas`` fresh-process runs of ``bundle`` inside one hold of ``lock`` (waiting at most
    ``lock_wait_s`` for it); ``timeout_s`` bounds each replica's process; ``server_mode=False``: one
    native process per call."""
    from farmrun.hostlock import held

    with held(lock, lock_wait_s) as isolation:
        result = _replicas(
            bundle, rules, expected_sha256, runtime, executor_runner, runner_id, timeout_s, server_mode
        )
    mark_isolation(result.latency, isolation)
    return result


def _replicas(
    bundle: Path,
    rules: TimingRules,
    expected_sha256: str | None,
    runtime: str,
    executor_runner: Path | None,
    runner_id: int | None,
    timeout_s: float | None,
    server_mode: bool = True,
) -> DeviceResult:
    results: list[DeviceResult] = []
    with tempfile.TemporaryDirectory(prefix="coverfarm-replicas.") as folder:
        for number in range(1, rules.replicas + 1):
            out = Path(folder) / f"replica-{number}.json"
            command = [
                sys.executable, "-m", "gpu_runner.bundle_run", str(bundle), "--out", str(out),
                "--rules", rules.model_dump_json(), "--runtime", runtime,
            ]  # fmt: skip
            if expected_sha256:
                command += ["--sha256", expected_sha256]
            if executor_runner is not None:
                command += ["--executor-runner", str(executor_runner)]
            if runner_id is not None:
                command += ["--runner-id", str(runner_id)]
            if not server_mode:
                command.append("--no-server-mode")
            failed = _replica(command, out, timeout_s, number)
            if isinstance(failed, str):
                base = results[0] if results else DeviceResult(bundle_sha256=expected_sha256 or bundle.name,
                                                                status="failed")  # fmt: skip
                return base.model_copy(update={"status": "failed", "error": failed})
            results.append(failed)
            if failed.status != "ok":
                break  # a wrong or broken bundle is not timed again
    return merge(results, rules)


def _replica(command: list[str], out: Path, timeout_s: float | None, number: int) -> DeviceResult | str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"replica {number} did not finish within {timeout_s:g} s"
    try:
        return DeviceResult.model_validate_json(out.read_text())
    except (OSError, ValidationError) as error:
        tail = " ".join(done.stderr.strip().splitlines()[-3:]) or str(error)
        return f"replica {number} exited with status {done.returncode} and gave no result: {tail}"


def merge(results: list[DeviceResult], rules: TimingRules) -> DeviceResult:
    """The first failed replica (else the first) with every replica's latency combined."""
    base = next((r for r in results if r.status != "ok"), results[0])
    timed = [r.latency for r in results if r.latency is not None]
    merged = base.model_copy(deep=True)
    if timed:
        merged.latency = combine(timed, rules)
    hosts = {r.host_id for r in results}
    if len(hosts) > 1:  # cannot happen on one host; said rather than assumed
        merged.host_id = None
    return merged
