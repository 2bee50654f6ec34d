"""Boards the farm is for, as the probe would read them: device tree, ``vulkaninfo --summary``, and the
limits section of the full ``vulkaninfo`` output (in vulkaninfo's own layout).

No such board was at hand: each fixture is built from published facts, and ``sources`` says, per
figure, where it comes from. A figure marked *representative* is a plausible value for that driver
(its usual encoding or a neighbouring release), not one read off a published report.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class BoardFixture:
    name: str
    model: str | None  # /proc/device-tree/model
    compatible: tuple[str, ...]  # /proc/device-tree/compatible, most specific first
    summary: str  # vulkaninfo --summary
    full: str  # the part of the full vulkaninfo output the probe reads (per GPU, its limits)
    sources: dict[str, str] = field(default_factory=dict)
    stderr: str = ""  # what vulkaninfo writes to stderr (its loader errors)

    def install(self, root: Path) -> tuple[Path, Path]:
        """Write the board's /proc under ``root/tree`` and a stand-in ``vulkaninfo`` that prints this
        fixture under ``root/bin``; returns (tree, bin)."""
        tree, bin_dir = root / "tree", root / "bin"
        device_tree = tree / "proc" / "device-tree"
        device_tree.mkdir(parents=True)
        if self.model is not None:
            (device_tree / "model").write_bytes(self.model.encode() + b"\0")  # the kernel NUL-terminates
        (device_tree / "compatible").write_bytes(b"".join(c.encode() + b"\0" for c in self.compatible))
        (tree / "proc" / "cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 48.00\n")
        bin_dir.mkdir()
        for name, text in (
            ("summary.txt", self.summary),
            ("full.txt", self.full),
            ("stderr.txt", self.stderr),
        ):
            (root / name).write_text(text)
        script = bin_dir / "vulkaninfo"  # STAND-IN for vulkaninfo: prints the fixture, as recorded
        script.write_text(
            "#!/bin/sh\n"
            f'cat "{root}/stderr.txt" >&2\n'
            f'if [ "$1" = "--summary" ]; then cat "{root}/summary.txt"; else cat "{root}/full.txt"; fi\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return tree, bin_dir


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


_HEADER = """\
==========
VULKANINFO
==========

Vulkan Instance Version: {instance}

