"""The ``executor_runner`` command line (gflags ``--flag=value``): the program, its ``.bin`` inputs, the
number of executions, the outputs' base name, a bundled program's tolerances, server mode."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpu_runner.runtime import RuntimeFailure


def runner_args(
    binary: Path,
    pte: Path,
    inputs: Sequence[Path] = (),
    *,
    executions: int = 1,
    output_base: Path | None = None,
    bundleio: tuple[float, float] | None = None,
    server_mode: bool = False,
    quiet_outputs: bool = False,
) -> list[str]:
    """The command line (gflags ``--flag=value``); ``bundleio`` is (rtol, atol) for a ``.bpte``;
    ``quiet_outputs`` adds ``--print_output=none`` (binaries that print outputs by default)."""
    args = [str(binary), f"--model_path={pte}", f"--num_executions={executions}"]
    if server_mode:
        args.append("--server_mode")
    if quiet_outputs:
        args.append("--print_output=none")
    if inputs:
        if any("," in str(path) for path in inputs):
            raise RuntimeFailure(f"input paths cannot hold a comma for --inputs: {list(map(str, inputs))}")
        args.append(f"--inputs={','.join(map(str, inputs))}")
    if output_base is not None:
        args.append(f"--output_file={output_base}")
    if bundleio is not None:
        args += [f"--bundleio_rtol={bundleio[0]}", f"--bundleio_atol={bundleio[1]}"]
    return args
