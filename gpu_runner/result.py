"""The device runner's documents: the probe of a host and the result of running one bundle on it.

Pydantic only (no torch, no ExecuTorch), so the orchestrator can read what a runner reports.
Errors are measured in float64 over the whole output; ``sqnr_db`` is ``None`` when the output is
identical to the reference (no noise at all).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

RESULT_FORMAT = 1


class Board(BaseModel):
    model: str | None = None  # /proc/device-tree/model (SBCs such as RK3588 boards); None elsewhere
    compatible: list[str] = Field(default_factory=list)  # /proc/device-tree/compatible: board, then SoC
    cpu_model: str | None = None
    cores: int
    arch: str


class VulkanDevice(BaseModel):
    index: int
    name: str
    vendor: str
    vendor_id: str | None = None
    device_type: str | None = None  # e.g. INTEGRATED_GPU, DISCRETE_GPU, CPU (llvmpipe)
    driver_id: str | None = None  # e.g. DRIVER_ID_MESA_PANVK, DRIVER_ID_ARM_PROPRIETARY
    driver_name: str | None = None
    driver_info: str | None = None
    driver_version: str | None = None
    api_version: str | None = None
    limits: dict[str, int] = Field(default_factory=dict)  # maxImageDimension3D and friends
    software: bool = False  # a CPU implementation (llvmpipe/lavapipe, SwiftShader): never a GPU class


class ExecutorchInfo(BaseModel):
    version: str | None = None
    registered_backends: list[str] = Field(default_factory=list)
    error: str | None = None  # why the runtime could not be asked (not installed, failed to load)


class NativeRuntimeInfo(BaseModel):
    """A native ``executor_runner`` binary configured for this host (gpu_runner/native_runtime.py)."""

    path: str | None = None
    status: str  # "ok", "none configured (...)", or why the binary cannot be used
    registered_backends: list[str] = Field(default_factory=list)
    backends_from: str | None = None  # how the backends were found out
    flags: list[str] = Field(default_factory=list)  # what its --helpshort lists
    bundle_io: bool = False  # built with bundled IO (--bundleio_rtol/--bundleio_atol)


class EagerBaseline(BaseModel):
    """Whether this host can time the eager-PyTorch baseline (a separate job, in its own process): it
    needs torch and lerobot installed; their versions are read from package metadata, never imported."""

    torch: str | None = None
    lerobot: str | None = None
    status: str  # "ok", or why the host takes no baseline jobs


class ThermalZone(BaseModel):
    name: str
    type: str | None = None
    temp_c: float | None = None


class ProbeReport(BaseModel):
    board: Board
    vulkan_devices: list[VulkanDevice] = Field(default_factory=list)
    vulkan_status: str  # "ok", or why there are none ("vulkaninfo not installed", "no device", ...)
    executorch: ExecutorchInfo  # the Python runtime (executorch.runtime)
    native_runtime: NativeRuntimeInfo | None = None
    baseline: EagerBaseline | None = None  # None: probed before baselines were asked about
    thermal_zones: list[ThermalZone] = Field(default_factory=list)
    device_classes: list[str] = Field(default_factory=list)
    # backend ("vulkan", "xnnpack") or a software device's would-be class ("llvmpipe-vulkan") -> why not
    not_offered: dict[str, str] = Field(default_factory=dict)


class ProgramCheck(BaseModel):
    """One program's test case (its inputs and eager outputs on frame 0) replayed on the device."""

    program: str
    max_abs_error: float | None = None
    passed: bool
    error: str | None = None


class OutputCheck(BaseModel):
    """One plan output over all frames: the worst frame's error and SQNR."""

    name: str
    max_abs_error: float
    min_sqnr_db: float | None = None
    passed: bool


class FramesCheck(BaseModel):
    frames: int
    outputs: list[OutputCheck]
    passed: bool


class LatencyStats(BaseModel):
    """Milliseconds per action chunk (every call of the plan, in order, batch 1) in steady state.

    A sample includes handing numpy arrays to the runtime (zero-copy) and taking its outputs back (one
    copy each), as the runner does for real; it excludes loading, which ``load_ms`` measures apart.
    """

    warmup: int
    iterations: int
    samples_ms: list[float]
    median_ms: float
    p90_ms: float
    min_ms: float
    mean_ms: float
    cv: float  # sample standard deviation / mean
    stable: bool
    load_ms: float  # loading every program and method, measured apart from the steady state
    method: str | None = None  # what one sample covers, as the runtime that produced it measured it


class Tolerance(BaseModel):
    rtol: float
    atol: float


class DeviceResult(BaseModel):
    format: int = RESULT_FORMAT
    bundle_sha256: str
    policy: str | None = None
    backend: str | None = None
    device_class: str | None = None
    runtime: Literal["python", "native"] | None = None  # which runtime executed the programs
    probe: ProbeReport | None = None
    tolerance: Tolerance | None = None
    testcase: list[ProgramCheck] = Field(default_factory=list)
    frames: FramesCheck | None = None
    latency: LatencyStats | None = None
    # The pip wheel's Python runtime links libtorch and takes torch tensors; a runtime built for a board
    # need not. Both are recorded so a result says which kind of process produced it.
    libtorch_mapped: bool = False
    libtorch_libraries: list[str] = Field(default_factory=list)
    torch_module_loaded: bool = False
    status: Literal["ok", "failed"]
    error: str | None = None
    finished_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
