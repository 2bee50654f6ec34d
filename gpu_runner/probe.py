"""What this host is: board, CPU, Vulkan devices, the ExecuTorch runtimes and their backends, thermal zones.

Two runtimes can execute programs (gpu_runner/runtime.py): the installed Python ``executorch.runtime``,
asked through its ``backend_registry``, and a native ``executor_runner`` binary when one is configured,
whose backends are the registration names linked into it (gpu_runner/native/binary.py). The device
classes a runner offers follow from both: ``cpu-<arch>-<backend>`` for each CPU backend
(``coverfarm.backends``: XNNPACK, OpenVINO) whose delegate either registers (``cpu-x86_64-xnnpack`` when
either has XnnpackBackend), and
``<gpu>-vulkan`` for each Vulkan GPU only when either has VulkanBackend: a GPU no runtime can use is no
device class; ``<device>-vgf`` when the Python runtime's VgfBackend says it is available on the first
Vulkan device, ``emulated-<device>-vgf`` when that device has Arm's ML extensions only through the ML
SDK's emulation layers (``vgf_classes``). ``<gpu>`` is the model in the Vulkan device name
(``h200-vulkan`` for "NVIDIA H200", ``mali-g610-vulkan``, ``adreno-750-vulkan`` for "Adreno (TM) 750"
or "Turnip Adreno (TM) 750").
Software Vulkan devices (Mesa's llvmpipe/lavapipe, SwiftShader: device type CPU) are never GPU classes;
``not_offered`` says so. When a board whose SoC has a known GPU (``SOC_GPUS``, from the device tree's
``compatible``) shows no Vulkan GPU, ``not_offered`` names the driver it needs. Apart from the classes,
a host with torch and lerobot installed takes eager-baseline jobs (``baseline_capability``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from coverfarm import backends
from coverfarm import device_classes as class_names
from coverfarm.device_result import (
    Board,
    EagerBaseline,
    ExecutorchInfo,
    NativeRuntimeInfo,
    ProbeReport,
    ThermalZone,
    VulkanDevice,
)
from farmrun.board import board, read_or_none
from gpu_runner import runtime
from gpu_runner.native import binary as native_binary

# PCI / Khronos vendor ids as vulkaninfo prints them.
VENDORS = {
    "0x1002": "AMD",
    "0x1010": "Imagination",
    "0x106b": "Apple",
    "0x10de": "NVIDIA",
    "0x13b5": "ARM",
    "0x14e4": "Broadcom",
    "0x5143": "Qualcomm",
    "0x8086": "Intel",
    "0x1ae0": "Google",
    "0x10005": "Mesa",
}
# Software implementations: Vulkan on the CPU. Each is also recognised by its device type (CPU).
SOFTWARE_DRIVERS = {"DRIVER_ID_MESA_LLVMPIPE", "DRIVER_ID_GOOGLE_SWIFTSHADER"}
_SOFTWARE_NAME = re.compile(r"\b(llvmpipe|lavapipe|swiftshader)\b", re.IGNORECASE)
# The GPU of a SoC (a device-tree ``compatible`` entry) and the Vulkan drivers that drive it on Linux.
SOC_GPUS = {
    "rockchip,rk3588": (
        "Mali-G610",
        "Arm's Mali driver (libmali-valhall-g610 with Vulkan, vendor 0x13B5) or Mesa's panvk "
        "(Mesa 25.0.2 or newer: Vulkan 1.1 conformant on the Mali-G610)",
    ),
    "qcom,sm8650": ("Adreno 750", "Qualcomm's Adreno Vulkan driver or Mesa's turnip with Adreno 750 support"),
}
SOC_GPUS["rockchip,rk3588s"] = SOC_GPUS["rockchip,rk3588"]  # the same SoC in a smaller package
# Full vulkaninfo limits worth keeping: the Vulkan delegate maps tensors onto 3D images and buffers.
LIMITS = (
    "maxImageDimension1D",
    "maxImageDimension2D",
    "maxImageDimension3D",
    "maxStorageBufferRange",
    "maxComputeSharedMemorySize",
    "maxComputeWorkGroupInvocations",
    "maxPushConstantsSize",
)
VULKANINFO_TIMEOUT_S = 20
# Words of a device name that are no part of the model: vendors, and Mesa drivers that prefix their name.
_VENDOR_WORDS = {
    "nvidia", "amd", "ati", "arm", "qualcomm", "intel", "apple", "imagination", "broadcom", "turnip",
}  # fmt: skip
_KEY_VALUE = re.compile(r"^\s*(\w+)\s*=\s*(.*?)\s*$")
_GPU_HEADER = re.compile(r"^GPU(\d+):\s*$")


def _vulkaninfo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["vulkaninfo", *args], capture_output=True, text=True, timeout=VULKANINFO_TIMEOUT_S, check=False
    )


def parse_summary(text: str) -> list[VulkanDevice]:
    """The ``Devices:`` part of ``vulkaninfo --summary``: one ``GPU<n>:`` block of ``key = value`` each."""
    devices: list[dict[str, str]] = []
    in_devices = False
    for line in text.splitlines():
        if line.startswith("Devices:"):
            in_devices = True
            continue
        if not in_devices:
            continue
        if header := _GPU_HEADER.match(line):
            devices.append({"index": header.group(1)})
        elif devices and (m := _KEY_VALUE.match(line)):
            devices[-1][m.group(1)] = m.group(2)
    return [_device(d) for d in devices if "deviceName" in d]


def _device(fields: dict[str, str]) -> VulkanDevice:
    vendor_id = fields.get("vendorID", "").lower() or None
    device_type = fields.get("deviceType", "").removeprefix("PHYSICAL_DEVICE_TYPE_") or None
    driver_id = fields.get("driverID")
    return VulkanDevice(
        index=int(fields["index"]),
        name=fields["deviceName"],
        vendor=VENDORS.get(vendor_id or "", vendor_id or "unknown"),
        vendor_id=vendor_id,
        device_type=device_type,
        driver_id=driver_id,
        software=device_type == "CPU"
        or driver_id in SOFTWARE_DRIVERS
        or _SOFTWARE_NAME.search(fields["deviceName"]) is not None,
        driver_name=fields.get("driverName"),
        driver_info=fields.get("driverInfo"),
        driver_version=fields.get("driverVersion"),
        api_version=fields.get("apiVersion"),
    )


def parse_limits(text: str) -> dict[int, dict[str, int]]:
    """Per ``GPU<n>:`` section of the full ``vulkaninfo`` output, the first value of each of ``LIMITS``."""
    limits: dict[int, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        if header := _GPU_HEADER.match(line):
            current = limits.setdefault(int(header.group(1)), {})
        elif current is not None and (m := _KEY_VALUE.match(line)) and m.group(1) in LIMITS:
            value = m.group(2).split()[0]
            if m.group(1) not in current and value.isdigit():
                current[m.group(1)] = int(value)
    return limits


def vulkan_devices() -> tuple[list[VulkanDevice], str]:
    if shutil.which("vulkaninfo") is None:
        return [], "none: vulkaninfo not installed (package vulkan-tools)"
    try:
        summary = _vulkaninfo("--summary")
        devices = parse_summary(summary.stdout)
        if not devices:
            errors = [line.strip() for line in summary.stderr.splitlines() if "ERROR" in line]
            return [], "none: no Vulkan loader or device found" + (f" ({errors[-1]})" if errors else "")
        limits = parse_limits(_vulkaninfo().stdout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return [], f"none: vulkaninfo failed ({error})"
    for device in devices:
        device.limits = limits.get(device.index, {})
    return devices, "ok"


def thermal_zones(root: Path = Path("/sys/class/thermal")) -> list[ThermalZone]:
    zones = []
    for zone in sorted(root.glob("thermal_zone*")):
        temp = read_or_none(zone / "temp")
        kind = read_or_none(zone / "type")
        try:
            temp_c = int(temp.strip()) / 1000 if temp else None
        except ValueError:
            temp_c = None
        zones.append(ThermalZone(name=zone.name, type=kind.strip() if kind else None, temp_c=temp_c))
    return zones


NOT_ASKED = (
    "not asked: this run uses the native executor_runner, and loading the Python runtime would map "
    "libtorch into the runner"
)


def executorch_info(ask: bool = True) -> ExecutorchInfo:
    version = runtime.executorch_version()
    if not ask:
        return ExecutorchInfo(version=version, error=NOT_ASKED)
    try:
        registered = runtime.registered_backends()
        unavailable = runtime.unavailable_backends(list(runtime.RUNTIME_BACKEND.values()))
        return ExecutorchInfo(version=version, registered_backends=registered, unavailable=unavailable)
    except runtime.RuntimeFailure as error:
        return ExecutorchInfo(version=version, error=str(error))


def gpu_slug(name: str) -> str:
    """A device name as a class: "Mali-G610 MC4" -> mali-g610, "NVIDIA H200" -> h200, "NVIDIA H100 80GB
    HBM3" -> h100, "Adreno (TM) 750" and "Turnip Adreno (TM) 750" -> adreno-750."""
    words = re.sub(r"\([^)]*\)", " ", name).lower().replace("_", " ").split()
    words = [w for w in words if w not in _VENDOR_WORDS] or ["gpu"]
    kept: list[str] = []
    for word in words:  # up to and including the first word with a digit: the model number
        kept.append(re.sub(r"[^a-z0-9-]", "", word))
        if any(c.isdigit() for c in word):
            break
    return "-".join(w for w in kept if w) or "gpu"


