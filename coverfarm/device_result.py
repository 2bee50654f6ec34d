"""The device runner's documents: the probe of a host and the result of running one bundle on it.

The wire types between a device runner (``gpu_runner``, which writes them) and the orchestrator (which
reads and stores them), so they live in the contract package. Pydantic only (no torch, no ExecuTorch).
Errors are measured in float64 over the whole output; ``sqnr_db`` is ``None`` when the output is
identical to the reference (no noise at all).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coverfarm.device_words import WRONG_OUTPUT, runtime_failure
from coverfarm.numerics import NumericsRun
from coverfarm.profile import ProfileRun

RESULT_FORMAT = 1


class Board(BaseModel):
    model: str | None = None  # /proc/device-tree/model (SBCs such as RK3588 boards); None elsewhere
    compatible: list[str] = Field(default_factory=list)  # /proc/device-tree/compatible: board, then SoC
    cpu_model: str | None = None
    # The CPU's vector extensions that ExecuTorch's CPU kernels (XNNPACK's above all) pick between, as
    # /proc/cpuinfo lists them: one model name spans machines with and without AVX-512.
    cpu_features: list[str] = Field(default_factory=list)
    cores: int
    arch: str

    def cpu_text(self) -> str | None:
        """``AMD EPYC (avx2, fma, f16c)``: the model and its vector extensions; None when neither is known."""
        if self.cpu_features:
            return f"{self.cpu_model or 'CPU'} ({', '.join(self.cpu_features)})"
        return self.cpu_model


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
    # Registered delegates of coverfarm's backends that the runtime says are not available here, with
    # what it logged when asked (VgfBackend without a Vulkan device offering Arm's ML extensions).
    unavailable: dict[str, str] = Field(default_factory=dict)


class NativeRuntimeInfo(BaseModel):
    """A native ``executor_runner`` binary configured for this host (gpu_runner/native/binary.py).

    The host's owner builds it from ExecuTorch's source and declares which source: ``declared_version``
    (its ``version.txt``), ``declared_commit`` and ``declared_patches`` (upstream pull requests applied on
    top of it, ``gpu_runner.declared_source``). The rest is read off the binary itself.
    """

    path: str | None = None
    status: str  # "ok", "none configured (...)", or why the binary cannot be used
    registered_backends: list[str] = Field(default_factory=list)
    backends_from: str | None = None  # how the backends were found out
    flags: list[str] = Field(default_factory=list)  # what its --helpshort lists
    bundle_io: bool = False  # built with bundled IO (--bundleio_rtol/--bundleio_atol)
    declared_version: str | None = None  # ExecuTorch version the owner says it was built from
    declared_commit: str | None = None  # and the source commit
    declared_patches: list[str] = Field(default_factory=list)  # upstream pull requests applied on top of it
    server_mode: bool = False  # --server_mode: one load per program, one execution per stdin line
    event_tracer: bool | None = None  # built with the event tracer (--etdump_path); it must be off
    logging: bool | None = None  # logs through ExecuTorch's PAL ("Model loaded in ..." is read from it)
    problems: list[str] = Field(default_factory=list)  # what makes its figures or runs unusable


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


class TimingRules(BaseModel):
    """How a latency is measured and how well it must be known. The defaults are the farm's settings
    (``COVERFARM_TIMING__<FIELD>``, ``coverfarm.settings``); every latency records the rules it met.

    Each replica (a fresh process) runs up to ``warmup`` untimed chunks (fewer when they already took
    ``min_s``), then times chunks until it has at least ``min_chunks`` and ``min_s`` seconds of them,
    stopping at ``max_s`` seconds or ``max_chunks`` chunks whatever it has. Chunks too short to time one
    at a time (under ``min_sample_ms``, or too short to reach ``min_s`` within half of ``max_chunks``) are
    timed in groups, one sample per group, and the counts are then of samples. A latency is ``replicas``
    such processes: its figure is the median of their medians and its interval the range of their
    medians (``coverfarm.latency_interval``). A latency, or a speed-up divided from two, is known when
    that interval lies within ``interval_width`` (a fraction) either side of its figure; the per-sample
    CV, p90 and min describe jitter and judge nothing.
    """

    model_config = ConfigDict(frozen=True)

    warmup: int = Field(3, ge=0)
    min_chunks: int = Field(5, ge=1)
    min_s: float = Field(2.0, ge=0)
    max_s: float = Field(60.0, gt=0)
    max_chunks: int = Field(1000, ge=1)
    # A sample shorter than this times several consecutive chunks together (farmrun.stats.timed_loop).
    min_sample_ms: float = Field(1.0, ge=0)
    replicas: int = Field(5, ge=1)
    # An interval within ± this fraction of its figure is narrow: the figure (or speed-up) is known.
    interval_width: float = Field(0.10, gt=0, lt=1)
    # cycle: timed chunk i runs frame i mod frames (both sides of a speed-up do); frame0: frame 0 only
    inputs: Literal["cycle", "frame0"] = "cycle"

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_s < self.min_s:
            raise ValueError(f"max_s ({self.max_s:g}) must be at least min_s ({self.min_s:g})")
        if self.max_chunks < self.min_chunks:
            raise ValueError(
                f"max_chunks ({self.max_chunks}) must be at least min_chunks ({self.min_chunks})"
            )
        return self


class HostLoad(BaseModel):
    """What else ran on the host while a replica was timed (``farmrun.hostload``, from ``/proc``)."""

    cores: int
    window_s: float
    loadavg_1m_start: float | None = None
    loadavg_1m_end: float | None = None
    # None when the window was too short for /proc's clock ticks (farmrun.hostload.MIN_WINDOW_S)
    busy_cores: float | None = None  # all CPU time spent on the host over the window, in cores
    own_cores: float | None = None  # of it, the timing process's own (and its reaped children's)
    other_cores: float | None = None  # of it, every other process's: what the timing shared the host with


class CpuShare(BaseModel):
    """The CPUs a timing process could use and the threads it ran on (``farmrun.cpu_share``): the CPUs
    of its affinity mask less those other processes kept busy, capped by its cgroup's CPU quota."""

    cores: int  # the host's (os.cpu_count)
    affinity: int  # CPUs in the process's affinity mask (taskset, a container's cpuset)
    quota_cpus: float | None = None  # its cgroup's CPU quota in CPUs (cpu.max, v1 cfs quota); None: none
    quota_from: str | None = None  # the file the quota was read from
    busy: float | None = None  # cores of the mask other processes kept busy just before; None: not sampled
    threads: int  # what the runtime was given: min(round(affinity - busy), floor(quota)), at least 1

    def describe(self) -> str:
        """``8 of 16 CPUs in its affinity mask, 0.4 busy, CPU quota 4`` (``no CPU quota``)."""
        busy = "busy not sampled" if self.busy is None else f"{self.busy:g} busy"
        limit = "no CPU quota" if self.quota_cpus is None else f"CPU quota {self.quota_cpus:g}"
        return f"{self.affinity} of {self.cores} CPUs in its affinity mask, {busy}, {limit}"


