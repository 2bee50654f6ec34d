"""The board this host is, from its ``/proc``: the device tree's model and ``compatible`` entries, the CPU's
model and vector extensions, the cores and the architecture. A device runner's probe reports it, and an
eager baseline records the host it was timed on with it (``coverfarm.device_result.Board``).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from coverfarm.device_result import Board

# The vector extensions CPU kernels choose between (XNNPACK's microkernels: x86 by AVX2 / AVX-512 / VNNI /
# AMX, arm64 by dot product, fp16, i8mm, bf16, SVE), in /proc/cpuinfo's names ("flags" on x86, "Features"
# on arm64), in this order.
KERNEL_FEATURES = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "asimdhp", "asimddp", "fphp", "i8mm", "bf16", "sve", "sve2", "sme",
)  # fmt: skip


def board(root: Path = Path("/")) -> Board:
    """The board from ``root``'s /proc (a fixture's tree in tests)."""
    model = read_or_none(root / "proc/device-tree/model")
    compatible = read_or_none(root / "proc/device-tree/compatible") or ""
    cpu_model = None
    flags: set[str] = set()
    cpuinfo = read_or_none(root / "proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        # x86 says "model name"; arm64 kernels often only say "Hardware" or nothing at all.
        if key.strip() in ("model name", "Hardware", "Model") and value.strip() and cpu_model is None:
            cpu_model = value.strip()
        elif key.strip() in ("flags", "Features") and not flags:  # the first CPU's
            flags = set(value.split())
    return Board(
        model=model.rstrip("\0").strip() if model else None,
        compatible=[entry for entry in compatible.split("\0") if entry.strip()],
        cpu_model=cpu_model,
        cpu_features=[name for name in KERNEL_FEATURES if name in flags],
        cores=os.cpu_count() or 1,
        arch=platform.machine(),
    )


def read_or_none(path: Path) -> str | None:
    """The text of ``path`` (bytes that are not UTF-8 replaced), or None where it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None