CPU_CLASS_ENV_VAR = "COVERFARM_CPU_CLASS"


def cpu_class(board: Board, declared: str | None = None) -> tuple[str | None, str | None]:
    """The XNNPACK class of this host's CPU and, when a declared name is refused, why.

    ``cpu-<arch>-xnnpack`` by default. A host whose CPU should not share a column with every other host
    of its architecture (a 16-core server beside a 2-core VM) declares its own name in
    ``COVERFARM_CPU_CLASS`` (``h200-host-xnnpack``); it must be a well-formed class ending in ``-xnnpack``.
    """
    if not declared:
        return f"cpu-{board.arch}-xnnpack", None
    try:
        return class_names.check(declared, ["xnnpack"]), None
    except ValueError as error:
        return None, f"{CPU_CLASS_ENV_VAR}={declared!r} is refused: {error}"


# The ML SDK's emulation layers (ai-ml-emulation-layer-for-vulkan): VK_ARM_tensors and VK_ARM_data_graph
# over another Vulkan driver.
EMULATION_LAYERS = ("VK_LAYER_ML_Graph_Emulation", "VK_LAYER_ML_Tensor_Emulation")
_LAYER_ENV_VARS = ("VK_INSTANCE_LAYERS", "VK_LOADER_LAYERS_ENABLE")