class Isolation(BaseModel):
    """The host-level timing lock (``farmrun.hostlock``) a replica held while it was timed."""

    lock: str  # the lock file
    acquired: bool  # False: it waited ``waited_s`` (its bound) and timed beside what held the lock
    waited_s: float
    held_from: datetime | None = None
    held_to: datetime | None = None


class OutputStability(BaseModel):
    """Each timed chunk's plan outputs compared with the eager reference of its frame (the tolerance)."""

    executions: int  # timed chunks whose outputs were compared
    differing: int
    first: str | None = None  # the first differing execution: chunk, frame, output and its error
    # why executions were not compared: a native runtime of one process per call before its timed
    # executions' outputs were handed back (older documents); every runtime compares them now
    note: str | None = None


class Replica(BaseModel):
    """One fresh process's measurement, summarised (its samples are in the latency's ``samples_ms``)."""

    warmup: int
    iterations: int  # samples
    chunks_per_sample: int = 1  # consecutive chunks timed together in each sample (their mean per chunk)
    seconds: float  # timed seconds (warm-up excluded)
    stopped: str  # why it stopped: "min_chunks and min_s reached", "max_s reached", "max_chunks reached"
    median_ms: float
    p90_ms: float
    min_ms: float
    cv: float
    host_load: HostLoad | None = None
    isolation: Isolation | None = None
    outputs: OutputStability | None = None
    threads: int | None = None  # the eager baseline's torch threads (cpus.threads where recorded)
    cpus: CpuShare | None = None  # what decided them; None before it was recorded, and on device runs


