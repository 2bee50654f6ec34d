"""Which runtime executes a bundle: the Python ``executorch.runtime`` or a native ``executor_runner``.

``auto`` (the default) takes the native binary when one is configured and has the bundle's backend
linked in, and the Python runtime otherwise, so a host without a binary behaves as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from gpu_runner.native.binary import ENV_VAR, configured_path, scan_backends
from gpu_runner.native.runtime import NativeRuntime
from gpu_runner.runtime import RUNTIME_BACKEND, ProgramRuntime, PythonRuntime, RuntimeFailure

RuntimeChoice = Literal["auto", "python", "native"]
CHOICES: tuple[str, ...] = get_args(RuntimeChoice)


def choose_runtime(
    choice: RuntimeChoice = "auto",
    backend: str | None = None,
    executor_runner: Path | None = None,
    server_mode: bool = True,
) -> ProgramRuntime:
    """The runtime for a bundle of ``backend``; a choice that cannot be honoured raises with the cause."""
    if choice not in CHOICES:
        raise RuntimeFailure(f"unknown runtime {choice!r}; choose one of {', '.join(CHOICES)}")
    binary = configured_path(executor_runner)
    if choice == "python":
        return PythonRuntime()
    if choice == "native":
        if binary is None:
            raise RuntimeFailure(
                "the native runtime needs an executor_runner binary: "
                f"give --executor-runner PATH or set {ENV_VAR}"
            )
        return NativeRuntime(binary, server_mode=server_mode)
    if binary is not None:
        native = NativeRuntime(binary, server_mode=server_mode)
        needed = RUNTIME_BACKEND.get(backend or "")
        if needed is None or needed in scan_backends(binary):
            return native
    return PythonRuntime()