def emulation_layers(environ: Mapping[str, str]) -> list[str]:
    """The ML SDK's emulation layers this environment enables for every Vulkan application."""
    enabled = " ".join(environ.get(name, "") for name in _LAYER_ENV_VARS)
    return [layer for layer in EMULATION_LAYERS if layer in enabled]


def vgf_classes(
    devices: list[VulkanDevice], info: ExecutorchInfo, where: str, emulated: bool
) -> tuple[list[str], str | None]:
    """The VGF class of this host, or why it has none.

    VgfBackend runs on the first Vulkan device when the runtime says it is available (its device has
    ``VK_ARM_tensors`` and ``VK_ARM_data_graph``). Through the emulation layers that device is whatever
    driver is beneath them, so the class says so: ``emulated-<device>-vgf`` (``emulated-llvmpipe-vgf``
    over Mesa's lavapipe), never the name of a GPU that has the extensions itself (``mali-g610-vgf``).
    """
    needed = backends.registry()["vgf"].runtime_backend
    if needed not in info.registered_backends:
        return [], f"{needed} is not registered in the {where}"
    if needed in info.unavailable:
        layers = "with" if emulated else "without"
        said = info.unavailable[needed]
        return [], f"{needed} is not available ({layers} the ML SDK's emulation layers): {said}"
    if not devices:
        return [], f"{needed} is available but vulkaninfo shows no Vulkan device"
    slug = gpu_slug(devices[0].name)
    return [f"emulated-{slug}-vgf" if emulated else f"{slug}-vgf"], None


