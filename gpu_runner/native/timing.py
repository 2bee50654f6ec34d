"""Timing one process per call: each call of a timed chunk is one ``executor_runner`` process with
``--num_executions`` of the warm-ups and one timed execution, whose time is the binary's own logged one
(``execution_ms``), never the wall clock of processes; summed over a chunk's calls (``PerCallTiming``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_runner.native.log import RunnerLog
from gpu_runner.runtime import RuntimeFailure


@dataclass
class PerCallTiming:
    """The binary's own time of each call of the chunk being timed one process per call."""

    warmup: int  # untimed executions in each process before the timed one
    ms: list[float] = field(default_factory=list)
    calls: int = 0
    means: bool = False  # some binary logged only its total: its mean stands for the timed execution

    def took(self, name: str, log: RunnerLog, executions: int) -> None:
        ms, own = execution_ms(name, log, executions)
        self.ms.append(ms)
        self.calls = len(self.ms)
        self.means = self.means or not own

    def method(self) -> str:
        each = (
            "the binary's own time of its last execution"
            if not self.means
            else "the mean of its logged total (this executor_runner logs no per-execution times; "
            "warm-ups included)"
        )
        return (
            f"one executor_runner process per call of the plan ({self.calls} per chunk), each with "
            f"--num_executions={self.warmup + 1} ({self.warmup} untimed, then the timed one, whose outputs "
            f"it writes and which are checked); a sample is, summed over the calls, {each}; process start, "
            "program load and .bin file I/O excluded; load_ms is the wall time of one load-only process "
            "per program"
        )


def execution_ms(name: str, log: RunnerLog, executions: int) -> tuple[float, bool]:
    """The binary's own milliseconds for the last of a process's ``executions``, and True; where it
    logged only its total, the mean of its executions, and False."""
    if len(log.iteration_ms) == executions and executions > 0:
        return log.iteration_ms[-1], True
    if log.total_execute_ms is None:
        raise RuntimeFailure(f"executor_runner logged no execution time for {name}")
    return log.total_execute_ms / max(log.executions or executions, 1), False
