"""Latency statistics from raw samples; the probe's parsers and its ``--json`` document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coverfarm.device_result import TimingRules
from coverfarm_cli import main
from farmrun.stats import latency_stats
from gpu_runner.probe import gpu_slug, parse_limits, parse_summary, thermal_zones


def test_stats_from_raw_samples() -> None:
    samples = [10.0, 12.0, 11.0, 13.0, 9.0, 10.0, 11.0, 12.0, 10.0, 30.0]
    stats = latency_stats(samples, warmup=2, load_ms=5.0)
    assert stats.samples_ms == samples  # every raw sample kept, in order
    assert stats.iterations == 10 and stats.warmup == 2 and stats.load_ms == 5.0
    assert stats.median_ms == 11.0
    assert stats.min_ms == 9.0
    assert stats.mean_ms == pytest.approx(12.8)
    # p90 by linear interpolation between the 9th (13) and 10th (30) sorted samples: 13 + 0.1 * 17.
    assert stats.p90_ms == pytest.approx(14.7)
    std = (sum((s - 12.8) ** 2 for s in samples) / 9) ** 0.5
    assert stats.cv == pytest.approx(std / 12.8)
    assert not stats.stable


def test_steady_samples_of_one_replica_have_no_interval() -> None:
    stats = latency_stats([100.0, 101.0, 99.0, 100.0, 100.5], warmup=0, load_ms=0.0)
    assert stats.cv < 0.05 and not stats.stable
    assert stats.unstable_reasons == [
        "1 replica (the rules ask for 5)",
        "1 replica: no interval (needs at least 2)",
    ]
    single = latency_stats([100.0, 101.0, 99.0], 0, 0.0, TimingRules(replicas=1))
    assert not single.stable and single.unstable_reasons == ["1 replica: no interval (needs at least 2)"]
    with pytest.raises(ValueError):
        latency_stats([], warmup=0, load_ms=0.0)


SUMMARY = """\
Devices:
========
GPU0:
\tapiVersion         = 1.3.230
\tdriverVersion      = 0.0.1
\tvendorID           = 0x10005
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
\tdriverName         = llvmpipe
\tdriverInfo         = Mesa 22.3.6 (LLVM 15.0.6)
GPU1:
\tapiVersion         = 1.3.261
\tvendorID           = 0x13B5
\tdeviceType         = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU
\tdeviceName         = Mali-G610 MC4
\tdriverName         = panvk
"""
FULL = """\
GPU0:
VkPhysicalDeviceLimits:
\tmaxImageDimension3D                             = 4096
\tmaxStorageBufferRange                           = 134217728
GPU1:
\tmaxImageDimension3D                             = 2048
\tmaxImageDimension3D                             = 1
"""


def test_vulkaninfo_parsing_and_classes() -> None:
    llvmpipe, mali = parse_summary(SUMMARY)
    assert (llvmpipe.name, llvmpipe.vendor, llvmpipe.device_type) == (
        "llvmpipe (LLVM 15.0.6, 256 bits)",
        "Mesa",
        "CPU",
    )
    assert (llvmpipe.driver_name, llvmpipe.api_version) == ("llvmpipe", "1.3.230")
    assert (mali.index, mali.vendor, mali.device_type) == (1, "ARM", "INTEGRATED_GPU")
    assert parse_limits(FULL) == {
        0: {"maxImageDimension3D": 4096, "maxStorageBufferRange": 134217728},
        1: {"maxImageDimension3D": 2048},
    }
    assert [gpu_slug(d.name) for d in (llvmpipe, mali)] == ["llvmpipe", "mali-g610"]
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_slug("Adreno (TM) 740") == "adreno-740"
    assert gpu_slug("Turnip Adreno (TM) 750") == gpu_slug("Adreno (TM) 750") == "adreno-750"
    assert gpu_slug("NVIDIA H200") == "h200"
    assert (llvmpipe.software, mali.software) == (True, False)  # device type CPU: never a GPU class
    assert parse_summary("no devices here") == []


def test_thermal_zones(tmp_path: Path) -> None:
    zone = tmp_path / "thermal_zone0"
    zone.mkdir()
    (zone / "type").write_text("soc-thermal\n")
    (zone / "temp").write_text("48500\n")
    (zones,) = thermal_zones(tmp_path)
    assert (zones.name, zones.type, zones.temp_c) == ("thermal_zone0", "soc-thermal", 48.5)


def test_probe_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runner", "probe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"board", "vulkan_devices", "executorch", "thermal_zones", "device_classes"} <= set(doc)
    assert {"version", "registered_backends"} <= set(doc["executorch"])
    assert doc["board"]["cores"] >= 1 and doc["board"]["arch"]
    if "VulkanBackend" not in doc["executorch"]["registered_backends"]:
        assert not any(c.endswith("-vulkan") for c in doc["device_classes"])
        assert "VulkanBackend is not registered" in doc["not_offered"]["vulkan"]
    if "XnnpackBackend" in doc["executorch"]["registered_backends"]:
        assert f"cpu-{doc['board']['arch']}-xnnpack" in doc["device_classes"]


def test_probe_text_is_one_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runner", "probe"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("board:") and "classes:" in text and "\n\n" not in text.strip()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["/no/such/bundle", "--out", "r.json"], "bundle /no/such/bundle is not a directory"),
        ([".", "--out", "r.json", "--min-chunks", "0"], "--min-chunks: Input should be greater"),
        ([".", "--out", "r.json", "--warmup", "-1"], "--warmup: Input should be greater than or equal to 0"),
        ([".", "--out", "r.json", "--min-seconds", "9", "--max-seconds", "3"], "timing: Value error, max_s"),
        ([".", "--out", "/no/such/dir/r.json"], "cannot write /no/such/dir/r.json"),
    ],
    ids=["bundle", "min-chunks", "warmup", "max-below-min", "out"],
)
def test_run_bundle_mistakes_are_one_line(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runner", "run-bundle", *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"coverfarm: error: {expected}")
