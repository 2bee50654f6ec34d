"""Finding the native ``executor_runner`` binary and what it offers: the configured path
(``--executor-runner PATH`` or ``COVERFARM_EXECUTOR_RUNNER``), its flags (``--helpshort``), the backends
it can register (their names in it and the ExecuTorch libraries it loads), whether it logs through
ExecuTorch's PAL, and what the probe records of it with the source its owner declares
(``describe_binary``)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from coverfarm.device_result import NativeRuntimeInfo
from gpu_runner.declared_source import COMMIT_ENV_VAR, VERSION_ENV_VAR, DeclaredSource
from gpu_runner.native.log import LOG_LINE
from gpu_runner.runtime import RUNTIME_BACKEND, RuntimeFailure

ENV_VAR = "COVERFARM_EXECUTOR_RUNNER"
HELP_TIMEOUT_S = 20.0
# The names ExecuTorch backends register under (``register_backend({"VulkanBackend", ...})``).
BACKEND_NAMES = (
    *RUNTIME_BACKEND.values(),
    "QnnBackend",
    "CoreMLBackend",
    "MPSBackend",
    "NeuronBackend",
    "OpenvinoBackend",
    "VgfBackend",
    "EthosUBackend",
)
_LDD_LINE = re.compile(r"^\s*(?P<name>\S+) => (?P<path>/\S+)", re.MULTILINE)
_HELP_FLAG = re.compile(r"^\s+-(?P<flag>\w+) \(", re.MULTILINE)


def configured_path(explicit: Path | None = None) -> Path | None:
    """The binary given on the command line, else ``COVERFARM_EXECUTOR_RUNNER``, else none."""
    if explicit is not None:
        return explicit
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value) if value else None


def check_binary(path: Path) -> None:
    if not path.is_file():
        raise RuntimeFailure(f"executor_runner {path} does not exist")
    if not os.access(path, os.X_OK):
        raise RuntimeFailure(f"executor_runner {path} is not executable")


def linked_backend_libraries(binary: Path) -> list[Path]:
    """The ExecuTorch shared libraries the binary loads (``ldd``; names with "executorch" or "backend")."""
    try:
        run = subprocess.run(
            ["ldd", str(binary)], capture_output=True, text=True, timeout=HELP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    libraries = []
    for match in _LDD_LINE.finditer(run.stdout):
        name, path = match.group("name"), Path(match.group("path"))
        if ("executorch" in name or "backend" in name) and path.is_file():
            libraries.append(path)
    return libraries


def scan_backends(binary: Path, names: Sequence[str] = BACKEND_NAMES) -> list[str]:
    """Backends the binary can register: their registration names, as NUL-terminated string literals,
    in the binary and in the ExecuTorch libraries it loads.

    ExecuTorch registers each backend under a literal name at static initialisation (a backend library
    is linked with ``--whole-archive`` exactly so that this happens), so a name found in none of them
    cannot be registered. Over the pip wheel's own pybindings and their libraries this finds exactly
    what ``executorch.runtime``'s ``backend_registry`` lists (tested). Loading a bundle (the health
    check, or ``run-bundle``) remains the definitive test.
    """
    wanted = {name: f"\0{name}\0".encode() for name in names}
    found: set[str] = set()
    overlap = max(len(w) for w in wanted.values())
    for path in [binary, *linked_backend_libraries(binary)]:
        tail = b""
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                window = tail + chunk
                found.update(name for name, needle in wanted.items() if needle in window)
                tail = window[-overlap:]
    return sorted(found)


def help_flags(binary: Path) -> list[str]:
    """The flags ``--helpshort`` lists (gflags prints them and exits non-zero)."""
    try:
        run = subprocess.run(
            [str(binary), "--helpshort"], capture_output=True, text=True, timeout=HELP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(set(_HELP_FLAG.findall(run.stdout + run.stderr)))


def logs_through_pal(binary: Path) -> bool | None:
    """Whether the binary logs through ExecuTorch's PAL, which "Model loaded in N ms" is read from: a
    run on a missing program must log its refusal as a PAL line (builds with logging compiled out
    print nothing). None when the binary could not be run."""
    try:
        run = subprocess.run(
            [str(binary), "--model_path=/nonexistent/coverfarm-probe.pte", "--num_executions=0"],
            capture_output=True,
            text=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return any(LOG_LINE.match(line.rstrip()) for line in (run.stderr + "\n" + run.stdout).splitlines())


def describe_binary(path: Path | None, declared: DeclaredSource | None = None) -> NativeRuntimeInfo:
    """What the probe records about the native runtime (``none configured`` without a path): what the
    binary says of itself (flags, backends, logging) and the source its owner declares."""
    problems = []
    if declared is None:
        try:
            declared = DeclaredSource.from_environment()
        except ValueError as error:
            problems.append(str(error))
            declared = DeclaredSource()
    if path is None:
        return NativeRuntimeInfo(status=f"none configured (set {ENV_VAR} or --executor-runner)")
    try:
        check_binary(path)
    except RuntimeFailure as error:
        return NativeRuntimeInfo(path=str(path), status=str(error))
    flags = help_flags(path)
    # Every executor_runner parses its flags with gflags, which lists them for --helpshort.
    status = "ok" if "model_path" in flags else f"{path} is not an executor_runner: no --model_path flag"
    # --etdump_path exists only in builds with ET_EVENT_TRACER_ENABLED (executor_runner.cpp).
    event_tracer = "etdump_path" in flags
    logging = logs_through_pal(path) if status == "ok" else None
    if event_tracer:
        problems.append(
            "built with the event tracer (--etdump_path): the Vulkan runtime's query pool then stops "
            "programs of more than about 2,000 dispatches; rebuild with EXECUTORCH_ENABLE_EVENT_TRACER=OFF"
        )
    if logging is False:
        problems.append("logs nothing through ExecuTorch's PAL: load times cannot be read from it")
    if declared.version is None or declared.commit is None:
        problems.append(
            f"its ExecuTorch source is not declared: set {VERSION_ENV_VAR} and {COMMIT_ENV_VAR} "
            "so that every result says which runtime ran it"
        )
    return NativeRuntimeInfo(
        path=str(path),
        status=status,
        registered_backends=scan_backends(path),
        backends_from="registration names in the binary and the ExecuTorch libraries it loads",
        flags=flags,
        bundle_io="bundleio_rtol" in flags,
        declared_version=declared.version,
        declared_commit=declared.commit,
        declared_patches=list(declared.patches),
        server_mode="server_mode" in flags,
        event_tracer=event_tracer,
        logging=logging,
        problems=problems,
    )