class LatencyStats(BaseModel):
    """Milliseconds per action chunk (every call of the plan, in order, batch 1) in steady state.

    A sample includes handing numpy arrays to the runtime (zero-copy) and taking its outputs back (one
    copy each), as the runner does for real; it excludes loading, which ``load_ms`` measures apart.
    The summary (median, p90, min, mean, CV) is over every replica's samples together and describes
    jitter. How well the latency is known comes from its replicas (``coverfarm.latency_interval``, judged
    whenever the document is read); ``stable`` and ``unstable_reasons`` are the verdict given when it
    was measured, under the rules version ``judgement`` (None: version 1, which gated on each replica's
    CV and the replicas' agreement).
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
    # The fields below came with time-bounded, replicated timing; documents stored before lack them.
    rules: TimingRules | None = None
    frames: int | None = None  # the distinct frames the timed chunks cycled over (1: frame 0 only)
    replicas: list[Replica] = Field(default_factory=list)
    replica_spread: float | None = None  # largest replica median over the smallest, minus one
    unstable_reasons: list[str] = Field(default_factory=list)
    judgement: int | None = None  # the rules version of ``stable`` (None: 1, before intervals)


class ProgramLoad(BaseModel):
    """Loading one program, by the binary's own "Model loaded in N ms" where a native runtime ran it.

    ``first_ms`` is the run's first load of the program (a cold shader cache unless the driver's disk
    cache already held its shaders: ``LoadReport.shader_cache`` says what it held), ``warm_ms`` the
    load that followed, which starts the program's live process.
    """

    program: str
    first_ms: float | None = None
    warm_ms: float | None = None
    first_wall_ms: float | None = None  # the whole load-only process, start and exit included


class LoadReport(BaseModel):
    programs: list[ProgramLoad] = Field(default_factory=list)
    first_ms: float | None = None  # summed over the programs
    warm_ms: float | None = None
    shader_cache: str | None = None  # the driver's shader disk cache before the first load
    measured_by: str | None = None


FailureKind = Literal[
    "refused_at_load",  # the runtime would not load a program: its own message
    "crashed",  # the runtime died while running (a signal or an exit status) after loading
    "wrong_output",  # outputs outside the tolerance (max abs error, SQNR)
    "output_not_stable",  # executions of the same inputs gave different outputs
    "out_of_time",  # a load or a call ran past its bound
    "runtime_unavailable",  # the runtime could not be started or lacks the bundle's backend
    "bundle",  # the bundle itself was refused (address, manifest, files)
]


class DeviceFailure(BaseModel):
    """Why a device run failed, by class: the grid shows ``short_cause``, the details the rest."""

    kind: FailureKind
    cause: str  # one line
    program: str | None = None
    message: str | None = None  # the runtime's own words, in full
    signal: int | None = None
    exit_status: int | None = None
    last_lines: list[str] = Field(default_factory=list)
    max_abs_error: float | None = None
    min_sqnr_db: float | None = None

    @property
    def short_cause(self) -> str:
        """The class in words and the runtime's own check, for a grid cell."""
        said = runtime_failure(self.kind, self.message, self.program) if self.message else None
        if said is None and self.kind == "wrong_output" and self.program and self.max_abs_error is not None:
            # which program and by how much; the tolerance it missed stays in the cause
            said = f"{WRONG_OUTPUT}: {self.program}, max abs error {self.max_abs_error:.3g}"
        return said if said is not None else self.cause


UPSTREAM = "pytorch/executorch"  # the repository a runtime's patches "#N" name pull requests of


class RuntimeIdentity(BaseModel):
    """Which ExecuTorch executed the bundle, beside the ExecuTorch that exported it."""

    kind: Literal["python", "native"]
    version: str | None = None  # the wheel's version (python), the declared source version (native)
    commit: str | None = None  # declared source commit (native)
    # upstream pull requests applied on top of the commit ("pytorch/executorch#22786"): a candidate fix
    patches: list[str] = Field(default_factory=list)
    export_version: str | None = None  # executorch in the bundle's manifest
    matches_export: bool | None = None  # None: one of the two is unknown
    note: str | None = None  # "runtime main cff6f4dd32 (1.5.0), export executorch 1.5.1"

    @property
    def patches_key(self) -> str:
        """The patches as one key ("" for none): a cell keeps one run per class and key."""
        return ",".join(sorted(self.patches))


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
    load: LoadReport | None = None
    runtime_identity: RuntimeIdentity | None = None
    # The precision the backend's runtime computed in on this host where it chooses one itself
    # (``BackendInfo.runtime_precision``: OpenVINO's CPU plugin, "bf16" or "f32"); None where the
    # bundle's own dtypes decide it. A wrong-output cause names it.
    precision: str | None = None
    failure: DeviceFailure | None = None  # set whenever status is "failed"
    # The pip wheel's Python runtime links libtorch and takes torch tensors; a runtime built for a board
    # need not. Both are recorded so a result says which kind of process produced it.
    libtorch_mapped: bool = False
    libtorch_libraries: list[str] = Field(default_factory=list)
    torch_module_loaded: bool = False
    status: Literal["ok", "failed"]
    error: str | None = None
    finished_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    # Who timed it where: a speed-up divides two measurements of the same runner on the same host.
    runner_id: int | None = None  # the enrolled runner of this host (its runner.json), None if none
    host_id: str | None = None  # farmrun.hostload.host_id(): machine id and host name
    # The chunk run once more with a profiling runtime (coverfarm/profile.py), apart from the timed runs:
    # its ETDumps and where the time went. Never part of ``latency``.
    profile: ProfileRun | None = None
    # Each program run once more with its intermediate outputs captured (coverfarm/numerics.py), after a
    # wrong output or on request: which op departs from eager first. Never part of ``latency``.
    numerics: NumericsRun | None = None