def device_classes(
    board: Board,
    devices: list[VulkanDevice],
    vulkan_status: str,
    info: ExecutorchInfo,
    native: NativeRuntimeInfo | None = None,
    declared_cpu_class: str | None = None,
    emulated: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """``emulated``: the ML SDK's emulation layers are enabled (``emulation_layers``)."""
    classes: list[str] = []
    not_offered: dict[str, str] = {}
    registered = set(info.registered_backends)
    where = f"ExecuTorch runtime {info.version or '(unknown version)'}"
    if native is not None and native.status == "ok":
        registered |= set(native.registered_backends)
        where += f" or the executor_runner {native.path}"
    elif native is not None and native.path is not None:
        not_offered["native"] = native.status  # a binary was given but cannot be used
    if info.error and info.error != NOT_ASKED:
        not_offered["runtime"] = info.error
    for cpu_backend in (b for b in backends.registry().values() if b.cpu_class):
        if cpu_backend.runtime_backend not in registered:
            if not info.error or info.error == NOT_ASKED:
                not_offered[cpu_backend.name] = (
                    f"{cpu_backend.runtime_backend} is not registered in the {where}"
                )
            continue
        if cpu_backend.name != "xnnpack":
            classes.append(f"cpu-{board.arch}-{cpu_backend.name}")
            continue
        name, refused = cpu_class(board, declared_cpu_class)
        if name is not None:
            classes.append(name)
        else:
            not_offered["xnnpack"] = refused or ""
    if info.error is None and "vgf" in backends.registry():
        vgf, refused = vgf_classes(devices, info, where, emulated)
        classes.extend(vgf)
        if refused is not None:
            not_offered["vgf"] = refused
    gpus = [d for d in devices if not d.software]
    for device in devices:
        if device.software:
            not_offered[f"{gpu_slug(device.name)}-vulkan"] = (
                f"{device.name} is a software Vulkan device (it runs on the CPU), never a GPU class"
            )
    if runtime.RUNTIME_BACKEND["vulkan"] not in registered:
        names = ", ".join(d.name for d in devices) or vulkan_status
        why = f"VulkanBackend is not registered in the {where} (Vulkan devices: {names})"
    elif not gpus:
        why = "no Vulkan GPU: " + ("only software devices" if devices else vulkan_status)
    else:
        classes.extend(dict.fromkeys(f"{gpu_slug(d.name)}-vulkan" for d in gpus))
        return classes, not_offered
    not_offered["vulkan"] = why + ("" if gpus else missing_driver(board))
    return classes, not_offered


def missing_driver(board: Board) -> str:
    """What the board's GPU needs when no Vulkan driver shows it ("" for a SoC not in ``SOC_GPUS``)."""
    for entry in board.compatible:
        if entry in SOC_GPUS:
            gpu, drivers = SOC_GPUS[entry]
            return f"; this board's {gpu} ({entry}) has no Vulkan driver here: on Linux it needs {drivers}"
    return ""


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def baseline_capability() -> EagerBaseline:
    """Whether this host can run eager-baseline jobs, from installed package metadata (nothing imported:
    the runner itself never loads torch; a baseline job runs in a process of its own)."""
    torch, lerobot = _installed("torch"), _installed("lerobot")
    missing = [name for name, version in (("torch", torch), ("lerobot", lerobot)) if version is None]
    status = "ok" if not missing else f"{' and '.join(missing)} not installed on this host"
    return EagerBaseline(torch=torch, lerobot=lerobot, status=status)


def probe(*, python_runtime: bool = True, executor_runner: Path | None = None) -> ProbeReport:
    """The host; ``python_runtime=False`` leaves the Python runtime unloaded (a native-runtime run)."""
    host = board()
    devices, vulkan_status = vulkan_devices()
    info = executorch_info(ask=python_runtime)
    native = native_binary.describe_binary(native_binary.configured_path(executor_runner))
    declared = os.environ.get(CPU_CLASS_ENV_VAR)
    emulated = bool(emulation_layers(os.environ))
    classes, not_offered = device_classes(host, devices, vulkan_status, info, native, declared, emulated)
    return ProbeReport(
        board=host,
        vulkan_devices=devices,
        vulkan_status=vulkan_status,
        executorch=info,
        native_runtime=native,
        baseline=baseline_capability(),
        thermal_zones=thermal_zones(),
        device_classes=classes,
        not_offered=not_offered,
    )


def describe(report: ProbeReport) -> str:
    """The probe as one readable block."""
    b = report.board
    lines = [
        f"board:        {b.model or '(no device-tree model)'}"
        + (f" ({', '.join(b.compatible)})" if b.compatible else ""),
        f"cpu:          {b.cpu_text() or 'unknown'} ({b.cores} cores, {b.arch})",
        f"executorch:   {report.executorch.version or 'not installed'}; backends: "
        + (", ".join(report.executorch.registered_backends) or report.executorch.error or "none"),
    ]
    native = report.native_runtime
    if native is not None and native.status == "ok":
        lines.append(
            f"native:       {native.path}; backends: {', '.join(native.registered_backends) or 'none'}"
            f" ({native.backends_from}){'; bundled IO' if native.bundle_io else ''}"
        )
    elif native is not None:
        lines.append(f"native:       {native.status}")
    if report.vulkan_devices:
        for d in report.vulkan_devices:
            limit = d.limits.get("maxImageDimension3D")
            lines.append(
                f"vulkan GPU{d.index}:  {d.name} [{d.vendor}, {d.device_type or '?'}"
                f"{', software' if d.software else ''}] driver "
                f"{d.driver_name or '?'} {d.driver_info or d.driver_version or ''}, "
                f"API {d.api_version or '?'}" + (f", maxImageDimension3D {limit}" if limit else "")
            )
    else:
        lines.append(f"vulkan:       {report.vulkan_status}")
    if report.baseline is not None:
        eager = report.baseline
        lines.append(
            f"baseline:     eager PyTorch {eager.torch}, lerobot {eager.lerobot}"
            if eager.status == "ok"
            else f"baseline:     none ({eager.status})"
        )
    temps = [f"{z.type or z.name} {z.temp_c:.0f}°C" for z in report.thermal_zones if z.temp_c is not None]
    lines.append(f"thermal:      {', '.join(temps) if temps else 'no thermal zones'}")
    lines.append(f"classes:      {', '.join(report.device_classes) or 'none'}")
    lines.extend(f"  no {backend}: {why}" for backend, why in report.not_offered.items())
    return "\n".join(lines)