Devices:
========
"""


def _summary(instance: str, fields: dict[str, str]) -> str:
    width = max(len(key) for key in fields)
    body = "".join(f"\t{key:<{width}} = {value}\n" for key, value in fields.items())
    return _HEADER.format(instance=instance) + "GPU0:\n" + body


def _full(limits: dict[str, int], api: str, name: str) -> str:
    rows = "".join(f"\t{key:<47} = {value}\n" for key, value in limits.items())
    return (
        "Device Properties and Extensions:\n=================================\nGPU0:\n"
        f"VkPhysicalDeviceProperties:\n---------------------------\n\tapiVersion        = {api}\n"
        f"\tdeviceName        = {name}\n\nVkPhysicalDeviceLimits:\n-----------------------\n{rows}"
    )


ROCK_5B_MODEL = "Radxa ROCK 5B"
ROCK_5B_COMPATIBLE = ("radxa,rock-5b", "rockchip,rk3588")
BOARD_SOURCE = "model and compatible: Linux's arch/arm64/boot/dts/rockchip/rk3588-rock-5b.dts"

MALI_PANVK_LIMITS = {
    "maxImageDimension1D": 65536,
    "maxImageDimension2D": 16383,
    "maxImageDimension3D": 512,
    "maxStorageBufferRange": 4294967295,
    "maxPushConstantsSize": 256,
    "maxComputeSharedMemorySize": 32768,
    "maxComputeWorkGroupInvocations": 1024,
}
RK3588_PANVK = BoardFixture(
    name="rk3588-mali-g610-panvk",
    model=ROCK_5B_MODEL,
    compatible=ROCK_5B_COMPATIBLE,
    summary=_summary(
        "1.4.309",
        {
            "apiVersion": "1.1.305",
            "driverVersion": "25.0.7",
            "vendorID": "0x13b5",
            "deviceID": "0xa8670000",
            "deviceType": "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU",
            "deviceName": "Mali-G610",
            "driverID": "DRIVER_ID_MESA_PANVK",
            "driverName": "panvk",
            "driverInfo": "Mesa 25.0.7",
            "conformanceVersion": "1.4.1.2",
        },
    ),
    full=_full(MALI_PANVK_LIMITS, "1.1.305 (4198705)", "Mali-G610"),
    sources={
        "board": BOARD_SOURCE,
        "device": "deviceName Mali-G610, vendorID 0x13b5, deviceID 0xa8670000, apiVersion 1.1.305 and "
        "driverVersion 0x6400007 (= Mesa 25.0.7) as `vkgears -info` printed them on an Orange Pi "
        "RK3588 board (github.com/X11Libre/xserver issue 396)",
        "driver": "driverID/driverName panvk: Mesa's panvk_physical_device.c (VK_DRIVER_ID_MESA_PANVK); "
        "driverInfo follows Mesa's 'Mesa <version>' form; Vulkan 1.1 conformance on the Mali-G610 from "
        "Mesa 25.0.2 (Collabora's announcement)",
        "limits": "Mesa panvk_physical_device.c for PAN_ARCH 10 (the G610): 1D 1<<16, 2D (1<<14)-1, "
        "3D 1<<9, maxStorageBufferRange UINT32_MAX, maxPushConstantsSize 256, shared memory 32768; "
        "maxComputeWorkGroupInvocations is the kernel's max_threads_per_wg: 1024 is representative",
        "instance": "Vulkan Instance Version 1.4.309 and conformanceVersion: representative",
    },
)

RK3588_ARM_DRIVER = BoardFixture(
    name="rk3588-mali-g610-arm",
    model="Xunlong Orange Pi 5",
    compatible=("xunlong,orangepi-5", "rockchip,rk3588s"),
    summary=_summary(
        "1.3.239",
        {
            "apiVersion": "1.3.261",
            "driverVersion": "24.0.0",
            "vendorID": "0x13B5",
            "deviceID": "0xa8670000",
            "deviceType": "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU",
            "deviceName": "Mali-G610 MC4",
            "driverID": "DRIVER_ID_ARM_PROPRIETARY",
            "driverName": "Arm Mali driver",
            "driverInfo": "g24p0-00eac0",
            "conformanceVersion": "1.3.6.0",
        },
    ),
    full=_full(
        {
            "maxImageDimension1D": 65536,
            "maxImageDimension2D": 65536,
            "maxImageDimension3D": 65536,
            "maxStorageBufferRange": 4294967295,
            "maxPushConstantsSize": 128,
            "maxComputeSharedMemorySize": 32768,
            "maxComputeWorkGroupInvocations": 1024,
        },
        "1.3.261 (4206853)",
        "Mali-G610 MC4",
    ),
    sources={
        "board": "model and compatible: Linux's arch/arm64/boot/dts/rockchip/rk3588s-orangepi-5.dts "
        "(the RK3588S, the same SoC and GPU)",
        "device": "vendor 0x13B5 (Arm) and the Mali-G610 MC4 of the RK3588 (Rockchip's and Arm's "
        "product pages); deviceID as panvk reports the same GPU",
        "driver": "driverInfo g24p0-00eac0: the arm_release_ver that Rockchip's libmali-valhall-g610 "
        "g24p0 prints on an RK3588 (github.com/JeffyCN/mirrors issue 44); driverID "
        "DRIVER_ID_ARM_PROPRIETARY is the Vulkan registry's id for Arm's driver",
        "representative": "apiVersion, driverVersion's encoding, driverName, conformanceVersion and "
        "every limit: representative of Arm's Valhall driver, not read off a G610 report",
    },
)

# Turnip exposes what Qualcomm's driver does for the limits the probe keeps (see each fixture's sources).
ADRENO_750_LIMITS = {
    "maxImageDimension1D": 16384,
    "maxImageDimension2D": 16384,
    "maxImageDimension3D": 2048,
    "maxStorageBufferRange": 134217728,
    "maxPushConstantsSize": 256,
    "maxComputeSharedMemorySize": 32768,
    "maxComputeWorkGroupInvocations": 1024,
}
ADRENO_750_QUALCOMM = BoardFixture(
    name="sm8650-adreno-750-qualcomm",
    model="Qualcomm Technologies, Inc. SM8650 QRD",
    compatible=("qcom,sm8650-qrd", "qcom,sm8650"),
    summary=_summary(
        "1.3.128",
        {
            "apiVersion": "1.3.128",
            "driverVersion": "512.762.10",
            "vendorID": "0x5143",
            "deviceID": "0x43051401",
            "deviceType": "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU",
            "deviceName": "Adreno (TM) 750",
            "driverID": "DRIVER_ID_QUALCOMM_PROPRIETARY",
            "driverName": "Qualcomm Technologies Inc. Adreno Vulkan Driver",
            "driverInfo": "Driver Build: 1394a2c7a8, Id12349e41b, 1708672982",
            "conformanceVersion": "1.3.5.0",
        },
    ),
    full=_full(
        ADRENO_750_LIMITS,
        "1.3.128 (4206720)",
        "Adreno (TM) 750",
    ),
    sources={
        "board": "model and compatible: Linux's arch/arm64/boot/dts/qcom/sm8650-qrd.dts (Snapdragon 8 "
        "Gen 3, whose GPU is the Adreno 750)",
        "device": "deviceName 'Adreno (TM) 750' and vendor 0x5143 (Qualcomm) as Android reports them "
        "(`dumpsys` GLES line 'Qualcomm, Adreno (TM) 750, OpenGL ES 3.2 V@0762.10 (GIT@1394a2c7a8, "
        "Id12349e41b, 1708672982)' quoted in public build notes)",
        "driver": "driverInfo's build ids and driverVersion 512.762.10 from that V@0762.10 driver; the "
        "512.<major>.<minor> encoding and the driverName are representative of Qualcomm's driver",
        "limits": "maxStorageBufferRange 1<<27 'matches the latest Qualcomm driver' (Mesa tu_common.h); "
        "1D/2D 16384 and 3D 2048 as turnip exposes them for the same GPU (Mesa tu_device.c); push "
        "constants, shared memory, invocations, apiVersion, deviceID: representative",
    },
)

ADRENO_750_TURNIP = BoardFixture(
    name="sm8650-adreno-750-turnip",
    model="Qualcomm Technologies, Inc. SM8650 HDK",
    compatible=("qcom,sm8650-hdk", "qcom,sm8650"),
    summary=_summary(
        "1.4.309",
        {
            "apiVersion": "1.4.305",
            "driverVersion": "25.1.0",
            "vendorID": "0x5143",
            "deviceID": "0x43051401",
            "deviceType": "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU",
            "deviceName": "Turnip Adreno (TM) 750",
            "driverID": "DRIVER_ID_MESA_TURNIP",
            "driverName": "turnip Mesa driver",
            "driverInfo": "Mesa 25.1.0",
            "conformanceVersion": "1.4.0.0",
        },
    ),
    full=_full(
        ADRENO_750_LIMITS,
        "1.4.305 (4210993)",
        "Turnip Adreno (TM) 750",
    ),
    sources={
        "board": "model and compatible: Linux's arch/arm64/boot/dts/qcom/sm8650-hdk.dts",
        "device": "deviceName 'Turnip Adreno (TM) 750' as applications log it on Snapdragon 8 Gen 3 "
        "devices running turnip; vendorID 0x5143 and device type from Mesa tu_device.c",
        "limits": "Mesa tu_device.c / tu_common.h: 1D/2D 1<<14, 3D 1<<11, maxStorageBufferRange 1<<27, "
        "MAX_PUSH_CONSTANTS_SIZE 256; shared memory (the GPU's cs_shared_mem_size) and invocations "
        "(1024, or 2048 with double thread size): representative",
        "representative": "Mesa version, apiVersion, deviceID, driverName's wording, conformanceVersion",
    },
)

H200 = BoardFixture(
    name="h200-nvidia",
    model=None,  # x86 hosts have no device tree
    compatible=(),
    summary=_summary(
        "1.4.312",
        {
            "apiVersion": "1.4.312",
            "driverVersion": "580.159.4.0",
            "vendorID": "0x10de",
            "deviceID": "0x2335",
            "deviceType": "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU",
            "deviceName": "NVIDIA H200",
            "driverID": "DRIVER_ID_NVIDIA_PROPRIETARY",
            "driverName": "NVIDIA",
            "driverInfo": "580.159.04",
            "conformanceVersion": "1.4.1.3",
        },
    ),
    full=_full(
        {
            "maxImageDimension1D": 32768,
            "maxImageDimension2D": 32768,
            "maxImageDimension3D": 16384,
            "maxStorageBufferRange": 4294967295,
            "maxPushConstantsSize": 256,
            "maxComputeSharedMemorySize": 49152,
            "maxComputeWorkGroupInvocations": 1024,
        },
        "1.4.312 (4211000)",
        "NVIDIA H200",
    ),
    sources={
        "recorded": "on the farm's H200 host: nvidia-smi's name 'NVIDIA H200' and driver 580.159.04, "
        "and api_version 1.4.312 in the driver's nvidia_icd.json (the Vulkan version the runs used)",
        "driver": "driverInfo is NVIDIA's driver version string; driverVersion 580.159.4.0 is how "
        "vulkaninfo decodes NVIDIA's packed version of 580.159.04",
        "limits": "NVIDIA's driver reports these for its current GPUs (an RTX 4060 capture: 32768, 32768, "
        "16384, 4294967295, 256, 49152, 1024); representative for the H200, not read off it",
        "representative": "deviceID (the H200 SXM's PCI id), conformanceVersion",
    },
)

# An RK3588 board whose Vulkan loader finds no driver at all: the Mali ICD fails to open the kernel
# driver and nothing else is installed.
RK3588_NO_DRIVER = BoardFixture(
    name="rk3588-no-driver",
    model=ROCK_5B_MODEL,
    compatible=ROCK_5B_COMPATIBLE,
    summary=_HEADER.format(instance="1.3.239").split("Devices:")[0],
    full="",
    stderr=(
        "ERROR: [Loader Message] Code 0 : setup_loader_term_phys_devs:  Failed to detect any valid GPUs "
        "in the current config\nERROR at ./vulkaninfo/vulkaninfo.h:247:vkEnumeratePhysicalDevices failed "
        "with ERROR_INITIALIZATION_FAILED\n"
    ),
    sources={
        "board": BOARD_SOURCE,
        "stderr": "the loader's messages when no ICD yields a device, as posted from an RK3399 board "
        "(github.com/KhronosGroup/Vulkan-Tools issue 633) and an Orange Pi 5 "
        "(github.com/Bleach665/Mali610Vulkan issue 1)",
    },
)

# An RK3588 board with Mesa's llvmpipe but no Mali driver: the Vulkan device found is the CPU.
RK3588_LLVMPIPE_ONLY = BoardFixture(
    name="rk3588-llvmpipe-only",
    model=ROCK_5B_MODEL,
    compatible=ROCK_5B_COMPATIBLE,
    summary=_summary(
        "1.3.239",
        {
            "apiVersion": "1.3.230",
            "driverVersion": "0.0.1",
            "vendorID": "0x10005",
            "deviceID": "0x0000",
            "deviceType": "PHYSICAL_DEVICE_TYPE_CPU",
            "deviceName": "llvmpipe (LLVM 15.0.6, 128 bits)",
            "driverID": "DRIVER_ID_MESA_LLVMPIPE",
            "driverName": "llvmpipe",
            "driverInfo": "Mesa 22.3.6 (LLVM 15.0.6)",
            "conformanceVersion": "1.3.1.1",
        },
    ),
    full=_full({"maxImageDimension3D": 4096}, "1.3.230 (4206822)", "llvmpipe (LLVM 15.0.6, 128 bits)"),
    sources={
        "board": BOARD_SOURCE,
        "device": "Debian bookworm's Mesa 22.3.6 llvmpipe, as vulkaninfo prints it on this farm's x86 "
        "machine (128 bits: the arm64 vector width); 'I can only get LLVMpipe with vulkan' on an "
        "Orange Pi 5 (github.com/Bleach665/Mali610Vulkan issue 1)",
    },
)

SWIFTSHADER = BoardFixture(
    name="swiftshader",
    model=None,
    compatible=(),
    summary=_summary(
        "1.3.239",
        {
            "apiVersion": "1.3.0",
            "driverVersion": "5.0.0",
            "vendorID": "0x1AE0",
            "deviceID": "0xC0DE",
            "deviceType": "PHYSICAL_DEVICE_TYPE_CPU",
            "deviceName": "SwiftShader Device (Subzero)",
            "driverID": "DRIVER_ID_GOOGLE_SWIFTSHADER",
            "driverName": "SwiftShader driver",
            "driverInfo": "",
            "conformanceVersion": "1.3.0.0",
        },
    ),
    full="",
    sources={
        "device": "vendor 0x1AE0 (Google), device 0xC0DE and the 'SwiftShader Device (Subzero)' name as "
        "SwiftShader's VkConfig.hpp/VkPhysicalDevice.cpp define them; versions representative"
    },
)

WITH_GPU = (RK3588_PANVK, RK3588_ARM_DRIVER, ADRENO_750_QUALCOMM, ADRENO_750_TURNIP, H200)
