"""The probe on the boards the farm is for (fixtures in boards.py, each labelled with its sources): the
device class, the driver and the limits it derives, and why a board without a GPU driver offers none.

Each test writes the board's /proc and puts a stand-in ``vulkaninfo`` that prints the fixture first on
PATH, so the probe's own subprocess call and parsers run. The runtime is given as one that registers
``VulkanBackend`` (as a Vulkan host's ``executor_runner`` does), since the classes are what is tested.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from boards import (
    ADRENO_750_QUALCOMM,
    ADRENO_750_TURNIP,
    H200,
    RK3588_ARM_DRIVER,
    RK3588_LLVMPIPE_ONLY,
    RK3588_NO_DRIVER,
    RK3588_PANVK,
    SWIFTSHADER,
    WITH_GPU,
    BoardFixture,
    path_with,
)

from coverfarm.device_result import Board, ExecutorchInfo, ProbeReport, VulkanDevice
from farmrun.board import board
from gpu_runner.probe import (
    EMULATION_LAYERS,
    describe,
    device_classes,
    emulation_layers,
    probe,
    vulkan_devices,
)

VULKAN_RUNTIME = ExecutorchInfo(version="1.5.1", registered_backends=["VulkanBackend", "XnnpackBackend"])
NEEDS_MALI_DRIVER = (
    "this board's Mali-G610 (rockchip,rk3588) has no Vulkan driver here: on Linux it needs Arm's Mali "
    "driver (libmali-valhall-g610 with Vulkan, vendor 0x13B5) or Mesa's panvk (Mesa 25.0.2 or newer"
)


def probe_fixture(
    fixture: BoardFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Board, list[VulkanDevice], str, list[str], dict[str, str]]:
    tree, bin_dir = fixture.install(tmp_path)
    monkeypatch.setenv("PATH", path_with(bin_dir))
    host = board(tree)
    devices, status = vulkan_devices()
    classes, not_offered = device_classes(host, devices, status, VULKAN_RUNTIME)
    return host, devices, status, classes, not_offered


@pytest.mark.parametrize(
    ("fixture", "device_class", "vendor", "driver", "api", "limits"),
    [
        (
            RK3588_PANVK,
            "mali-g610-vulkan",
            "ARM",
            ("DRIVER_ID_MESA_PANVK", "panvk", "Mesa 25.0.7"),
            "1.1.305",
            {
                "maxImageDimension3D": 512,
                "maxStorageBufferRange": 4294967295,
                "maxComputeSharedMemorySize": 32768,
            },
        ),
        (
            RK3588_ARM_DRIVER,
            "mali-g610-vulkan",
            "ARM",
            ("DRIVER_ID_ARM_PROPRIETARY", "Arm Mali driver", "g24p0-00eac0"),
            "1.3.261",
            {"maxImageDimension3D": 65536, "maxPushConstantsSize": 128},
        ),
        (
            ADRENO_750_QUALCOMM,
            "adreno-750-vulkan",
            "Qualcomm",
            (
                "DRIVER_ID_QUALCOMM_PROPRIETARY",
                "Qualcomm Technologies Inc. Adreno Vulkan Driver",
                "Driver Build: 1394a2c7a8, Id12349e41b, 1708672982",
            ),
            "1.3.128",
            {"maxImageDimension3D": 2048, "maxStorageBufferRange": 134217728},
        ),
        (
            ADRENO_750_TURNIP,
            "adreno-750-vulkan",
            "Qualcomm",
            ("DRIVER_ID_MESA_TURNIP", "turnip Mesa driver", "Mesa 25.1.0"),
            "1.4.305",
            {"maxImageDimension2D": 16384, "maxPushConstantsSize": 256},
        ),
        (
            H200,
            "h200-vulkan",
            "NVIDIA",
            ("DRIVER_ID_NVIDIA_PROPRIETARY", "NVIDIA", "580.159.04"),
            "1.4.312",
            {"maxImageDimension3D": 16384, "maxComputeSharedMemorySize": 49152},
        ),
    ],
    ids=lambda value: value.name if isinstance(value, BoardFixture) else None,
)
def test_the_probe_derives_class_driver_and_limits(
    fixture: BoardFixture,
    device_class: str,
    vendor: str,
    driver: tuple[str, str, str],
    api: str,
    limits: dict[str, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host, devices, status, classes, not_offered = probe_fixture(fixture, tmp_path, monkeypatch)
    assert (host.model, tuple(host.compatible)) == (fixture.model, fixture.compatible)
    assert status == "ok"
    (device,) = devices
    assert (device.vendor, device.software) == (vendor, False)
    assert device.device_type in ("INTEGRATED_GPU", "DISCRETE_GPU")
    assert (device.driver_id, device.driver_name, device.driver_info, device.api_version) == (*driver, api)
    assert limits.items() <= device.limits.items()
    assert set(device.limits) == {  # every limit the probe keeps, read from the full output
        "maxImageDimension1D", "maxImageDimension2D", "maxImageDimension3D", "maxStorageBufferRange",
        "maxPushConstantsSize", "maxComputeSharedMemorySize", "maxComputeWorkGroupInvocations",
    }  # fmt: skip
    assert classes == [f"cpu-{host.arch}-xnnpack", device_class]
    # A runtime without OpenVINO's delegate offers no OpenVINO class and says why, in its own terms.
    assert not_offered == {
        "openvino": "OpenvinoBackend is not registered in the ExecuTorch runtime 1.5.1",
        "vgf": "VgfBackend is not registered in the ExecuTorch runtime 1.5.1",
    }
    report = ProbeReport(
        board=host, vulkan_devices=devices, vulkan_status=status, executorch=VULKAN_RUNTIME,
        device_classes=classes, not_offered=not_offered,
    )  # fmt: skip
    assert f"classes:      cpu-{host.arch}-xnnpack, {device_class}" in describe(report)


def test_fixtures_say_where_their_figures_come_from() -> None:
    for fixture in (*WITH_GPU, RK3588_NO_DRIVER, RK3588_LLVMPIPE_ONLY, SWIFTSHADER):
        assert fixture.sources and all(text.strip() for text in fixture.sources.values()), fixture.name


def test_a_mali_board_without_a_vulkan_driver_says_which_driver_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, devices, status, classes, not_offered = probe_fixture(RK3588_NO_DRIVER, tmp_path, monkeypatch)
    assert host.compatible == ["radxa,rock-5b", "rockchip,rk3588"]
    assert devices == []
    assert status.startswith("none: no Vulkan loader or device found")
    assert "vkEnumeratePhysicalDevices failed with ERROR_INITIALIZATION_FAILED" in status
    assert not any(name.endswith("-vulkan") for name in classes)
    assert (
        not_offered["vulkan"]
        == f"no Vulkan GPU: {status}; {NEEDS_MALI_DRIVER}: Vulkan 1.1 conformant on the Mali-G610)"
    )


def test_llvmpipe_on_a_mali_board_is_no_gpu_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, devices, _, classes, not_offered = probe_fixture(RK3588_LLVMPIPE_ONLY, tmp_path, monkeypatch)
    (llvmpipe,) = devices
    assert llvmpipe.software and llvmpipe.device_type == "CPU"
    assert not any(name.endswith("-vulkan") for name in classes)  # and never llvmpipe-vulkan
    assert not_offered["llvmpipe-vulkan"] == (
        "llvmpipe (LLVM 15.0.6, 128 bits) is a software Vulkan device (it runs on the CPU), never a GPU class"
    )
    assert not_offered["vulkan"].startswith("no Vulkan GPU: only software devices; " + NEEDS_MALI_DRIVER)


def test_swiftshader_is_no_gpu_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, devices, _, classes, not_offered = probe_fixture(SWIFTSHADER, tmp_path, monkeypatch)
    (swiftshader,) = devices
    assert (swiftshader.vendor, swiftshader.software) == ("Google", True)
    assert not any(name.endswith("-vulkan") for name in classes)
    assert "is a software Vulkan device" in not_offered["swiftshader-device-vulkan"]
    assert not_offered["vulkan"] == "no Vulkan GPU: only software devices"  # no SoC to name a driver for


def test_a_software_device_beside_a_gpu_leaves_the_gpu_class() -> None:
    gpu = VulkanDevice(index=0, name="NVIDIA H200", vendor="NVIDIA", device_type="DISCRETE_GPU")
    cpu = VulkanDevice(index=1, name="llvmpipe (LLVM 15.0.6, 256 bits)", vendor="Mesa", software=True)
    classes, not_offered = device_classes(Board(cores=16, arch="x86_64"), [gpu, cpu], "ok", VULKAN_RUNTIME)
    assert classes == ["cpu-x86_64-xnnpack", "h200-vulkan"]
    # VULKAN_RUNTIME has neither OpenvinoBackend nor VgfBackend
    assert list(not_offered) == ["openvino", "vgf", "llvmpipe-vulkan"]


def test_a_mali_board_without_vulkaninfo_also_names_its_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, _ = RK3588_PANVK.install(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    devices, status = vulkan_devices()
    assert (devices, status) == ([], "none: vulkaninfo not installed (package vulkan-tools)")
    _, not_offered = device_classes(board(tree), devices, status, VULKAN_RUNTIME)
    assert not_offered["vulkan"].startswith(f"no Vulkan GPU: {status}; {NEEDS_MALI_DRIVER}")


def test_a_host_declares_its_own_cpu_class() -> None:
    """The H200 host's 16 cores are not the 2-core VM's: a declared CPU class keeps their XNNPACK cells
    apart, and without one the class stays cpu-<arch>-xnnpack."""
    gpu = VulkanDevice(index=0, name="NVIDIA H200", vendor="NVIDIA", device_type="DISCRETE_GPU")
    host = Board(cores=16, arch="x86_64")
    declared, _ = device_classes(host, [gpu], "ok", VULKAN_RUNTIME, declared_cpu_class="h200-host-xnnpack")
    assert declared == ["h200-host-xnnpack", "h200-vulkan"]
    default, _ = device_classes(host, [gpu], "ok", VULKAN_RUNTIME, declared_cpu_class="")
    assert default == ["cpu-x86_64-xnnpack", "h200-vulkan"]


@pytest.mark.parametrize("declared", ["h200-host-vulkan", "H200 host", "h200-host-xnnpack-"])
def test_a_malformed_cpu_class_is_not_offered_and_says_why(declared: str) -> None:
    classes, not_offered = device_classes(
        Board(cores=16, arch="x86_64"), [], "none", VULKAN_RUNTIME, declared_cpu_class=declared
    )
    assert not any(name.endswith("-xnnpack") for name in classes)
    assert not_offered["xnnpack"].startswith(f"COVERFARM_CPU_CLASS={declared!r} is refused: ")


def test_the_probe_reads_the_declared_cpu_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpu_runner.probe.executorch_info", lambda ask=True: VULKAN_RUNTIME)
    monkeypatch.setenv("COVERFARM_CPU_CLASS", "h200-host-xnnpack")
    assert "h200-host-xnnpack" in probe(python_runtime=False).device_classes
    monkeypatch.delenv("COVERFARM_CPU_CLASS")
    assert f"cpu-{platform.machine()}-xnnpack" in probe(python_runtime=False).device_classes


WHEEL_RUNTIME = ExecutorchInfo(
    version="1.5.1", registered_backends=["OpenvinoBackend", "QnnBackend", "VgfBackend", "XnnpackBackend"]
)
LAVAPIPE = VulkanDevice(index=0, name="llvmpipe (LLVM 15.0.6, 256 bits)", vendor="Mesa", software=True)
NO_TENSORS = (
    "[VGFBackend.cpp:898] Vulkan driver does not support ARM tensor extensions (VK_ARM_tensors) / "
    "[VGFBackend.cpp:429] Failed to initialize the Vulkan device error 0xFFFFFFF8"
)


def test_a_vgf_class_through_the_emulation_layers_is_named_emulated() -> None:
    """The wheel's runtime says VgfBackend is available over lavapipe through the ML SDK's layers: the
    class names the device beneath them as emulated, and lavapipe is still no Vulkan class."""
    host = Board(cores=2, arch="x86_64")
    classes, not_offered = device_classes(host, [LAVAPIPE], "ok", WHEEL_RUNTIME, emulated=True)
    assert classes == ["cpu-x86_64-openvino", "cpu-x86_64-xnnpack", "emulated-llvmpipe-vgf"]
    assert "vgf" not in not_offered and "is a software Vulkan device" in not_offered["llvmpipe-vulkan"]
    mali = VulkanDevice(index=0, name="Mali-G610 MC4", vendor="ARM", device_type="INTEGRATED_GPU")
    emulated, _ = device_classes(host, [mali], "ok", WHEEL_RUNTIME, emulated=True)
    native, _ = device_classes(host, [mali], "ok", WHEEL_RUNTIME, emulated=False)
    assert (emulated[-1], native[-1]) == ("emulated-mali-g610-vgf", "mali-g610-vgf")


def test_a_vgf_backend_the_runtime_calls_unavailable_offers_no_class_in_its_words() -> None:
    runtime = WHEEL_RUNTIME.model_copy(update={"unavailable": {"VgfBackend": NO_TENSORS}})
    classes, not_offered = device_classes(Board(cores=2, arch="x86_64"), [LAVAPIPE], "ok", runtime)
    assert not any(name.endswith("-vgf") for name in classes)
    assert not_offered["vgf"] == (
        f"VgfBackend is not available (without the ML SDK's emulation layers): {NO_TENSORS}"
    )


def test_the_emulation_layers_are_read_from_the_loaders_variables() -> None:
    both = "VK_LAYER_ML_Graph_Emulation:VK_LAYER_ML_Tensor_Emulation"
    assert emulation_layers({"VK_INSTANCE_LAYERS": both}) == list(EMULATION_LAYERS)
    assert emulation_layers({"VK_LOADER_LAYERS_ENABLE": "VK_LAYER_ML_Tensor_Emulation"}) == [
        "VK_LAYER_ML_Tensor_Emulation"
    ]
    assert emulation_layers({"VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation"}) == []


@pytest.mark.parametrize(
    ("cpuinfo", "model", "features"),
    [
        (  # a 2-core cloud VM: a family's name, AVX2 and no AVX-512
            "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx f16c fma avx2 bmi2\n\n"
            "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx f16c fma avx2 bmi2\n",
            "AMD EPYC",
            ["avx", "avx2", "fma", "f16c"],
        ),
        (
            "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
            "flags\t\t: avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile "
            "amx_int8\n",
            "Intel(R) Xeon(R) Platinum 8480+",
            [
                "avx",
                "avx2",
                "fma",
                "f16c",
                "avx512f",
                "avx512bw",
                "avx512vl",
                "avx512_vnni",
                "avx512_bf16",
                "amx_tile",
                "amx_int8",
            ],
        ),
        (  # an RK3588's Cortex-A76 cores: arm64 says "Features", and often no model name
            "processor\t: 4\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes crc32 atomics fphp asimdhp "
            "asimddp lrcpc dcpop\nCPU part\t: 0xd0b\n",
            None,
            ["asimd", "asimdhp", "asimddp", "fphp"],
        ),
    ],
    ids=["epyc-avx2", "xeon-amx", "cortex-a76"],
)
def test_the_board_records_the_cpus_vector_extensions(
    cpuinfo: str, model: str | None, features: list[str], tmp_path: Path
) -> None:
    """One model name spans machines whose XNNPACK kernels differ (act's bundle has read 77.7 to 457 ms on
    2-core VMs of one kind): the board records the extensions the kernels pick between."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(cpuinfo)
    host = board(tmp_path)
    assert (host.cpu_model, host.cpu_features) == (model, features)
    expected = f"{model or 'CPU'} ({', '.join(features)})"
    assert host.cpu_text() == expected
    report = ProbeReport(board=host, vulkan_devices=[], vulkan_status="ok", executorch=VULKAN_RUNTIME)
    assert f"cpu:          {expected} ({host.cores} cores, {host.arch})" in describe(report)
